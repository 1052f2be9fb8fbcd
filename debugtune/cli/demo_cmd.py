"""`cann-debug demo`: the seed scenario end to end — train a tiny MoE with a biased gate on CPU with the
live probe, diagnose it, and show the findings, the root cause with its chain, and where it is stored."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from debugtune import settings
from debugtune.cli.apps import debug_app
from debugtune.cli.common import JsonOption, StoreOption, console, emit_json, session_store
from debugtune.kg.knowledge import class_counts

DEMO_RUN = "seed-scenario"


def _train(run_dir: Path, steps: int, seed: int) -> float:
    """Train the seed scenario into ``run_dir`` (replacing an earlier demo run); returns the seconds taken."""
    import shutil

    import torch

    from debugtune.scenarios.moe import seed_scenario, train_moe

    torch.set_num_threads(1)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    train_moe(seed_scenario(seed=seed, steps=steps), run_dir, probe=True)
    return time.perf_counter() - t0


@debug_app.command("demo")
def demo(
    store: StoreOption = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Where to write the demo run "
                                                 "(default: <DEBUGTUNE_HOME>/runs/seed-scenario).")] = None,
    steps: Annotated[int, typer.Option("--steps", min=50, help="Training steps.")] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the training.")] = 0,
    json_out: JsonOption = False,
) -> None:
    """Train the seed scenario (a tiny MoE whose router starts biased towards one expert), diagnose it and
    name the root cause with its chain of evidence."""
    from debugtune.api import diagnose
    from debugtune.cli.diagnose_cmd import print_report

    target = run_dir or settings.home() / "runs" / DEMO_RUN
    with session_store(store or "memory") as st:
        counts = class_counts(st)
        if not json_out:
            console.print(f"[bold]debugtune demo[/] — knowledge base: {counts.get('Cause', 0)} causes, "
                          f"{counts.get('Symptom', 0)} symptoms, {counts.get('CausalLink', 0)} causal links, "
                          f"{counts.get('Case', 0)} cases (store: {st.target})")
            console.print("The seed scenario: a one-block mixture-of-experts LM (8 experts, top-1) trained on CPU "
                          "whose router starts with a +16 logit bias towards expert 0, watched by the live probe.")
            with console.status(f"training {steps} steps with the probe attached …"):
                seconds = _train(target, steps, seed)
            console.print(f"trained in {seconds:.1f} s; telemetry in {escape(str(target))}")
            with console.status("diagnosing …") as status:
                report = diagnose(target, store=st, progress=lambda s: status.update(f"{s} …"))
        else:
            _train(target, steps, seed)
            report = diagnose(target, store=st)
    if json_out:
        emit_json(report.as_dict())
        return
    print_report(report)
    console.print(f"report: {escape(str(Path(report.run_dir or target) / 'diagnosis.json'))}")
    console.print(f"store: {escape(str(report.stored_in))}, named graph urn:debugtune:run:{escape(report.run)}/")
    if (store or "memory") != "memory":
        console.print(f"next: cann-debug root-cause {escape(report.run)} --store {escape(str(store))} --explain")
    else:
        console.print(f"next: cann-debug root-cause {escape(str(target))} --explain")

    # --- issue 9 (report stage): end with the HTML report of the run diagnosed above and print its path ---
    from debugtune.cli.report_cmd import demo_report

    with session_store(store or "memory") as st:
        demo_report(st, target)
