"""`cann-tune auto`: tune a remedy for a run with transfer Bayesian optimisation (docs/tune.md).

The tuning stage (GPy, Emukit, torch for replay) is imported when the command runs, so the CLI
starts quickly.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from debugtune.cli.apps import tune_app
from debugtune.cli.common import (
    Col,
    JsonOption,
    StoreOption,
    WideOption,
    console,
    emit_json,
    err_console,
    fail,
    session_store,
    show_table,
)

if TYPE_CHECKING:
    from debugtune.engine.tune import AutoResult, Trial


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in params.items())


def _trial_line(t: Trial, objectives: list[str]) -> str:
    vals = ", ".join(f"{o}={_fmt(t.values[o])}" for o in objectives if o in t.values)
    status = "[green]ok[/]" if t.ok else f"[red]{t.status}[/]"
    why = f" ({escape(t.error)})" if t.error else ""
    return f"#{t.index + 1} {status} {escape(_params(t.params))} → {escape(vals)}{why}"


def print_experiments(res: AutoResult, *, wide: bool = False) -> None:
    """Every experiment of the session: configuration, objective values, cost and status."""
    r = res.result
    names = [o.name for o in r.objectives]
    pareto = {t.index for t in r.pareto}
    best = r.best.index if r.best else None
    cols = [Col("#", "right", keep=True), Col("from"), *(Col(p, "right") for p in res.space.names),
            *(Col(f"{o.name} ({o.direction})", "right") for o in r.objectives), Col("cost (card-h)", "right"),
            Col("status")]
    rows = []
    for t in r.trials:
        mark = " ★" if t.index == best else (" ◆" if t.index in pareto else "")
        rows.append([f"{t.index + 1}{mark}", t.origin, *(escape(_fmt(t.params[p])) for p in res.space.names),
                     *(_fmt(t.values.get(n, "")) for n in names), f"{t.cost:.4g}",
                     t.status if t.ok else f"[red]{t.status}[/]"])
    show_table(cols, rows, title=f"{res.remedy}: {len(r.trials)} experiment(s), stopped on {r.stop_reason}",
               wide=wide)


def print_summary(res: AutoResult, *, wide: bool = False) -> None:
    r = res.result
    print_passed_over(res)
    print_experiments(res, wide=wide)
    if res.no_effect:
        console.print(f"[yellow]stopped early[/]: {escape(res.no_effect)}", highlight=False)
    if r.best is not None:
        vals = ", ".join(f"{o.name}={_fmt(r.best.values[o.name])}" for o in r.objectives)
        console.print(f"[bold]best[/] (★): {escape(_params(r.best.params))} → {escape(vals)}", highlight=False)
    else:
        console.print("[yellow]no experiment succeeded[/]")
    if len(r.objectives) > 1 and r.pareto:
        console.print(f"[bold]Pareto front[/] (◆ and ★): experiments {', '.join(str(t.index + 1) for t in r.pareto)}; "
                      f"hypervolume {r.hypervolume:.4g}", highlight=False)
    budget = f" of {res.budget:.4g} budget" if res.budget is not None else ""
    run_cost = f" (run cost {res.run_cost:.4g})" if res.run_cost is not None else ""
    share = f", {res.budget_share:.1%} of the run's training cost" if res.budget_share is not None else ""
    console.print(f"[bold]cost[/]: {r.spent:.4g} card-hours spent{budget}{run_cost}{share}", highlight=False)
    if res.history.tasks:
        last: dict[str, float] = next((t.weights for t in reversed(r.trials) if t.weights), {})
        used = ", ".join(f"{t.name} ({len(t)} exp, sim {t.similarity:.2f}"
                         + (f", weight {last[t.name]:.2f})" if t.name in last else ")") for t in res.history.tasks)
        console.print(f"[bold]history[/]: {escape(used)}", highlight=False)
    else:
        console.print("[bold]history[/]: none (cold start)")
    if res.recorded:
        console.print(f"recorded {len(res.recorded)} experiment(s) in run {res.run_id!r} as {res.session}-NNN",
                      highlight=False)


@tune_app.command("auto")
def auto(
    run: Annotated[str, typer.Argument(help="The stored run id to tune for.", show_default=False)],
    remedy: Annotated[str | None, typer.Option("--remedy", help="Remedy id to tune (e.g. RouterInitRescale).")] = None,
    top_suggestion: Annotated[bool, typer.Option("--top-suggestion",
                                                 help="Tune the run's best-ranked remedy with parameters.")] = False,
    suggestions: Annotated[str | None, typer.Option(
        "--suggestions", help="Tune several of the run's applicable suggestions together, by rank: 1,2,3 (their "
                              "parameters' union; targets from the diagnosis unless --target-set or -o).")] = None,
    remedies: Annotated[str | None, typer.Option(
        "--remedies", help="Tune several remedies together, by id: A,B,C (their parameters' union; targets from "
                           "the diagnosis unless --target-set or -o).")] = None,
    target_set: Annotated[list[str] | None, typer.Option(
        "--target-set", help="Joint targets, METRIC<=BOUND (repeat or comma-separate), or 'diagnosis': the "
                             "knowledge base's bounds for the run's findings. Stops when every one is met.")] = None,
    bayesian: Annotated[bool, typer.Option("--bayesian/--random",
                                           help="Transfer Bayesian optimisation (default) or random search.")] = True,
    multi_objective: Annotated[bool | None, typer.Option(
        "--multi-objective/--single-objective",
        help="Optimise every --objective (ParEGO, Pareto front). Default: single, or as the run's own trial "
             "declares.")] = None,
    objective: Annotated[list[str] | None, typer.Option(
        "--objective", "-o", help="Metric the trial reports, NAME or NAME:min|max (repeat). Default: the run's "
                                  "own trial's, else loss.")] = None,
    checkpoint: Annotated[str | None, typer.Option(
        "--deterministic-replay", help="Checkpoint the trials replay from ({checkpoint} in --trial).")] = None,
    trial: Annotated[str | None, typer.Option(
        "--trial", help="Command template, e.g. 'python train.py --init-std {init_std}'; prints JSON last.")] = None,
    trial_fn: Annotated[str | None, typer.Option(
        "--trial-fn", help="Python trial function module:function. Without --trial and --trial-fn: the trial the "
                           "run's replay checkpoint declares (scenario runs have one; docs/tune.md).")] = None,
    max_experiments: Annotated[int, typer.Option("--max-experiments", min=1)] = 5,
    budget: Annotated[str | None, typer.Option(
        "--budget", help="Cost budget: % of the run's training cost (5%) or card-hours (12.5).")] = None,
    parallel: Annotated[int, typer.Option("--parallel", min=1, help="Trials at once (local penalisation).")] = 1,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    patience: Annotated[int | None, typer.Option(
        "--patience", min=1, help="Stop after this many experiments without --min-improvement.")] = None,
    min_improvement: Annotated[float, typer.Option("--min-improvement", min=0.0,
                                                   help="Relative improvement that resets patience.")] = 0.01,
    target: Annotated[float | None, typer.Option("--target",
                                                 help="Stop once the first objective reaches this value.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", min=0.0, help="Seconds per trial.")] = None,
    executor: Annotated[str, typer.Option("--executor", help="process (default), ray or inline.")] = "process",
    similarity: Annotated[float | None, typer.Option(
        "--similarity", min=0.0, max=1.0,
        help="Similarity a related case or run needs to enter the history (default: tune.history.similarity).")] = None,
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="Run directory (default: the stored one).")] = None,
    record: Annotated[bool, typer.Option("--record/--no-record", help="Record experiments in the graph.")] = True,
    store: StoreOption = None,
    json_out: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Tune a remedy's parameters with a few experiments, transferring from similar cases in the graph."""
    from debugtune.engine.tune import CommandTrial, Objective, TuneSpec, auto_tune, load_callable

    if trial is not None and trial_fn is not None:
        fail("give at most one of --trial CMD and --trial-fn module:function")
    ranks = _ranks(suggestions)
    named = tuple(r.strip() for r in (remedies or "").split(",") if r.strip())
    objectives = tuple(Objective.parse(o) for o in objective or ())
    if (ranks or named) and not target_set and not objectives:
        target_set = ["diagnosis"]
    fn = CommandTrial(trial, timeout_s=timeout) if trial is not None else \
        load_callable(trial_fn) if trial_fn is not None else None
    spec = TuneSpec(remedy=remedy, top_suggestion=top_suggestion, objectives=objectives,
                    multi_objective=multi_objective, strategy="bayesian" if bayesian else "random",
                    checkpoint=checkpoint, max_experiments=max_experiments, budget=budget, parallel=parallel,
                    seed=seed, patience=patience, min_improvement=min_improvement, target=target, timeout_s=timeout,
                    executor=executor, similarity=similarity, run_dir=run_dir, record=record, suggestions=ranks,
                    remedies=named)
    names: list[str] = [o.name for o in objectives]
    progress = Progress(TextColumn("[bold]tuning[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err_console, transient=True, disable=json_out)
    task = progress.add_task("tune", total=max_experiments)

    def started(tuner, history) -> None:
        names[:] = [o.name for o in tuner.objectives]
        what = f"{len(history.tasks)} similar task(s)" if history.tasks else "no history (cold start)"
        err_console.print(f"tuning {', '.join(tuner.space.names)} over {what}", highlight=False)

    def finished(t) -> None:
        progress.advance(task)
        if not json_out:
            progress.console.print(_trial_line(t, names), highlight=False)

    with session_store(store) as st, progress:
        if target_set:
            spec = replace(spec, targets=_targets(st, run, target_set))
        result = auto_tune(st, run, fn, spec, on_start=None if json_out else started, on_trial=finished)
    if json_out:
        emit_json(result.as_dict())
    else:
        print_summary(result, wide=wide)


def _ranks(text: str | None) -> tuple[int, ...]:
    """``--suggestions 1,2,3`` as ranks (an error names the bad item)."""
    if not text:
        return ()
    out = []
    for item in text.split(","):
        if not item.strip().isdigit() or int(item) < 1:
            fail(f"--suggestions {text!r}: expected ranks 1,2,3 (positive integers), got {item.strip()!r}")
        out.append(int(item))
    return tuple(out)


def _targets(store: Any, run: str, given: list[str]) -> Any:
    """``--target-set``: METRIC<=BOUND items, or ``diagnosis`` (the knowledge base's bounds for the run's
    findings, `engine.tune.targets.diagnosis_targets`)."""
    from debugtune.engine.suggest import run_signature
    from debugtune.engine.tune.targets import Targets, diagnosis_targets

    if [g.strip().lower() for g in given] == ["diagnosis"]:
        return diagnosis_targets(store, {item.symptom for item in run_signature(store, run)})
    return Targets.parse(given)


@tune_app.command("checkpoint")
def checkpoint_command(
    run: Annotated[str, typer.Argument(help="The stored run id (or a run directory with --run-dir).",
                                       show_default=False)],
    step: Annotated[int, typer.Option("--step", min=0, help="Replay from the run's training checkpoint at this step "
                                                             "(the latest one at or before it).")],
    run_dir: Annotated[str | None, typer.Option("--run-dir", help="Run directory (default: the stored one).")] = None,
    trial_fn: Annotated[str | None, typer.Option(
        "--trial-fn", help="The trial module:function (default: the one the checkpoint names).")] = None,
    parameters: Annotated[str | None, typer.Option(
        "--parameters", help="Tuning parameters the trial sets, a,b (default: the checkpoint's).")] = None,
    objective: Annotated[list[str] | None, typer.Option(
        "--objective", "-o", help="Objectives the trial reports, NAME[:min|max] (default: the checkpoint's).")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Record a replay point for a run that did not declare one: one of its training checkpoints becomes
    RUN_DIR/replay-checkpoint.pt, declaring the trial that replays it (docs/tune.md)."""
    from debugtune.engine.tune.auto import run_directory
    from debugtune.engine.tune.run_trial import record_replay_point

    with session_store(store, read_only=True) as st:
        where = run_directory(st, run, run_dir)
    if where is None:
        fail(f"run {run!r}: no run directory stored for it; give --run-dir DIR")
    found = record_replay_point(where, step, trial=trial_fn,
                                parameters=[p.strip() for p in parameters.split(",") if p.strip()]
                                if parameters else None, objectives=objective or None)
    out = {"run": run, "run_dir": str(where), "requested_step": step, **found.as_dict()}
    if json_out:
        emit_json(out)
        return
    console.print(f"replay point of run {escape(run)}: step {found.step} ({escape(found.checkpoint)})",
                  highlight=False)
    console.print(f"trial {escape(found.trial)} sets {escape(', '.join(found.parameters))}; reports "
                  f"{escape(', '.join(found.objectives))}", highlight=False)


def print_passed_over(res: AutoResult) -> None:
    """The better-ranked suggestions the trial cannot apply, and why."""
    for a in res.passed_over:
        console.print(f"[yellow]not applicable[/]: {escape(a.suggestion.remedy)} ({escape(a.reason)})", highlight=False)


# --- `cann-tune roi` (issue 9, report stage): the return on a debugging setup; maths in engine/report/cost.py ---

@tune_app.command("roi")
def roi_command(
    params: Annotated[float, typer.Option("--params", help="Model parameters, e.g. 7e9.", show_default=False)],
    cards: Annotated[int, typer.Option("--cards", min=1, help="Accelerators the job runs on.", show_default=False)],
    card_hour_cost: Annotated[float | None, typer.Option(
        "--card-hour-cost", min=0.0, help="Price of one card-hour (default: the knowledge base's).")] = None,
    hours_to_detect: Annotated[float | None, typer.Option(
        "--hours-to-detect", min=0.0, help="Hours to notice and localise a problem by hand (default: the KB's).",
    )] = None,
    tool_hours: Annotated[float | None, typer.Option(
        "--tool-hours-to-detect", min=0.0, help="Hours the automatic diagnosis needs (default: the KB's).")] = None,
    checkpoint_hours: Annotated[float | None, typer.Option(
        "--checkpoint-hours", min=0.0, help="Hours between checkpoints (default: the KB's).")] = None,
    overhead: Annotated[float | None, typer.Option(
        "--overhead", min=0.0, max=1.0, help="Fraction of step time the telemetry costs (default: the KB's).")] = None,
    rate: Annotated[float | None, typer.Option(
        "--incidents-per-card-day", min=0.0, help="Interruptions per card per day (default: the KB's).")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """What problems cost a job of this size, and what a debugging setup saves (docs/roi.md)."""
    from debugtune.engine.report import CostConstants, roi
    from debugtune.engine.report.text import number

    with session_store(store) as st:
        constants = CostConstants.from_store(st).override(
            card_hour_price=card_hour_cost, manual_detect_hours=hours_to_detect, tool_detect_hours=tool_hours,
            checkpoint_interval_hours=checkpoint_hours, tool_overhead_fraction=overhead,
            interruptions_per_card_day=rate)
    out = roi(params, cards, constants).as_dict()
    if json_out:
        emit_json(out)
        return
    table = Table(title=f"ROI of a debugging setup: {params:.3g} parameters on {cards} cards")
    table.add_column("quantity")
    table.add_column("per day", justify="right")
    table.add_column("per 30 days", justify="right")
    day, month = out["per_day"], out["per_month"]
    for key, label in (("incidents", "incidents"), ("card_hours_lost_manual", "card-h lost, detected by hand"),
                       ("card_hours_lost_tool", "card-h lost, detected by the tool"),
                       ("saving_card_hours", "saving (card-h)"), ("overhead_card_hours", "telemetry overhead (card-h)"),
                       ("net_card_hours", "net saving (card-h)"), ("net_cost", "net saving ($)")):
        table.add_row(label, number(day[key]), number(month[key]))
    console.print(table)
    hours = out["per_incident_hours"]
    console.print("hours lost per incident: " + ", ".join(f"{k} {v:.3g}" for k, v in hours.items())
                  + " (by hand = detect + rollback + restore)", highlight=False)
    console.print("[bold]inputs[/] (docs/roi.md):")
    for name, value in out["inputs"].items():
        src = ", ".join(out["sources"].get(name, ["input"]))
        console.print(f"  {name.replace('_', ' ')} = {_fmt(value)}  [dim]{escape(src)}[/]", highlight=False)
    ratio = "n/a (no overhead)" if out["roi"] is None else f"{out['roi']:.3g}"
    console.print(f"[bold]ROI[/] (net saving / overhead): {ratio}; worth it when detecting by hand takes more than "
                  f"{out['break_even_hours_to_detect']:.3g} h", highlight=False)
