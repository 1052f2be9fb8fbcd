"""The public API is visible (dir, __all__, help, type hints) while `import debugtune` stays lazy."""

from __future__ import annotations

import inspect
import json
import pydoc
import subprocess
import sys

import debugtune

PUBLIC = {"attach", "diagnose", "query", "open_store", "lint", "tune", "HFCallback", "LightningCallback"}


def test_dir_and_all_list_the_api():
    assert PUBLIC <= set(debugtune.__all__)
    assert PUBLIC <= set(dir(debugtune))
    assert not {"import_module", "Any", "annotations", "TYPE_CHECKING"} & set(dir(debugtune))
    assert set(debugtune.__all__) == {"__version__", *debugtune._API}  # the literal and the lazy table agree


def test_import_is_lazy():
    code = ("import sys, json, debugtune; print(json.dumps([m for m in ('torch', 'transformers', 'lightning', "
            "'debugtune.api', 'debugtune.kg', 'pyoxigraph') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_help_and_signatures():
    text = pydoc.render_doc(debugtune, renderer=pydoc.plaintext)
    for name in ("attach", "diagnose", "query", "open_store", "lint", "tune", "HFCallback", "LightningCallback"):
        assert name in text
    assert "run_dir_or_id" in text and "optimizer" in text  # signatures, not (*args, **kwargs)
    params = inspect.signature(debugtune.attach).parameters
    assert list(params)[:3] == ["model", "optimizer", "run_dir"]
    assert "configs" in inspect.signature(debugtune.lint).parameters
    assert "AutoResult" in str(inspect.signature(debugtune.tune).return_annotation)


def test_lint_through_the_api(tmp_path):
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    script = tmp_path / "moe.sh"
    script.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
                      "--num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
                      "--global-batch-size 16 --lr 1e-4 --bf16 --num-experts 8 --expert-model-parallel-size 8 "
                      "--moe-token-dispatcher-type alltoall --moe-router-load-balancing-type none\n")
    store = open_store(None)
    load_knowledge(store)
    (result,) = debugtune.lint(script, store=store)
    assert result.framework == "megatron" and result.rules_run > 0
    assert any("load" in v.message.lower() or "aux" in v.message.lower() for v in result.violations)


def test_unknown_name_is_an_attribute_error():
    try:
        debugtune.no_such_thing  # noqa: B018
    except AttributeError as err:
        assert "no_such_thing" in str(err)
    else:
        raise AssertionError("expected AttributeError")
