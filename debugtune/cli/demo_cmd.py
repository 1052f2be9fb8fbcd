"""`cann-debug demo`: the seed journey in one command (docs/demo.md) — a tiny MoE whose gate starts saturated over
experts placed on four cabinets is (1) diagnosed, (2) given a replay point and the remedies its trial can apply,
(3) fixed by a joint tuning replayed from that point against the diagnosis's targets, (4) packaged as a case that a
fresh store imports and the next run tunes from, compared with the other arms, and (5) prevented: a learned lint
rule and a preflight check at attach. The steps themselves are `debugtune.journey`.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.rule import Rule

from debugtune import journey, settings
from debugtune.cli.apps import debug_app
from debugtune.cli.common import Col, JsonOption, StoreOption, console, emit_json, session_store, show_table
from debugtune.engine.report.text import change_text, number
from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.kg.knowledge import class_counts

DEMO_RUN = "seed-scenario"
STEPS = 5


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _heading(n: int, title: str, quiet: bool) -> None:
    if not quiet:
        console.print(Rule(f"[bold]step {n}/{STEPS} · {title}[/]", align="left"))


def _result(text: str, quiet: bool) -> None:
    if not quiet:
        console.print(f"[bold green]→[/] {text}", highlight=False)


def _shares(util: dict[str, Any]) -> str:
    shares = " ".join(f"{s:.1f}" for s in util["shares_pct"])
    return (f"per-expert share of routed tokens (%) over steps {util['steps'][0]}–{util['steps'][1]}: {shares}; "
            f"std {util['std_pp']:.1f} percentage points, max {util['max_pct']:.1f}%, min {util['min_pct']:.1f}%")


def _show_suggestions(items: list[dict[str, Any]]) -> None:
    rows = []
    for s in items:
        ops = "\n".join(escape(change_text({"key": o["key"], "from_value": o["from"], "to_value": o["to"]}))
                         for o in s["operation"]) or "—"
        cases = [f"{c['case']} ({c['outcome'] or 'outcome not recorded'}, similarity {c['similarity']:.2f})"
                 for c in s["cases"]]
        cases.append(f"success rate {s['success_rate']:.2f}")
        applies = "[green]yes[/]" if s["applicable"] else f"[yellow]no: {escape(s['not_applicable_because'])}[/]"
        rows.append([str(s["rank"]), escape(s["remedy"]), applies, f"{s['effectiveness']:.2f}", escape(s["risk"]),
                     number(s["cost_card_hours"]), ops, "\n".join(escape(c) for c in cases)])
    show_table([Col("rank", "right", keep=True), Col("remedy"), Col("applies"), Col("effectiveness", "right"),
                Col("risk"), Col("cost (card-h)", "right"), Col("operation"), Col("rests on")], rows,
               title="suggestions for this run (applicable first; rank = the knowledge base's ranking)", key=1)


SHORT = {"expert_util_std": "util std (pp)", "cross_cabinet_share": "cross-cab", "loss_ratio": "loss ratio"}


def _show_tuning(t: dict[str, Any]) -> None:
    names = [x["metric"] for x in t["targets"]]
    rows, spent = [], 0.0
    for trial in t["trials"]:
        spent += trial["cost"]
        params = "\n".join(f"{k}={number(v)}" if isinstance(v, int | float) else f"{k}={v}"
                            for k, v in trial["params"].items())
        rows.append([str(trial["index"] + 1), trial["origin"], escape(params),
                     *(number(trial["values"][n]) if n in trial["values"] else "—" for n in names),
                     _pct(spent / t["run_cost_card_hours"] if t["run_cost_card_hours"] else None)])
    show_table([Col("#", "right", keep=True), Col("from"), Col("knobs"),
                *(Col(SHORT.get(n, n), "right") for n in names), Col("cost so far", "right")], rows,
               title=f"{t['experiments']} experiment(s) replayed from step {t['replay_step']}, stopped on "
                     f"{t['stop_reason']}; targets {t['target_text']}")


def _tuning_line(t: dict[str, Any]) -> str:
    n = t["experiments_to_target"]
    reached = (f"every target met in {n} experiment(s)" if n else
               f"targets not met in {t['experiments']} experiment(s)")
    before = ", ".join(f"{SHORT.get(k, k)} {number(v)}" for k, v in t["before"].items() if k in SHORT)
    after = ", ".join(f"{SHORT.get(k, k)} {number(v)}" for k, v in (t["after"] or {}).items() if k in SHORT)
    budget = f"budget {t['budget']}" if t["budget"] else "no budget: the first time, until the targets are met"
    return (f"{reached} ({before} → {after}); {t['cost_card_hours']:.3g} card-hours = {_pct(t['budget_share'])} of "
            f"the run's training cost ({budget})")


def _comparison(reuse: dict[str, Any], first: dict[str, Any]) -> dict[str, Any]:
    """The final comparison: the next run tuned from the imported case against the other arms on its checkpoint,
    and the first run's tuning (the knowledge base alone)."""
    t = reuse["tuning"]
    run_cost = t["run_cost_card_hours"]
    arms = {"transfer (imported case)": {"experiments": t["experiments_to_target"], "tried": t["experiments"],
                                         "cost_card_hours": t["cost_card_hours"]}, **t.get("baselines", {})}
    for a in arms.values():
        a["share"] = a["cost_card_hours"] / run_cost if run_cost else None
    return {"run": reuse["run"], "arms": arms, "first_run": {"experiments": first["experiments_to_target"],
                                                             "tried": first["experiments"],
                                                             "share": first["budget_share"]}}


def _comparison_line(c: dict[str, Any]) -> str:
    def one(name: str, a: dict[str, Any]) -> str:
        n = a["experiments"]
        return f"{name} {n} ({_pct(a['share'])})" if n else f"{name} not met in {a.get('tried', '?')}"

    first = c["first_run"]
    return ("experiments to every target on the next run: " + ", ".join(one(k, v) for k, v in c["arms"].items())
            + "; the first run, from the knowledge base alone: "
            + (f"{first['experiments']} ({_pct(first['share'])})" if first["experiments"] else
               f"not met in {first['tried']}"))


@debug_app.command("demo")
def demo(
    store: StoreOption = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Where to write the demo run "
                                                 "(default: <DEBUGTUNE_HOME>/runs/seed-scenario).")] = None,
    steps: Annotated[int, typer.Option("--steps", min=300,
                                       help="Training steps (the replay point is at step 250).")] = 3000,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the training (the next run uses seed + 1).")] = 0,
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Also count the experiments random "
                                            "search and the manual grids need on the same checkpoint.")] = True,
    json_out: JsonOption = False,
) -> None:
    """The seed journey: diagnose a tiny MoE whose router starts biased, suggest the remedies its trial can apply,
    tune the best one by replay from a checkpoint, package the case for the next team, and prevent it."""
    target = run_dir or settings.home() / "runs" / DEMO_RUN
    work = target.parent
    work.mkdir(parents=True, exist_ok=True)
    quiet = json_out
    out: dict[str, Any] = {}
    t_start = time.perf_counter()

    def busy(message: str):
        return nullcontext() if quiet else console.status(message)

    with session_store(store or "memory") as st:
        if not quiet:
            counts = class_counts(st)
            console.print(f"[bold]debugtune demo[/] — knowledge base: {counts.get('Cause', 0)} causes, "
                          f"{counts.get('Symptom', 0)} symptoms, {counts.get('CausalLink', 0)} causal links, "
                          f"{counts.get('Case', 0)} cases, {counts.get('Experiment', 0)} experiments "
                          f"(store: {st.target})")
            console.print("The seed scenario: a one-block mixture-of-experts LM (8 experts on 4 cabinets, top-1, a "
                          "locality loss) trained on CPU whose gate is initialised with std 10 instead of 0.02, "
                          "watched by the live probe.")

        # 1. diagnose
        _heading(1, "diagnose", quiet)
        from debugtune.api import diagnose

        with busy(f"training {steps} steps with the probe attached …"):
            seconds = journey.train_seed(target, seed=seed, steps=steps)
        if not quiet:
            console.print(f"trained in {seconds:.1f} s; telemetry and the training checkpoints (every 250 steps) in "
                          f"{escape(str(target))}")
        with busy("diagnosing …") as status:
            report = diagnose(target, store=st, progress=None if status is None else
                              lambda s: status.update(f"{s} …"))
        out["diagnosis"] = journey.diagnosis_step(report, target)
        if not quiet:
            from debugtune.cli.diagnose_cmd import print_report
            from debugtune.cli.report_cmd import demo_report

            print_report(report)
            console.print(f"report: {escape(str(Path(report.run_dir or target) / 'diagnosis.json'))}")
            demo_report(st, target)
        util = out["diagnosis"]["expert_utilisation"]
        top = report.hypotheses[0] if report.hypotheses else None
        cross = out["diagnosis"]["cross_cabinet"]
        _result((f"root cause {top.cause} ({top.confidence:.2f}): {' → '.join(top.chain)}" if top else
                 "no root cause") + f"; {_shares(util)}"
                + (f"; {cross['median']:.0%} of the dispatched tokens crossed cabinets (median over steps "
                   f"{cross['steps'][0]}–{cross['steps'][1]})" if cross["median"] is not None else ""), quiet)

        # 2. suggest
        _heading(2, "suggest", quiet)
        run_trial = journey.replay_point(target)
        if not quiet:
            console.print(f"cann-tune checkpoint {escape(report.run)} --step {run_trial.step}: the training "
                          f"checkpoint of step {run_trial.step} is the replay point; its trial "
                          f"{escape(run_trial.trial)} reports {', '.join(run_trial.objectives)}", highlight=False)
        sugg = journey.suggestions_step(st, report.run, run_trial)
        out["suggestions"] = sugg["suggestions"]
        if not quiet:
            console.print(f"the scenario's trial sets: {', '.join(sugg['settable'] or [])}", highlight=False)
            _show_suggestions(sugg["suggestions"])
        first = next((s for s in sugg["suggestions"] if s["applicable"]), None)
        passed = [s["remedy"] for s in sugg["suggestions"]
                  if not s["applicable"] and first and s["rank"] < first["rank"]]
        _result(f"top applicable: {first['remedy'] if first else 'none'}"
                + (f" ({', '.join(passed)} ranks higher but this run cannot apply it)" if passed else "")
                + f"; tuned jointly with the cross-cabinet finding's remedy and three more knobs: "
                  f"{', '.join(journey.CHAIN_REMEDIES)}", quiet)

        # 3. tune by replay
        _heading(3, "tune by replay", quiet)

        with busy("tuning by replay from the checkpoint, the first time: until every target is met …"):
            tuning = journey.tune_step(st, report.run, target, seed=seed, baselines=False, first=True)
        out["tuning"] = tuning
        if not quiet:
            _show_tuning(tuning)
        _result(_tuning_line(tuning), quiet)

        # 4. contribute and reuse
        _heading(4, "contribute and reuse", quiet)
        with busy("packaging the case and running its sandbox …"):
            package = journey.contribute_step(st, report.run, target, work / "seed-scenario-case.zip", tuning)
        out["package"] = package
        if not quiet:
            console.print(f"wrote {escape(package['path'])}: case {escape(package['id'])}, cause {package['cause']}, "
                          f"remedy {package['remedy']}; sandbox "
                          + ("claim held: " + escape(package["sandbox"]["claim"]) if package["sandbox"] else "none"))
            for note in package["notes"]:
                console.print(f"[yellow]{escape(note)}[/]")
        with busy("a fresh store imports it; the next run is trained, diagnosed and tuned there …") as status:
            reuse = journey.reuse_step(Path(package["path"]), work / f"{DEMO_RUN}-2", seed=seed + 1, steps=steps,
                                       first_experiments=tuning["experiments"], baselines=baselines,
                                       say=(lambda s: None) if status is None else lambda s: status.update(s + " …"))
        out["reuse"] = reuse
        out["tuning"]["comparison"] = _comparison(reuse, tuning)
        if not quiet:
            _show_tuning(reuse["tuning"])
        found = [c for c in reuse["similar_cases"] if c["imported"]]
        if found:
            used = ", ".join(f"{h['task']} ({h['experiments']} exp)" for h in reuse["history"]) or "none"
            text = (f"run {reuse['run']} (seed {seed + 1}) finds the package's case (similarity "
                    f"{found[0]['score']:.2f}); its tuning's history: {used}")
        else:
            near = reuse.get("near_misses") or []
            text = (f"run {reuse['run']} (seed {seed + 1}) did not reach the similarity threshold with the package's "
                    f"case" + (f" (nearest {near[0]['case']} {near[0]['score']:.2f})" if near else ""))
        _result(f"{text}; {_tuning_line(reuse['tuning'])}", quiet)
        _result(_comparison_line(out["tuning"]["comparison"]), quiet)

        # 5. prevent
        _heading(5, "prevent", quiet)
        with busy("learning a rule, linting the launch configs, checking the next model at attach …"):
            prevention = journey.prevention_step(st, report.run, work, seed=seed + 2)
        out["prevention"] = prevention
        if not quiet:
            if prevention["rule"]:
                console.print(f"learned {prevention['rule']} ({prevention['rule_severity']}): "
                              f"{escape(prevention['rule_message'])}", highlight=False)
            else:
                console.print(f"[yellow]no rule learned: {escape(prevention['rule_error'])}[/]")
            for kind in ("moe", "dense"):
                lint = prevention[f"lint_{kind}"]
                console.print(f"lint {escape(lint['path'])}: exit {prevention[f'lint_{kind}_exit']}, "
                              f"{lint['errors']} error(s), {lint['warnings']} warning(s); learned rule "
                              f"{'fired' if lint['learned_rule_fired'] else 'quiet'}", highlight=False)
        check = prevention["attach_check"]
        _result("attach(preflight=True) on the next biased model: " + (
            f"stopped before step 1 — {check['findings'][0]['message']}" if check["stopped"] else "not stopped"),
            quiet)
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    # the figures of every step stay beside the runs, whichever way they were shown
    atomic_write_bytes(work / "demo.json", json.dumps(out, indent=2, default=str).encode())
    if json_out:
        emit_json(out)
    else:
        console.print(f"[bold]demo done[/] in {out['seconds']:.0f} s; its figures in "
                      f"{escape(str(work / 'demo.json'))}", highlight=False)
