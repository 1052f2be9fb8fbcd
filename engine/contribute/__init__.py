"""Contribute: solved runs as RDF case packages (RO-Crate), privacy scrubbing, sandbox, feedback, export.

```python
from debugtune.engine.contribute import contribute, ContributeOptions, record_feedback, run_sandbox
from debugtune.engine.contribute import export_knowledge, Scrubber
```

Importing a package into a store is `debugtune.kg.packages.import_package` (the kg layer). See
docs/contribute.md for the package layout, the privacy rules, import safety, feedback and the sandbox.
"""

from debugtune.engine.contribute.errors import ContributeError
from debugtune.engine.contribute.feedback import FeedbackResult, record_feedback, resolve_case
from debugtune.engine.contribute.kb_export import ExportResult, export_knowledge
from debugtune.engine.contribute.package import ContributeOptions, ContributeResult, contribute
from debugtune.engine.contribute.sandbox import SCENARIOS, SandboxSpec, Verdict, run_sandbox
from debugtune.engine.contribute.scrub import Scrubber

__all__ = [
    "SCENARIOS", "ContributeError", "ContributeOptions", "ContributeResult", "ExportResult", "FeedbackResult",
    "SandboxSpec", "Scrubber", "Verdict", "contribute", "export_knowledge", "record_feedback", "resolve_case",
    "run_sandbox",
]
