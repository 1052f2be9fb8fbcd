"""Where the seed chain's findings start on a candidate scenario: train it with the probe, diagnose it, print.

    python -m bench.chain_onsets '{"locality_prior": 16, "gate_lr_scale": 100, "locality_coeff": 0.03}' [--seed 0]

The JSON changes `scenarios.moe_chain.CHAIN` (four cabinets, a mixture that swings every 128 batches; 3,000 steps
unless ``steps`` is given). Printed: every finding of the real diagnosis (``cann-debug diagnose RUN --store memory``)
in onset order with the evidence the story is about, then per ``--window`` steps the mean LM loss, the share of
dispatched tokens that crossed cabinets (mean and max), the router gradient norm (median), the dropped share and
MaxVio of the tokens per expert (10-step sums, median), and the loss's autocorrelation at lag 128 after a 301-step
moving-average detrend (whole run and from step 1,000). A figure to read, not a pass/fail check: issue 32's rebuild
attempts (docs/tune.md, "The seed chain's onset order") were measured with it.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import ndimage  # noqa: E402

from debugtune.api import diagnose  # noqa: E402
from debugtune.engine.telemetry import read_telemetry  # noqa: E402
from debugtune.scenarios.moe import train_moe  # noqa: E402
from debugtune.scenarios.moe_chain import healthy_chain  # noqa: E402

EVIDENCE = ("share", "maxvio", "period_steps", "acf_peak", "relative_amplitude", "relative_to_layers",
            "scaled_relative_to_layers", "router_grad_norm", "drop_fraction")


def _series(run_dir: Path, metric: str) -> tuple[np.ndarray, np.ndarray]:
    tb = read_telemetry(run_dir, metrics=metric).table
    return tb.column("step").to_numpy(), tb.column("value").to_numpy()


def _acf(y: np.ndarray, lag: int) -> float:
    if y.size <= lag + 2:
        return float("nan")
    r = y - ndimage.uniform_filter1d(y, 301, mode="nearest")
    return float(np.corrcoef(r[:-lag], r[lag:])[0, 1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("changes", nargs="?", default="{}", help="JSON: MoEConfig fields changed from the chain's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=250)
    ap.add_argument("--keep", type=Path, default=None, help="train into this folder and keep it")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = healthy_chain(args.seed, **json.loads(args.changes))
    run_dir = args.keep or Path(tempfile.mkdtemp(prefix="chain-onsets-")) / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    res = train_moe(cfg, run_dir, probe=True, run_id=run_dir.name, checkpoint=False)
    report = diagnose(run_dir, save=False)
    findings = []
    print(f"seed {args.seed}, changes {args.changes}: findings in onset order")
    for f in sorted(report.findings, key=lambda f: f.onset_step):
        ev = {k: round(v, 4) if isinstance(v, float) else v for k, v in f.evidence.items() if k in EVIDENCE}
        findings.append({"symptom": f.symptom, "onset": f.onset_step, "end": f.end_step, **ev})
        print(f"  {f.symptom:24s} onset {f.onset_step:5d}  end {f.end_step:5d}  {ev}")
    _, cross = _series(run_dir, "cross_cabinet_share")
    tokens = res.tokens_per_expert.astype(float)
    summed = ndimage.uniform_filter1d(tokens, 10, axis=0, mode="nearest")
    maxvio = (summed.max(axis=1) - summed.mean(axis=1)) / np.maximum(summed.mean(axis=1), 1e-12)
    w = args.window
    print(f"{'steps':>11s} {'loss':>6s} {'cross':>6s} {'max':>5s} {'router grad':>11s} {'dropped':>7s} {'maxvio':>6s}")
    for a in range(0, res.losses.size, w):
        s = slice(a, a + w)
        print(f"{a:5d}-{min(a + w, res.losses.size) - 1:<5d} {res.losses[s].mean():6.3f} {cross[s].mean():6.3f} "
              f"{cross[s].max():5.2f} {np.median(res.router_grad_norm[s]):11.2e} {res.dropped_frac[s].mean():7.3f} "
              f"{np.median(maxvio[s]):6.2f}")
    acf = {"whole": _acf(res.losses, 128), "from_1000": _acf(res.losses[1000:], 128)}
    print(f"loss autocorrelation at lag 128: whole run {acf['whole']:.3f}, from step 1,000 {acf['from_1000']:.3f}")
    if args.keep is None:
        shutil.rmtree(run_dir.parent, ignore_errors=True)
    return {"findings": findings, "acf128": acf, "cross_median": float(np.median(cross))}


if __name__ == "__main__":
    main()
