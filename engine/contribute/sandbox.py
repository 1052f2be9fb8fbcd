"""The reproducible sandbox of a case package: synthetic-data configuration, validation script, expected result.

A sandbox lets anyone check a package's claim without the contributor's data: ``sandbox/config.json``
holds the scenario, the synthetic-data generator settings and seeds, the fault configuration and
the remedy's overrides; ``sandbox/validate.py`` trains the scenario without and with the remedy and
prints the measured figures as JSON; ``sandbox/expected.json`` states the claim (checks against a
knowledge-base threshold), the figures the contributor measured and the tolerances within which a
rerun must agree. The contributor's run of the script is what fills expected.json, and a package
whose claim does not hold there is not written.

A script runs only from `run_script`: in a fresh temporary folder holding nothing but the sandbox
files, as a subprocess of this Python with a fixed ``PYTHONHASHSEED``, one thread, a temporary HOME,
no inherited environment beyond PATH, and a timeout after which its whole process group is killed.
Importing a package never runs it.
"""

from __future__ import annotations

import json
import math
import operator
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from debugtune.engine.contribute.errors import ContributeError
from debugtune.engine.contribute.scrub import Scrubber
from debugtune.kg.package_archive import SANDBOX_DIR, ArchiveLimits, read_archive

HERE = Path(__file__).resolve().parent
CONFIG, SCRIPT, EXPECTED = (f"{SANDBOX_DIR}/{n}" for n in ("config.json", "validate.py", "expected.json"))
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class Scenario:
    """A scenario program a sandbox can reproduce, its validation script and what it claims."""

    program: str
    template: str
    module: str
    metric: str
    threshold_key: str
    claim: str


SCENARIOS = {s.program: s for s in (
    Scenario("moe_lm", "sandbox_moe_lm.py", "debugtune.scenarios.moe", "max_vio", "moe.imbalance.maxvio",
             "without the remedy the experts are imbalanced (MaxVio >= {threshold}); with it they are balanced "
             "(MaxVio < {threshold}), MaxVio of the tokens per expert over the last {window:.0%} of the steps"),
)}
"""Scenarios by run.json ``program``; the threshold is read from the knowledge base at packaging time."""


@dataclass(frozen=True)
class SandboxSpec:
    """What the sandbox reproduces: scenario, fault and remedy overrides, seeds, length, tolerances."""

    scenario: str
    fault: dict[str, Any]
    remedy: dict[str, Any]
    seed: int = 0
    steps: int = 60
    window: float = 0.2
    generator: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    tolerance_abs: float = 0.05
    tolerance_rel: float = 0.1

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str, *, scenario: str | None = None,
                     remedy: Mapping[str, Any] | None = None) -> SandboxSpec:
        """A spec from JSON (``source`` names it in errors); ``scenario``/``remedy`` fill what it leaves out."""
        known = {f for f in cls.__dataclass_fields__}
        extra = sorted(set(data) - known)
        if extra:
            raise ContributeError(f"{source}: unknown sandbox field(s) {', '.join(extra)} "
                                  f"(known: {', '.join(sorted(known))})")
        merged = {"scenario": scenario, "remedy": dict(remedy or {}), **data}
        if merged["scenario"] not in SCENARIOS:
            raise ContributeError(f"{source}: no sandbox for scenario {merged['scenario']!r} (the run.json "
                                  f"'program', or 'scenario' in the spec); sandboxes exist for {', '.join(SCENARIOS)}")
        for key in ("fault", "remedy", "generator", "model"):
            value = merged.get(key, {})
            if not isinstance(value, dict) or not all(isinstance(v, int | float | bool | str) for v in value.values()):
                raise ContributeError(f"{source}: {key} must be an object of numbers, booleans or strings")
        if not merged.get("fault"):
            raise ContributeError(f"{source}: 'fault' is missing: the configuration overrides that reproduce "
                                  "the problem")
        if not merged["remedy"]:
            raise ContributeError(f"{source}: 'remedy' is missing: the overrides that apply the remedy "
                                  "(or record an experiment whose parameters are the overrides)")
        spec = cls(**merged)
        if spec.steps < 5 or not 0 < spec.window <= 1 or spec.tolerance_abs < 0 or spec.tolerance_rel < 0:
            raise ContributeError(f"{source}: steps must be >= 5, window in (0, 1], tolerances non-negative")
        return spec

    def config(self) -> dict[str, Any]:
        """The content of ``sandbox/config.json``."""
        sc = SCENARIOS[self.scenario]
        return {"scenario": self.scenario, "module": sc.module, "seed": self.seed, "steps": self.steps,
                "window": self.window, "generator": {"kind": "markov-sequences", **self.generator},
                "model": self.model, "fault": self.fault, "remedy": self.remedy}


@dataclass(frozen=True)
class Verdict:
    """Whether a sandbox run supported the package's claim and reproduced its figures."""

    claim: str
    claim_held: bool
    reproduced: bool
    checks: tuple[dict[str, Any], ...]
    differences: tuple[dict[str, Any], ...]
    measured: dict[str, Any]
    seconds: float

    @property
    def held(self) -> bool:
        return self.claim_held and self.reproduced

    def as_dict(self) -> dict[str, Any]:
        return {"held": self.held, "claim": self.claim, "claim_held": self.claim_held, "reproduced": self.reproduced,
                "checks": list(self.checks), "differences": list(self.differences), "measured": self.measured,
                "seconds": round(self.seconds, 2)}


def _lookup(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _numbers(obj: Any, prefix: str = "") -> dict[str, float]:
    if isinstance(obj, dict):
        out: dict[str, float] = {}
        for k, v in obj.items():
            out.update(_numbers(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return {prefix[:-1]: float(obj)}
    return {}


def evaluate(expected: Mapping[str, Any], measured: Mapping[str, Any], seconds: float = 0.0) -> Verdict:
    """Compare a script's output with expected.json: the checks, then every expected figure within tolerance."""
    checks = []
    for c in expected.get("checks", []):
        value = _lookup(measured, c["path"])
        ok = isinstance(value, int | float) and math.isfinite(value) and _OPS[c["op"]](value, c["value"])
        checks.append({**c, "measured": value, "ok": bool(ok)})
    tol = expected.get("tolerance", {})
    abs_tol, rel_tol = float(tol.get("abs", 0.0)), float(tol.get("rel", 0.0))
    diffs = []
    for path, want in sorted(_numbers(expected.get("result", {})).items()):
        got = _lookup(measured, path)
        within = (isinstance(got, int | float) and math.isfinite(float(got)) and math.isfinite(want)
                  and abs(float(got) - want) <= abs_tol + rel_tol * abs(want)) or (
            isinstance(got, float) and math.isnan(got) and math.isnan(want))
        diffs.append({"path": path, "expected": want, "measured": got, "within": bool(within)})
    return Verdict(str(expected.get("claim", "")), bool(checks) and all(c["ok"] for c in checks),
                   all(d["within"] for d in diffs), tuple(checks), tuple(diffs), dict(measured), seconds)


def run_script(folder: Path, timeout_s: float) -> tuple[dict[str, Any], float]:
    """Run ``validate.py`` in ``folder`` (see the module docstring); its last stdout line as JSON, and seconds."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HOME": str(folder), "TMPDIR": str(folder),
           "DEBUGTUNE_HOME": str(folder / ".debugtune"), "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-s", "-P", "validate.py"], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ContributeError(f"the sandbox script did not finish within {timeout_s:g} s and was stopped") from None
    seconds = time.perf_counter() - start
    lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise ContributeError(f"the sandbox script failed (exit code {proc.returncode}): " + " | ".join(tail))
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ContributeError(f"the sandbox script's last line is not JSON: {lines[-1][:200]!r}") from None
    if not isinstance(result, dict):
        raise ContributeError("the sandbox script must print a JSON object")
    return result, seconds


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _staged(files: Mapping[str, bytes], timeout_s: float) -> tuple[dict[str, Any], float]:
    with tempfile.TemporaryDirectory(prefix="debugtune-sandbox-") as tmp:
        folder = Path(tmp)
        for name, data in files.items():
            if name.startswith(SANDBOX_DIR + "/"):
                (folder / name[len(SANDBOX_DIR) + 1:]).write_bytes(data)
        return run_script(folder, timeout_s)


def build_sandbox(spec: SandboxSpec, threshold: float, scrub: Scrubber, *,
                  timeout_s: float = 600.0) -> tuple[dict[str, bytes], Verdict]:
    """The sandbox files of a package, with expected.json filled by running the script once here."""
    sc = SCENARIOS[spec.scenario]
    config = spec.config()
    for key in ("generator", "model", "fault", "remedy"):
        config[key] = scrub.walk(config[key], f"sandbox/config.json: {key}")
    files = {CONFIG: _json(config), SCRIPT: (HERE / sc.template).read_bytes()}
    measured, seconds = _staged(files, timeout_s)
    expected = {
        "claim": sc.claim.format(threshold=threshold, window=spec.window),
        "threshold_key": sc.threshold_key, "threshold": threshold,
        "checks": [{"path": f"baseline.{sc.metric}", "op": ">=", "value": threshold},
                   {"path": f"remedy.{sc.metric}", "op": "<", "value": threshold}],
        "result": {k: measured[k] for k in ("baseline", "remedy") if k in measured},
        "tolerance": {"abs": spec.tolerance_abs, "rel": spec.tolerance_rel,
                      "rule": "|measured - expected| <= abs + rel * |expected| for every figure in result"},
        "seconds_measured": round(seconds, 2),
    }
    verdict = evaluate(expected, measured, seconds)
    if not verdict.claim_held:
        failed = [f"{c['path']} = {c['measured']} (needs {c['op']} {c['value']})"
                  for c in verdict.checks if not c["ok"]]
        raise ContributeError("the sandbox does not support the case's claim, so no package was written: "
                              + "; ".join(failed))
    files[EXPECTED] = _json(expected)
    return files, verdict


def run_sandbox(path: str | os.PathLike[str], *, timeout_s: float = 600.0,
                limits: ArchiveLimits = ArchiveLimits()) -> Verdict:
    """Run a package's validation script (only on this explicit request) and judge its claim."""
    files = read_archive(path, limits)
    missing = [n for n in (CONFIG, SCRIPT, EXPECTED) if n not in files]
    if missing:
        raise ContributeError(f"{path}: the package has no sandbox ({', '.join(missing)} missing)")
    try:
        expected = json.loads(files[EXPECTED])
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ContributeError(f"{path}: {EXPECTED} is not JSON ({err})") from None
    bad = [c for c in expected.get("checks", []) if not isinstance(c, dict) or c.get("op") not in _OPS
           or not isinstance(c.get("value"), int | float) or not isinstance(c.get("path"), str)]
    if bad or not expected.get("checks"):
        raise ContributeError(f"{path}: {EXPECTED} has no well-formed checks (path, op among {', '.join(_OPS)}, value)")
    measured, seconds = _staged(files, timeout_s)
    return evaluate(expected, measured, seconds)
