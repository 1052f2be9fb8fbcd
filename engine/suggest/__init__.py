"""Ranked suggestions for a run and case similarity (DESIGN §4 suggest/query; formulas in docs/query.md).

```python
from debugtune.engine.suggest import suggest, similar_cases, remedy_details, case_similarity, SimilarCase
```
"""

from debugtune.engine.suggest.applicability import Applicability, applicability, applicable_first
from debugtune.engine.suggest.errors import SuggestError
from debugtune.engine.suggest.ranking import remedy_details, risk_rank, suggest, suggestion_sparql
from debugtune.engine.suggest.settings import CRITERIA, SuggestSettings, load_settings
from debugtune.engine.suggest.similarity import (
    SignatureItem,
    SimilarCase,
    StoredCase,
    case_similarity,
    near_misses,
    run_signature,
    similar_cases,
    stored_cases,
)

__all__ = [
    "Applicability", "applicability", "applicable_first", "near_misses",
    "CRITERIA", "SignatureItem", "SimilarCase", "StoredCase", "SuggestError", "SuggestSettings", "case_similarity",
    "load_settings", "remedy_details", "risk_rank", "run_signature", "similar_cases", "stored_cases", "suggest",
    "suggestion_sparql",
]
