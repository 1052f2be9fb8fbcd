"""The HF Trainer and Lightning callbacks: the examples of docs/integrations.md run as written (real tiny models
trained on CPU, no download), then what they recorded is checked; MoE routers found by type in a Mixtral."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from debugtune.engine.telemetry import read_run_json, read_telemetry

DOC = Path(__file__).resolve().parent.parent / "docs" / "integrations.md"
_BLOCK = re.compile(r"(<!-- not run[^>]*-->\s*)?```python\n(.*?)```", re.S)


def _examples() -> dict[str, str]:
    """The runnable python blocks of the doc, by the section they are in."""
    text = DOC.read_text(encoding="utf-8")
    out = {}
    for m in _BLOCK.finditer(text):
        if m.group(1):
            continue
        section = re.findall(r"^## (.+)$", text[: m.start()], re.M)[-1]
        out[section] = m.group(2)
    return out


def _run_example(section: str, cwd: Path, monkeypatch) -> dict:
    monkeypatch.chdir(cwd)
    scope: dict = {"__name__": "__doc_example__"}
    exec(compile(_examples()[section], f"{DOC.name}:{section}", "exec"), scope)  # noqa: S102 — the doc, as written
    return scope


def test_doc_has_both_examples_and_marks_the_megatron_one():
    assert set(_examples()) == {"Hugging Face `Trainer`", "Lightning"}
    assert "not run: needs Megatron-LM" in DOC.read_text(encoding="utf-8")


def test_hf_trainer_example(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    scope = _run_example("Hugging Face `Trainer`", tmp_path, monkeypatch)
    run = tmp_path / "runs" / "hf-demo"
    tel = read_telemetry(run)
    steps, loss = tel.series("loss")
    assert steps.tolist() == list(range(24))  # every optimizer step, not only every logging_steps
    assert np.isfinite(loss).all() and 3.0 < loss.mean() < 6.0  # cross-entropy over 128 tokens starts near ln 128
    assert tel.series("eval_loss")[0].tolist() == [7, 15, 23]  # logged at global_step 8, 16, 24
    assert tel.series("lr")[0].tolist() == list(range(24))
    assert tel.series("grad_norm_logged")[0].tolist() == [3, 7, 11, 15, 19, 23]
    layers = set(tel.entities("grad_norm"))
    assert {"transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_fc", ""} <= layers
    meta = read_run_json(run)
    assert meta["framework"] == "transformers" and meta["world_size"] == 1
    assert meta["model"]["type"] == "GPT2LMHeadModel" and meta["model"]["parameters"] > 0
    assert meta["trainer"]["logging_steps"] == 4
    assert meta["probe"]["errors"]["total"] == 0 and meta["source"]["status"] == "closed"
    report = scope["callback"].report
    assert report is not None and (run / "diagnosis.json").is_file()
    assert report.coverage["gradient"] == "diagnosed" and report.coverage["convergence"] == "diagnosed"


def test_lightning_example(tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    scope = _run_example("Lightning", tmp_path, monkeypatch)
    run = tmp_path / "runs" / "lightning-demo"
    tel = read_telemetry(run)
    assert tel.series("loss")[0].tolist() == list(range(30))
    assert tel.series("eval_loss")[0].tolist() == [9, 19, 29]
    # the statistics are of the gradients the optimizer sees: after Lightning clipped them to norm 1.0, and
    # on the step they belong to (step 0 included: the pre-step work runs after the closure's backward)
    steps, norm = tel.series("grad_norm")
    assert steps.tolist() == list(range(30))
    assert (norm <= 1.0 + 1e-5).all() and norm.max() > 0.9
    assert tel.series("update_ratio", "net.0")[0].tolist() == [0, 10, 20]
    meta = read_run_json(run)
    assert meta["framework"] == "lightning" and meta["trainer"]["gradient_clip_val"] == 1.0
    assert meta["probe"]["errors"]["total"] == 0
    cb = scope["callback"]
    assert cb.report is not None and cb.report.coverage["gradient"] == "diagnosed"
    assert "configure_gradient_clipping" not in vars(scope["trainer"].lightning_module)  # restored


def test_hf_callback_watches_mixtral_routers(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import torch

    from debugtune.integrations.hf import DebugtuneCallback

    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=32)
    model = transformers.MixtralForCausalLM(config)
    data = [{"input_ids": x, "labels": x} for x in torch.randint(0, 64, (16, 8))]
    args = transformers.TrainingArguments(str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
                                          logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                                          disable_tqdm=True)
    cb = DebugtuneCallback(tmp_path / "run", hardware=False)
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb]).train()
    assert [r.name for r in cb.session.watched] == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    tel = read_telemetry(tmp_path / "run")
    steps, keys, tokens = tel.pivot("expert_tokens")
    assert steps.tolist() == [0, 1, 2] and len(keys) == 8  # 2 routers x 4 experts
    router0 = [i for i, k in enumerate(keys) if k.startswith("model.layers.0.mlp.gate/expert:")]
    assert tokens[:, router0].sum(axis=1).tolist() == [2 * 8 * 2] * 3  # batch 2 x 8 tokens x top-2
    assert set(tel.entities("router_grad_norm")) == {"model.layers.0.mlp.gate", "model.layers.1.mlp.gate"}
    assert read_run_json(tmp_path / "run")["probe"]["routers"] == [r.name for r in cb.session.watched]


@pytest.mark.parametrize("router_logits", [None, True])
def test_hf_callback_records_whether_a_mixtral_trains_with_a_balancing_term(tmp_path, router_logits):
    """transformers' MoE configs default to ``output_router_logits=False``, and the Trainer then trains with no
    balancing term at all: the callback records the coefficient the training really used (0 when the forward
    returned no aux_loss), which the diagnosis reads as the balancing term switched off."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import torch

    from debugtune.integrations.hf import DebugtuneCallback

    torch.manual_seed(0)
    extra = {} if router_logits is None else {"output_router_logits": True, "router_aux_loss_coef": 0.02}
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=32, **extra)
    counting = (torch.randint(0, 64, (64, 1)) + torch.arange(8)) % 64  # each token the last plus one: learnable
    data = [{"input_ids": x, "labels": x} for x in counting]
    args = transformers.TrainingArguments(str(tmp_path / "out"), max_steps=30, per_device_train_batch_size=2,
                                          logging_steps=5, report_to=[], use_cpu=True, save_strategy="no",
                                          disable_tqdm=True)
    cb = DebugtuneCallback(tmp_path / "run", hardware=False, diagnose=True)
    transformers.Trainer(model=transformers.MixtralForCausalLM(config), args=args, train_dataset=data,
                         callbacks=[cb]).train()
    moe = read_run_json(tmp_path / "run")["moe"]
    found = [f for f in cb.report.findings if f.detector == "moe.balance_config"]
    if router_logits is None:
        assert moe["aux_loss_coeff"] == 0.0 and "returned no aux_loss" in moe["aux_loss_coeff_from"]
        assert found and found[0].symptom == "BalanceLossNegligible"
        assert cb.report.hypotheses and cb.report.hypotheses[0].cause == "AuxLossDisabled"
    else:
        assert moe == {"aux_loss_coeff": 0.02, "aux_loss_coeff_from": "config.router_aux_loss_coef"} and not found


def test_named_router_errors(tmp_path):
    torch = pytest.importorskip("torch")
    from debugtune.integrations.routers import named_routers

    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"router '0': its expert count and top-k"):
        named_routers(net, ["0"])
    with pytest.raises(ValueError, match="router 'gate': no such module"):
        named_routers(net, ["gate"])
    (r,) = named_routers(net, {"1": (2, 1)})
    assert (r.name, r.num_experts, r.top_k) == ("1", 2, 1)
