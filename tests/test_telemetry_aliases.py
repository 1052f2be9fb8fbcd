"""Metric spellings of the knowledge base: the table, the read-time renaming, the probe's log and the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from debugtune.engine.telemetry import TelemetryWriter, read_telemetry
from debugtune.engine.telemetry.aliases import AliasPlan, alias_table, canonical, normalise, read_alias_table
from debugtune.engine.telemetry.schema import dimension_of

DOCS = Path(__file__).resolve().parents[1] / "docs" / "telemetry.md"


@pytest.mark.parametrize(("spelling", "metric"), [
    ("lm loss", "loss"), ("Train/Samples/train_loss", "loss"), ("loss_metrics/global_avg_loss", "loss"),
    ("train/loss", "loss"), ("train_loss", "loss"), ("learning-rate", "lr"), ("learning_rate", "lr"),
    ("Train/Samples/lr", "lr"), ("lr-AdamW", "lr"), ("grad-norm", "grad_norm"), ("grad_2.0_norm_total", "grad_norm"),
    ("lm loss validation", "eval_loss"), ("validation_metrics/loss", "eval_loss"), ("val_loss", "eval_loss"),
    ("eval_loss", "eval_loss"), ("eval_accuracy", "eval_accuracy"), ("val_acc", "eval_accuracy"),
    ("train_acc", "accuracy"), ("load_balancing_loss", "aux_loss"), ("l_aux", "aux_loss"), ("z_loss", "z_loss"),
    ("router_z_loss", "z_loss"), ("dropped_tokens", "dropped_tokens"), ("num_dropped_tokens", "dropped_tokens"),
    ("moe_dropped_token_fraction", "dropped_token_frac"), ("token_drop_rate", "dropped_token_frac"),
    ("dropped_tokens_frac", "dropped_token_frac"),
    # case and separators do not matter
    ("LM-Loss", "loss"), ("Train Loss", "loss"), ("MOE/Dropped-Token Fraction", "dropped_token_frac"),
    ("Grad Norm", "grad_norm"),
])
def test_common_spellings_resolve(spelling, metric):
    assert canonical(spelling) == metric
    assert dimension_of(metric) is not None


@pytest.mark.parametrize(("name", "metric"), [
    ("train/load_balancing_loss", "aux_loss"), ("train/moe_dropped_token_fraction", "dropped_token_frac"),
    ("train_l_aux", "aux_loss"), ("train/num_dropped_tokens", "dropped_tokens"),
    ("train/samples_per_second", "train/samples_per_second"), ("training/load_balancing_loss",
                                                                "training/load_balancing_loss"),
])
def test_a_known_spelling_in_the_training_namespace_resolves(name, metric):
    """HF Trainer's W&B/TensorBoard callbacks and Lightning's self.log put training keys under 'train/'; the rest
    of the name is what the table knows (cases/metrics.ttl, dt:MetricNamespace). Unknown rests stay as logged."""
    assert canonical(name) == metric
    assert alias_table().namespaces == ("train_",)


def test_unknown_names_pass_through_unchanged():
    for name in ("my/custom metric", "grad_log2_hist:2^-3", "loss_alarm_spike"):
        assert canonical(name) == name


def test_every_spelling_names_its_framework_and_source():
    table = alias_table()
    frameworks = {a.framework for a in table.aliases}
    assert {"Megatron-LM", "DeepSpeed", "torchtitan", "HF Trainer", "Lightning"} <= frameworks
    for a in table.aliases:
        assert a.source.startswith("https://") and a.framework, a
    # one matching key never names two metrics (read_alias_table refuses such a table)
    keys = {}
    for a in table.aliases:
        assert keys.setdefault(normalise(a.spelling), a.metric) == a.metric


def test_a_bad_table_names_the_file(tmp_path):
    head = """@prefix dt: <https://w3id.org/debugtune#> . @prefix m: <https://w3id.org/debugtune/kb/metric/> .
    @prefix skos: <http://www.w3.org/2004/02/skos/core#> . @prefix dct: <http://purl.org/dc/terms/> .
    @prefix owl: <http://www.w3.org/2002/07/owl#> .
    m:a dt:metricName "a" ; skos:altLabel "x" . m:b dt:metricName "b" ; skos:altLabel "X" .
    """
    axiom = ('[] a owl:Axiom ; owl:annotatedSource m:{m} ; owl:annotatedProperty skos:altLabel ; '
             'owl:annotatedTarget "{t}" ; dct:source <https://example.org/{m}> .\n')
    clash = tmp_path / "clash.ttl"
    clash.write_text(head + axiom.format(m="a", t="x") + axiom.format(m="b", t="X"))
    with pytest.raises(ValueError, match=r"clash\.ttl.*'X'"):
        read_alias_table(clash)
    unsourced = tmp_path / "unsourced.ttl"
    unsourced.write_text(head + axiom.format(m="a", t="x"))
    with pytest.raises(ValueError, match=r"unsourced\.ttl.*'X'"):
        read_alias_table(unsourced)


def _run(tmp_path, names):
    with TelemetryWriter(tmp_path, "r", rank=0) as w:
        for step in range(6):
            for dim, name, entity in names:
                w.add(step, dim, name, entity, float(step))


def test_read_time_renaming_and_filters(tmp_path):
    _run(tmp_path, [("convergence", "lm loss", ""), ("convergence", "grad-norm", ""),
                    ("convergence", "moe_dropped_token_fraction", "moe"), ("hardware", "rss_bytes", "")])
    tel = read_telemetry(tmp_path)
    assert tel.metrics() == ["dropped_token_frac", "grad_norm", "loss", "rss_bytes"]
    assert tel.series("loss")[1].tolist() == [0, 1, 2, 3, 4, 5]
    # a renamed metric moves to its canonical dimension, also under a dimension filter
    assert read_telemetry(tmp_path, dimensions="gradient").metrics() == ["grad_norm"]
    assert read_telemetry(tmp_path, dimensions="convergence").metrics() == ["dropped_token_frac", "loss"]
    # a metric filter may name the canonical name or a spelling
    assert read_telemetry(tmp_path, metrics="loss").metrics() == ["loss"]
    assert read_telemetry(tmp_path, metrics=["LM Loss"], steps=range(2)).table.num_rows == 2
    assert read_telemetry(tmp_path, metrics="dropped_token_frac", entities="moe").table.num_rows == 6
    assert read_telemetry(tmp_path, aliases=False).metrics() == ["grad-norm", "lm loss", "moe_dropped_token_fraction",
                                                                 "rss_bytes"]


def test_two_series_are_never_merged(tmp_path):
    """HF Trainer logs a per-step ``loss`` and an end-of-run ``train_loss`` average: both stay as they are."""
    _run(tmp_path, [("convergence", "loss", ""), ("convergence", "train_loss", ""), ("convergence", "val/loss", ""),
                    ("convergence", "valid_loss", "")])
    tel = read_telemetry(tmp_path)
    assert tel.metrics() == ["eval_loss", "loss", "train_loss", "valid_loss"]  # a tie: the first name wins
    plan = AliasPlan({"val/loss": 10, "valid_loss": 3, "loss": 5, "train_loss": 1})
    assert plan.rename == {"val/loss": "eval_loss"}  # of two spellings, the one with more rows


def test_the_diagnosis_sees_canonical_names(tmp_path):
    from debugtune.engine.diagnose import TelemetryView

    _run(tmp_path, [("convergence", "lm loss", ""), ("convergence", "learning-rate", "")])
    tel = read_telemetry(tmp_path, dimensions=["convergence", "gradient", "communication", "hardware"])
    view = TelemetryView.from_table(tel.table, tel.meta)
    assert view.metrics == {"loss", "lr"}


def test_the_probe_logs_canonical_names(tmp_path):
    torch = pytest.importorskip("torch")
    import debugtune

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds={}) as probe:
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
            probe.log(**{"lm loss": 1.0, "learning_rate": 0.1, "moe_dropped_token_fraction": 0.2, "Grad-Norm": 3.0,
                         "train_loss": 1.5, "my_metric": 7.0})
    stored = read_telemetry(tmp_path / "run", aliases=False)
    names = set(stored.metrics())
    assert {"loss", "lr", "dropped_token_frac", "grad_norm_logged", "train_loss", "my_metric"} <= names
    assert "lm loss" not in names and "learning_rate" not in names  # the first spelling of a metric takes its name
    assert stored.series("train_loss")[1].tolist() == [1.5] * 3  # a second spelling of loss keeps its own name


def test_docs_list_the_table():
    text = DOCS.read_text()
    block = re.search(r"<!-- aliases:begin -->\n(.*?)\n<!-- aliases:end -->", text, re.S)
    assert block, "docs/telemetry.md has the generated alias table"
    assert block.group(1).strip() == alias_table().markdown().strip(), \
        "regenerate it: python -m debugtune.engine.telemetry.aliases --markdown"
