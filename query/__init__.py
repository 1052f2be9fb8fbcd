"""The tuning DSL: grammar, AST, compiler to SPARQL and result shaping (reference: docs/query.md).

```python
from debugtune.query import run_query
result = run_query("suggest for run moe-1 limit 3", store)
```
"""

import importlib
import sys
import types

from debugtune.kg.store import Store
from debugtune.query.errors import DslError, DslNameError, DslSyntaxError, DslValueError
from debugtune.query.execute import compile_text, run_query
from debugtune.query.parser import keywords, parse
from debugtune.query.shape import DslResult

__all__ = ["DslError", "DslNameError", "DslResult", "DslSyntaxError", "DslValueError", "compile_text", "keywords",
           "parse", "run_query"]


class _CallableModule(types.ModuleType):
    """``debugtune.query`` is both this subpackage and the public function (DESIGN §5): calling the
    module runs `debugtune.api.query`, resolved at call time (the front door owns the default store)."""

    def __call__(self, text: str, *, store: Store | None = None) -> DslResult:
        result: DslResult = importlib.import_module("debugtune.api").query(text, store=store)
        return result


sys.modules[__name__].__class__ = _CallableModule
