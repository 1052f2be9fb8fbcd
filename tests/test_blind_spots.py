"""A run without findings is called healthy only when it could have shown a fault (engine/infer/blind.py).

A real CPU training writes only loss, learning rate and gradient norm to JSON lines, as a user's own logger does;
imported, it shows no finding. A log like that could not show dead units, stale gradients or label errors either,
so the report does not call the run healthy: it is undetermined, names the symptoms it could not judge and the
metrics (not already recorded) that would judge them. An attached run with the same (absent) findings is healthy
(tests/test_diagnose_cli.py::test_healthy_run_says_so).
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from debugtune.api import diagnose  # noqa: E402
from debugtune.engine.capture.importers.registry import import_path  # noqa: E402
from debugtune.engine.infer.blind import blind_spots  # noqa: E402
from debugtune.kg import open_store  # noqa: E402
from debugtune.kg.knowledge import load_knowledge, thresholds  # noqa: E402


def _train_and_log(path, *, noise: float, steps: int = 400) -> None:
    g = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    x = torch.randn(2048, 12, generator=g)
    y = (x[:, :4] @ torch.randn(4, 4, generator=g)).argmax(1)
    flip = torch.rand(2048, generator=g) < noise
    y = torch.where(flip, torch.randint(0, 4, (2048,), generator=g), y)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with path.open("w") as fh:
        for step in range(steps):
            i = torch.randint(0, 2048, (64,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[i]), y[i])
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
            opt.step()
            fh.write(json.dumps({"step": step, "loss": loss.item(), "lr": 1e-2, "grad_norm": norm}) + "\n")


def test_an_imported_loss_log_without_findings_is_not_called_healthy(tmp_path):
    log = tmp_path / "metrics.jsonl"
    _train_and_log(log, noise=0.0)
    import_path(log, tmp_path / "run")
    report = diagnose(tmp_path / "run", save=False)
    assert not report.findings, [f.symptom for f in report.findings]
    assert report.status == "undetermined" and report.blind is not None
    assert "healthy" not in report.summary().split(":")[0]
    body = report.as_dict()["blind_spots"]
    assert body["judged"] < body["total"] and 0 < body["judged_share"] < 0.3
    assert {"StaleGradients", "DeadUnits", "LabelErrorsAtRandom"} <= set(body["unjudged"])
    assert body["record"] and not {"loss", "lr", "grad_norm"} & set(body["record"])


def test_blind_spots_need_a_training_flow_and_enough_unjudged():
    store = open_store(None)
    load_knowledge(store)
    th = thresholds(store)
    assert blind_spots({"SlowRank"}, {"communication": "diagnosed", "gradient": "not diagnosed"}, set(), th) is None
    everything = {"GradientExplosion", "LossPlateau"}
    few = blind_spots(everything, {"gradient": "diagnosed", "convergence": "diagnosed"}, {"loss"}, th)
    assert few is not None and few.judged == 2 and "loss" not in few.record
    from debugtune.engine.diagnose.detectors import DETECTORS
    allsym = {d.symptom for d in DETECTORS if d.dimension in ("gradient", "convergence")}
    assert blind_spots(allsym, {"gradient": "diagnosed", "convergence": "diagnosed"}, set(), th) is None


def test_a_log_with_a_finding_and_no_cause_says_what_it_could_not_rule_out(tmp_path):
    """Half the labels replaced, only loss, learning rate and gradient norm logged: the loss stalls (a finding), no
    cause is named, and the report says which symptoms it could not judge (label errors among them) and what to
    record; the text report shows that, and what stays open, and puts the notes of symptoms whose metrics were not
    recorded on one line (``--notes``: one each)."""
    from typer.testing import CliRunner

    from debugtune.cli.apps import debug_app

    log = tmp_path / "metrics.jsonl"
    _train_and_log(log, noise=0.5)
    import_path(log, tmp_path / "run")
    report = diagnose(tmp_path / "run", save=False)
    assert report.findings and not report.hypotheses, report.summary()
    assert report.blind is not None and "LabelErrorsAtRandom" in report.blind.unjudged
    assert "expert_tokens" in report.blind.record  # an imported log says nothing of its model: experts kept
    args = ["diagnose", str(tmp_path / "run"), "--store", "memory", "--wide"]
    text = CliRunner().invoke(debug_app, args).output
    assert "blind spots: only" in text and "cannot be ruled out" in text
    assert "LabelErrorsAtRandom not judged" not in text and "not judged, a metric their detectors read" in text
    full = CliRunner().invoke(debug_app, [*args, "--notes"]).output
    assert "LabelErrorsAtRandom not judged: output_label_kappa" in full
