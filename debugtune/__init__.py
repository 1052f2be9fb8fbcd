"""debugtune: diagnose and tune deep-learning training runs with a knowledge graph.

Public API (each name is imported on first use, so that ``import debugtune`` stays fast and torch,
transformers and lightning stay optional):

- ``attach(model, optimizer, run_dir, ...)``: the live probe inside a training loop (docs/probe.md);
  ``preflight=True`` checks the model against the knowledge base's initialisation checks first;
- ``checkpoint(run_dir, model, optimizer, ..., step=, trial=, parameters=)``: a replay checkpoint that gives
  the run its own trial (docs/tune.md);
- ``HFCallback`` / ``LightningCallback``: the probe as a Hugging Face ``TrainerCallback`` or a Lightning
  ``Callback`` (docs/integrations.md; extras ``hf`` and ``lightning``);
- ``diagnose(run)``: findings and root causes of a run directory, profiler folder or log (docs/diagnose.md);
- ``query(text)``: one tuning-DSL query (docs/query.md);
- ``lint(*configs)``: launch configurations against the prevention rules (docs/lint.md);
- ``tune(run, trial)``: a transfer Bayesian-optimisation session for a remedy (docs/tune.md);
- ``open_store(target)``, ``load_knowledge(store)``: the knowledge graph (docs/store.md).
"""

from importlib import import_module as _import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time the names load on first use
    from debugtune.api import attach, checkpoint, diagnose, lint, query, tune
    from debugtune.engine.capture.probe import Probe
    from debugtune.integrations.hf import DebugtuneCallback as HFCallback
    from debugtune.integrations.lightning import DebugtuneCallback as LightningCallback
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

__version__ = "0.1.0"

# public name → (module, attribute, extra that installs what it needs or None)
_API: dict[str, tuple[str, str, str | None]] = {
    "attach": ("debugtune.api", "attach", "torch"),
    "checkpoint": ("debugtune.api", "checkpoint", "torch"),
    "Probe": ("debugtune.engine.capture.probe", "Probe", "torch"),
    "HFCallback": ("debugtune.integrations.hf", "DebugtuneCallback", "hf"),
    "LightningCallback": ("debugtune.integrations.lightning", "DebugtuneCallback", "lightning"),
    "diagnose": ("debugtune.api", "diagnose", None),
    "query": ("debugtune.api", "query", None),
    "lint": ("debugtune.api", "lint", None),
    "tune": ("debugtune.api", "tune", None),
    "open_store": ("debugtune.kg", "open_store", None),
    "load_knowledge": ("debugtune.kg.knowledge", "load_knowledge", None),
}

__all__ = ["HFCallback", "LightningCallback", "Probe", "__version__", "attach", "checkpoint", "diagnose", "lint",
           "load_knowledge", "open_store", "query", "tune"]  # a literal, so that static tools read it: = _API


def __getattr__(name: str) -> object:
    if name not in _API:
        raise AttributeError(f"module 'debugtune' has no attribute {name!r}")
    module, attr, extra = _API[name]
    try:
        value = getattr(_import_module(module), attr)
    except ModuleNotFoundError as err:
        if extra is None or not err.name or err.name.startswith("debugtune"):
            raise
        # AttributeError, so that help(debugtune) and IDEs skip it instead of failing
        raise AttributeError(f"debugtune.{name} needs {err.name}: pip install 'debugtune[{extra}]'") from err
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API and loaded subpackages (not the helpers of this module)."""
    return sorted({*(n for n in globals() if not n.startswith("_") or n.startswith("__")), *_API} - {"TYPE_CHECKING"})
