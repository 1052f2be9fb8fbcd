"""Report: the diagnosis as pictures in one self-contained HTML page, and the cost of the problem (docs/report.md).

```python
from debugtune.engine.report import build_report, roi, CostConstants
report = build_report(store, "run-1")            # the run must be diagnosed into the store
report.write("report.html"); report.as_dict()     # {"bytes", "plots", "sections", "cost", ...}
roi(70e9, 1024, CostConstants.from_store(store))  # the ROI of a debugging setup (docs/roi.md)
```
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from debugtune.engine.report.cost import CostConstants, ProblemCost, Roi, problem_cost, roi
    from debugtune.engine.report.data import ReportData, gather
    from debugtune.engine.report.errors import ReportError
    from debugtune.engine.report.page import Report, render, shell
    from debugtune.kg.store import Store

# name → module: loaded on first use, so that `engine.report.text` (numbers and units for the CLI) stays light
_LAZY = {"CostConstants": "cost", "ProblemCost": "cost", "Roi": "cost", "problem_cost": "cost", "roi": "cost",
         "ReportError": "errors", "ReportData": "data", "gather": "data", "Report": "page", "render": "page",
         "shell": "page"}

__all__ = [
    "CostConstants", "ProblemCost", "Report", "ReportData", "ReportError", "Roi", "build_report", "gather",
    "problem_cost", "render", "roi", "shell",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def build_report(store: Store, run_id: str, *, run_dir: str | Path | None = None,
                 card_hour_cost: float | None = None, maximize: Iterable[str] = ()) -> Report:
    """The report of a diagnosed run: its graph, suggestions, experiments and telemetry as one HTML page.

    ``run_dir`` overrides the directory the store records; ``card_hour_cost`` the knowledge base's price;
    ``maximize`` names tuning objectives that are maximised (the others are minimised).
    """
    from debugtune.engine.report.data import gather
    from debugtune.engine.report.page import render

    return render(gather(store, run_id, run_dir=run_dir, card_hour_cost=card_hour_cost, maximize=maximize))
