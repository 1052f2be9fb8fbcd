"""Megatron-LM logs read fully: the argument dump into run.json, MoE losses, timers, skipped/NaN iterations, and
the report of a Megatron MoE log (loss, grad norm, balancing loss, the oscillation with its period)."""

from __future__ import annotations

import math

import pytest
from megatron_log_sample import megatron_moe_log

from debugtune.engine.capture.importers import ImportFormatError, detect_format, import_path
from debugtune.engine.capture.importers.megatron_args import parse_value, world_line
from debugtune.engine.telemetry import read_run_json, read_telemetry


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    (root / "train.log").write_text(megatron_moe_log())
    import_path(root / "train.log", root / "run")
    return root / "run"


def test_argument_dump_fills_run_json(moe_run):
    meta = read_run_json(moe_run)
    assert meta["framework"] == "megatron" and meta["world_size"] == 16
    assert meta["parallel"] == {"tp": 2, "pp": 2, "dp": 4, "cp": 1, "ep": 4, "etp": 1, "vpp": 2,
                                "sequence_parallel": True}
    assert meta["model"]["num_layers"] == 8 and meta["model"]["activation"] == "swiglu"
    assert meta["model"]["parameters"] == 4 * 412_000_000 + 2 * 1_000  # every (tensor, pipeline) rank printed
    assert meta["moe"] == {"num_experts": 8, "top_k": 2, "router_score_function": "softmax",
                           "load_balancing": "aux_loss", "aux_loss_coeff": 0.01, "z_loss_coeff": 0.001,
                           "token_dispatcher": "alltoall", "layer_freq": 1, "grouped_gemm": True}
    assert meta["precision"]["dtype"] == "bf16" and meta["precision"]["initial_loss_scale"] == 4294967296
    assert meta["schedule"]["lr_decay_style"] == "cosine" and meta["schedule"]["lr_warmup_iters"] == 10
    assert meta["train_iters"] == 200
    text = str(meta)
    assert "/mnt/" not in text  # paths of the dump (data_path, save, tensorboard_dir) are not copied


def test_moe_losses_timers_and_bad_iterations(moe_run):
    tel = read_telemetry(moe_run)
    steps, aux = tel.series("aux_loss")
    assert steps.size == 119 and 57 not in steps  # the NaN iteration prints no losses
    assert aux[0] == pytest.approx(1.02 + 0.01 * math.sin(2 * math.pi / 16), abs=1e-6)
    assert tel.series("z_loss")[1][0] == pytest.approx(0.03)
    gs, gn = tel.series("grad_norm")
    assert math.isnan(dict(zip(gs, gn, strict=True))[57])
    assert dict(zip(*tel.series("skipped_iterations"), strict=True))[57] == 1.0
    assert dict(zip(*tel.series("nan_iterations"), strict=True))[57] == 1.0
    assert tel.series("comm_ms")[0].tolist() == [20, 40, 60, 80, 100, 120]
    assert tel.series("comm_ms")[1][0] == pytest.approx(180.0 + 30.0)  # max over ranks, timers of one kind add up
    assert tel.series("optimizer_ms")[1][0] == pytest.approx(62.5)
    assert tel.series("eval_loss")[0].tolist() == [40, 80, 120]
    assert tel.series("tflops_per_device")[1][0] == pytest.approx(239.8 - math.cos(1), abs=0.06)


def test_dump_only_head_is_detected_and_parsed(tmp_path):
    head = megatron_moe_log().split(" [2024", 1)[0]
    (tmp_path / "start.log").write_text(head + megatron_moe_log(iterations=3).split("\n")[-2] + "\n")
    assert detect_format(tmp_path / "start.log") == "megatron-log"
    assert parse_value("[1, 2]") == [1, 2] and parse_value("None") is None and parse_value("torch.bfloat16") == \
        "torch.bfloat16" and parse_value("1e-4") == 1e-4 and parse_value("0.0.0.0") == "0.0.0.0"
    assert world_line("using world size: 8, data-parallel size: 2, context-parallel size: 1 tensor-model-parallel "
                      "size: 2, pipeline-model-parallel size: 2") == {
        "world_size": 8, "data_parallel_size": 2, "context_parallel_size": 1, "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 2}


def test_bad_number_names_line_and_field(tmp_path):
    lines = megatron_moe_log(iterations=3, timers=False).splitlines()
    i = next(i for i, line in enumerate(lines) if " iteration        2/" in line)
    lines[i] = lines[i].replace("lm loss: ", "lm loss: x")
    (tmp_path / "bad.log").write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportFormatError, match=rf"bad.log:{i + 1} \(field .lm loss.\)"):
        import_path(tmp_path / "bad.log", tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_report_of_a_megatron_moe_log(moe_run):
    import debugtune
    from debugtune.engine.report import build_report
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    store = open_store(None)
    load_knowledge(store)
    report = debugtune.diagnose(moe_run, store=store)
    (osc,) = [f for f in report.findings if f.symptom == "LossOscillation"]
    assert osc.evidence["period_steps"] == pytest.approx(16, abs=1)
    # what a log cannot carry is listed as not judged, with the metric that would decide it
    assert any(n.startswith("ExpertImbalance, DeadExperts not judged: expert_tokens not recorded")
               for n in report.notes)
    page = build_report(store, report.run)
    assert page.sections["experts"]["state"] == "rendered" and page.sections["gradients"]["state"] == "rendered"
    assert "This is an MoE run (8 experts, top-2" in page.html and "not an MoE run" not in page.html
    assert "The loss oscillates with a period of 16 steps" in page.html
    assert "period 16 steps" in page.html  # the band's label on the loss plot
    assert '"name":"load-balancing loss"' in page.html and '"name":"router z-loss"' in page.html
    assert '"name":"gradient norm"' in page.html


def test_a_megatron_moe_log_with_the_default_balancing_coefficient(tmp_path, monkeypatch):
    """Megatron's ``moe_aux_loss_coeff`` defaults to 0, which its router treats as no balancing: read from the
    argument dump, it is the balancing term switched off (moe.balance_config), logged balancing loss or not. With
    the expert bias on (DeepSeek-V3's auxiliary-loss-free balancing) it is not judged."""
    import megatron_log_sample

    import debugtune

    for bias, found in ((False, True), (True, False)):
        args = {**megatron_log_sample.ARGS, "moe_aux_loss_coeff": 0.0, "moe_router_enable_expert_bias": bias}
        monkeypatch.setattr(megatron_log_sample, "ARGS", args)
        log = tmp_path / f"bias-{bias}" / "train.log"
        log.parent.mkdir()
        log.write_text(megatron_log_sample.megatron_moe_log())
        import_path(log, log.parent / "run")
        assert read_run_json(log.parent / "run")["moe"].get("expert_bias", False) is bias  # False is left out
        report = debugtune.diagnose(log.parent / "run", save=False)
        config = [f for f in report.findings if f.detector == "moe.balance_config"]
        assert bool(config) is found
        if found:
            assert config[0].symptom == "BalanceLossNegligible" and config[0].evidence["aux_loss_coeff"] == 0.0
