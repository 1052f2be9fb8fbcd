"""`cann-debug lint`: text, --json and --sarif output, exit codes, --env, stdin, --list-rules, and the
`--learn RUN` round trip that turns a confirmed cause into a rule in the local graph."""

from __future__ import annotations

import gc
import json

import jsonschema
import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import debug_app
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import GRAPH_LOCAL, run_base
from debugtune.kg.records import Finding, Hypothesis

runner = CliRunner()

BAD_SCRIPT = """\
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 24 --hidden-size 2048 --num-attention-heads 12 --seq-length 2048 \\
    --max-position-embeddings 2048 --tensor-model-parallel-size 8 \\
    --micro-batch-size 1 --global-batch-size 32 --lr 3e-4 --bf16 --tensor-model-paralel-size 2
"""
GOOD_DS = ('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,\n'
           ' "bf16": {"enabled": true}, "zero_optimization": {"stage": 2, "overlap_comm": true}}\n')
MOE_SCRIPT = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
              "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 16 --lr 1e-4 "
              "--bf16 --num-experts 8 --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall "
              "--moe-router-load-balancing-type none\n")

# The parts of the SARIF 2.1.0 schema (docs.oasis-open.org/sarif/sarif/v2.1.0) that every log must satisfy:
# required properties, the version, level values and positive line numbers.
SARIF_REQUIRED = {
    "type": "object", "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "runs": {"type": "array", "items": {
            "type": "object", "required": ["tool"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string"},
                        "rules": {"type": "array", "items": {"type": "object", "required": ["id"]}}}}}},
                "invocations": {"type": "array", "items": {"type": "object", "required": ["executionSuccessful"]}},
                "results": {"type": "array", "items": {
                    "type": "object", "required": ["message"],
                    "properties": {
                        "message": {"type": "object", "required": ["text"]},
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "ruleIndex": {"type": "integer", "minimum": 0},
                        "locations": {"type": "array", "items": {"type": "object", "properties": {
                            "physicalLocation": {"type": "object", "required": ["artifactLocation"], "properties": {
                                "artifactLocation": {"type": "object", "required": ["uri"]},
                                "region": {"type": "object", "properties": {
                                    "startLine": {"type": "integer", "minimum": 1}}}}}}}}}}}}}}},
}


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("lintcli") / "store"
    st = open_store(path)
    load_knowledge(st)
    st.close()
    del st
    gc.collect()
    return str(path)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.sh").write_text(BAD_SCRIPT)
    (tmp_path / "good.json").write_text(GOOD_DS)
    (tmp_path / "broken.json").write_text('{"train_batch_size": 8,\n "fp16": {"enabled": true,}}\n')
    (tmp_path / "moe.sh").write_text(MOE_SCRIPT)
    return tmp_path


def _run(*args: str, input: str | None = None):
    return runner.invoke(debug_app, ["lint", *args], input=input)


def test_text_output_names_rule_keys_message_and_fix(store_dir, files):
    r = _run(str(files / "bad.sh"), "--store", store_dir)
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())  # messages wrap at the terminal's width (80 here)
    assert "MEG016" in text and "12 attention heads do not split over tensor-parallel size 8" in text
    assert "num_attention_heads=12" in text and "fix:" in text
    assert "MEG105" in text and "did you mean --tensor-model-parallel-size?" in text
    assert f"{files / 'bad.sh'}:3" in r.output.replace("\n", "")


def test_clean_config_exits_0(store_dir, files):
    r = _run(str(files / "good.json"), "--store", store_dir, "--env", "WORLD_SIZE=8")
    assert r.exit_code == 0, r.output
    assert "0 errors, 0 warnings" in r.output


def test_json_output_and_environment(store_dir, files):
    r = _run(str(files / "good.json"), "--store", store_dir, "--env", "WORLD_SIZE=16", "--json")
    assert r.exit_code == 1, r.output
    body = json.loads(r.output)
    [config] = body["configs"]
    [v] = [v for v in config["violations"] if v["rule"] == "DS001"]
    assert v["severity"] == "error" and v["error_class"] == "batch-arithmetic" and v["fix"]
    assert {"key": "world_size", "value": 16, "origin": "derived", "line": None} in v["keys"]
    assert body["errors"] == config["errors"] == 1 and body["exit_code"] == 1


def test_unreadable_input_exits_2_and_names_the_position(store_dir, files):
    r = _run(str(files / "broken.json"), str(files / "good.json"), "--store", store_dir)
    assert r.exit_code == 2
    assert f"{files / 'broken.json'}:2:27: invalid JSON" in r.output.replace("\n", "")
    r = _run(str(files / "broken.json"), "--store", store_dir, "--json")
    assert r.exit_code == 2 and json.loads(r.output)["unreadable"][0]["path"] == str(files / "broken.json")


def test_sarif_is_valid_and_carries_rules_and_locations(store_dir, files):
    r = _run(str(files / "bad.sh"), str(files / "broken.json"), "--store", store_dir, "--sarif")
    assert r.exit_code == 2
    log = json.loads(r.output)
    jsonschema.validate(log, SARIF_REQUIRED)
    [run] = log["runs"]
    rules = [d["id"] for d in run["tool"]["driver"]["rules"]]
    assert rules == sorted(set(rules)) and "MEG016" in rules
    for res in run["results"]:
        assert rules[res["ruleIndex"]] == res["ruleId"]
    meg016 = next(res for res in run["results"] if res["ruleId"] == "MEG016")
    assert meg016["level"] == "error" and meg016["locations"][0]["physicalLocation"]["region"]["startLine"] == 3
    assert "Fix:" in meg016["message"]["text"]
    assert run["invocations"][0]["executionSuccessful"] is False
    assert "invalid JSON" in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]


def test_stdin_framework_and_version(store_dir):
    args = "--num-experts 8 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --disable-bias-linear"
    r = _run("-", "--framework", "megatron", "--version", "0.14.0", "--store", store_dir, "--json", input=args)
    body = json.loads(r.output)
    assert body["configs"][0]["path"] == "<stdin>" and body["configs"][0]["version"] == "0.14.0"
    assert "MOE006" in {v["rule"] for v in body["configs"][0]["violations"]}
    r = _run("-", "--framework", "deepspeed", "--store", store_dir, input="torchrun train.py")
    assert r.exit_code == 2


def test_list_rules(store_dir):
    r = _run("--list-rules", "--framework", "deepspeed", "--store", store_dir, "--json")
    assert r.exit_code == 0
    ids = {rule["id"] for rule in json.loads(r.output)["rules"]}
    assert "DS001" in ids and not any(i.startswith("MEG") for i in ids)


def _diagnose(store_dir: str, run_id: str, cause: str, confidence: float) -> None:
    st = open_store(store_dir)
    finding = Finding(id="f1", symptom="ExpertImbalance", dimension="convergence", entity="decoder.layers.3/expert:5",
                      onset_step=120, end_step=900, severity=0.9, evidence={"max_vio": 3.1}, detector="moe.imbalance")
    replace_diagnosis(st, run_id, {"world_size": 8}, [finding], hypotheses=[
        Hypothesis(cause=cause, confidence=confidence, chain=(cause, "ExpertImbalance"), findings=("f1",),
                   explanation="aux loss coefficient 0", rank=1)])
    st.close()
    del st
    gc.collect()


def test_learn_round_trip(store_dir, files):
    (files / "moe_noaux.sh").write_text(MOE_SCRIPT.replace(" --moe-router-load-balancing-type none", ""))
    before = _run(str(files / "moe_noaux.sh"), "--store", store_dir, "--json")
    assert "LRN-AuxLossDisabled" not in {v["rule"] for v in json.loads(before.output)["configs"][0]["violations"]}

    _diagnose(store_dir, "moe-collapse", "AuxLossDisabled", 0.83)
    r = _run("--learn", "moe-collapse", str(files / "moe_noaux.sh"), "--store", store_dir)
    assert r.exit_code == 1, r.output
    assert "learned LRN-AuxLossDisabled" in r.output and "cfg:moe_aux_loss_coeff" in r.output
    assert "LRN-AuxLossDisabled" in r.output and "moe-collapse" in r.output

    r = _run(str(files / "moe_noaux.sh"), "--store", store_dir, "--json")
    [hit] = [v for v in json.loads(r.output)["configs"][0]["violations"] if v["rule"] == "LRN-AuxLossDisabled"]
    assert hit["learned"] and hit["prevents"] == ["AuxLossDisabled"] and hit["severity"] == "error"
    fixed = MOE_SCRIPT.replace(" --moe-router-load-balancing-type none", " --moe-aux-loss-coeff 1e-2")
    r = _run("-", "--store", store_dir, "--json", input=fixed)
    assert "LRN-AuxLossDisabled" not in {v["rule"] for v in json.loads(r.output)["configs"][0]["violations"]}

    r = _run("--learn", "moe-collapse", "--store", store_dir, "--json")   # learning again replaces the rule
    assert r.exit_code == 0 and json.loads(r.output)["learned"]["id"] == "LRN-AuxLossDisabled"
    st = open_store(store_dir)
    rows = st.query(f"""SELECT ?r ?from WHERE {{ GRAPH <{GRAPH_LOCAL}> {{
        ?r a dt:PreventionRule ; dt:ruleId "LRN-AuxLossDisabled" ; dt:learnedFrom ?from }} }}""").dicts()
    st.close()
    del st
    gc.collect()
    assert rows == [{"r": rows[0]["r"], "from": run_base("moe-collapse") + "hypothesis/1"}]


def test_learn_refuses_an_unconfirmed_or_missing_diagnosis(store_dir):
    _diagnose(store_dir, "weak-run", "AuxLossDisabled", 0.2)
    r = _run("--learn", "weak-run", "--store", store_dir)
    assert r.exit_code == 2 and "not a confirmed cause" in r.output
    r = _run("--learn", "never-diagnosed", "--store", store_dir)
    assert r.exit_code == 2 and "no hypotheses" in r.output


def test_the_process_environment_is_the_launch_environment(store_dir, files):
    """WORLD_SIZE set by the scheduler judges the batch rules; without it they are named as not checked, and
    --strict fails on them; --env overrides the process environment."""
    r = runner.invoke(debug_app, ["lint", str(files / "good.json"), "--store", store_dir, "--json"],
                      env={"WORLD_SIZE": "16"})
    body = json.loads(r.output)
    assert r.exit_code == 1 and "DS001" in {v["rule"] for v in body["configs"][0]["violations"]}
    r = runner.invoke(debug_app, ["lint", str(files / "good.json"), "--store", store_dir, "--env", "WORLD_SIZE=8"],
                      env={"WORLD_SIZE": "16"})
    assert r.exit_code == 0, r.output
    r = runner.invoke(debug_app, ["lint", str(files / "good.json"), "--store", store_dir], env={"WORLD_SIZE": None})
    assert r.exit_code == 0 and "not checked: the world size is unknown" in r.output and "DS001" in r.output
    r = runner.invoke(debug_app, ["lint", str(files / "good.json"), "--store", store_dir, "--strict", "--sarif"],
                      env={"WORLD_SIZE": None})
    assert r.exit_code == 1
    [run] = json.loads(r.output)["runs"]
    opened = [res for res in run["results"] if res.get("kind") == "open"]
    assert any(res["ruleId"] == "DS001" and res["level"] == "error" for res in opened)
    jsonschema.validate(json.loads(r.output), SARIF_REQUIRED)
