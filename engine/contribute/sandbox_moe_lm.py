#!/usr/bin/env python3
"""Sandbox of a debugtune case package: mixture-of-experts expert imbalance.

Trains the tiny mixture-of-experts language model of `debugtune.scenarios.moe` on synthetic Markov
sequences twice from the same seeds: with the fault configuration (`fault` in config.json) and
with the remedy applied on top of it (`remedy`). Prints one JSON object with the expert balance of
both trainings (coefficient of variation, MaxVio and normalised entropy of the tokens per expert over
the last `window` of the steps) and the synthetic-data generator settings used.

`cann-tune sandbox run PACKAGE` runs this script in a temporary folder and compares its output with
expected.json; it can also be run by hand: `python validate.py`. It reads nothing but config.json
next to it, writes nothing, and needs no network.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
GENERATOR_FIELDS = ("vocab", "domains", "successors", "batch_size", "seq_len", "data_seed")


def main() -> int:
    cfg = json.loads((Path(__file__).resolve().parent / "config.json").read_text(encoding="utf-8"))
    import torch

    from debugtune.scenarios.moe import MoEConfig, train_moe

    torch.set_num_threads(1)
    generator = {k: v for k, v in cfg.get("generator", {}).items() if k != "kind"}
    common = {**generator, **cfg.get("model", {}), "seed": cfg["seed"], "steps": cfg["steps"]}
    out = {}
    for name, overrides in (("baseline", cfg["fault"]), ("remedy", {**cfg["fault"], **cfg["remedy"]})):
        config = MoEConfig(**{**common, **overrides})
        out[name] = train_moe(config).balance(cfg["window"])
    out["generator"] = {k: getattr(config, k) for k in GENERATOR_FIELDS}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
