"""`contribute`: planted secrets in every field that can carry one are gone from the package; the case is
built from the diagnosis (top hypothesis, best experiment); clear errors; the CLI round trip."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import tune_app
from debugtune.engine.contribute import ContributeError, ContributeOptions, contribute
from debugtune.engine.telemetry.runmeta import write_run_json
from debugtune.kg import open_store
from debugtune.kg.assertions import add_experiments, replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.package_archive import PackageError
from debugtune.kg.records import Experiment, Finding, Hypothesis
from tests.test_packages import FINDINGS, HYPOTHESES, diagnosed_store, fresh_store, read_zip

RUN_ID = "acme-zeus-70b-run7"
KEY_BLOCK = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n"
             "-----END OPENSSH PRIVATE KEY-----")
PLANTED = {
    "model": "zeus-70b-instruct", "project": "project-zeus", "user": "alicew", "host": "gpu-node-17",
    "domain": "acme.internal", "ipv4": "10.23.4.117", "ipv6": "fe80::1ff:fe23:4567:890a",
    "email": "alice.smith@acme-corp.com", "aws key": "AKIAIOSFODNN7EXAMPLE", "aws secret": "wJalrXUtnFEMI",
    "hf token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456", "github token": "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
    "random key": "xK9mQ2vL8pR4tW7yZ1aB3cD5eF6gH0jN", "redacted name": "codename-hydra",
    "private key": "b3BlbnNzaC1rZXkt", "key header": "BEGIN OPENSSH PRIVATE KEY", "home": "/home/alicew",
    "run id": RUN_ID, "run dir": "alice-zeus-runs", "run dir name": "zeus-run-0412", "bearer": "eyJhbGciOiJIUzI1NiJ9",
}


def _planted_run(tmp_path: Path):
    run_dir = tmp_path / "alice-zeus-runs" / "zeus-run-0412"
    run_dir.mkdir(parents=True)
    write_run_json(run_dir, {
        "run_id": RUN_ID, "model": "zeus-70b-instruct", "project": "project-zeus", "user": "alicew",
        "hostname": "gpu-node-17.acme.internal", "framework": "pytorch", "framework_version": "2.13.0+cpu",
        "world_size": 1, "command": "torchrun --master_addr 10.23.4.117 /home/alicew/zeus/train.py",
        "environment": {"python": "3.11.7", "platform": {"system": "Linux", "machine": "x86_64",
                                                          "release": "gpu-node-17-5.4"},
                        "packages": {"torch": "2.13.0+cpu", "project-zeus": "1.0.0",
                                     "numpy": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456"},
                        "cwd": "/home/alicew/zeus", "hostname": "gpu-node-17.acme.internal"}})
    findings = [
        Finding("ExpertImbalance@zeus", "ExpertImbalance", "convergence",
                "zeus-70b-instruct.layers.0.moe/expert:3", 0, 99, 1.0,
                {"maxvio": 7.0, "grad@gpu-node-17.acme.internal": 1.0, "AKIAIOSFODNN7EXAMPLE": 2.0}, "moe.imbalance"),
        Finding("DeadExperts@zeus", "DeadExperts", "convergence", "/home/alicew/zeus/codename-hydra/router", 0, 99,
                0.9, {"dead_from_10.23.4.117": 6.0}, "moe.dead"),
    ]
    explanation = (f"run {RUN_ID} by alicew on gpu-node-17.acme.internal (10.23.4.117, fe80::1ff:fe23:4567:890a) "
                   "for project-zeus: key xK9mQ2vL8pR4tW7yZ1aB3cD5eF6gH0jN, mail alice.smith@acme-corp.com\n"
                   + KEY_BLOCK)
    hypotheses = [Hypothesis("GateInitBias", 0.7, ("GateInitBias", "ExpertImbalance"),
                             ("ExpertImbalance@zeus",), explanation, 1)]
    experiments = [Experiment(
        "zeus-tune-001", "RouterInitRescale",
        {"init_std": 0.004, "trial_command": "python /home/alicew/zeus/train.py --hf-token "
         "hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456 aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY "
         "-H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl'",
         "zeus-70b-instruct_lr": 0.001},
        {"max_vio": 0.3, "loss@10.23.4.117": 2.0}, 0.5, 7, "ok", replay_ref="/home/alicew/ckpt/zeus.ckpt")]
    st = open_store(None)
    load_knowledge(st)
    replace_diagnosis(st, RUN_ID, {"run_dir": str(run_dir), "steps": 100}, findings, (), hypotheses)
    add_experiments(st, RUN_ID, experiments)
    return st, run_dir


def _contents(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [("(zip bytes)", path.read_bytes())] + [(n, zf.read(n)) for n in zf.namelist()]


def test_planted_secrets_are_gone_from_every_byte_of_the_package(tmp_path: Path) -> None:
    st, run_dir = _planted_run(tmp_path)
    result = contribute(st, RUN_ID, tmp_path / "case.zip", options=ContributeOptions(
        attribution="Alice W <alice.smith@acme-corp.com> ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
        redact=("codename-hydra",),
        description="ran `torchrun --master_addr 10.23.4.117` for codename-hydra on gpu-node-17.acme.internal"))
    leaks = [(kind, name) for kind, secret in {**PLANTED, "full run dir": str(run_dir)}.items()
             for name, data in _contents(result.path) if secret.lower().encode() in data.lower()]
    assert leaks == []
    files = read_zip(result.path)
    report = json.loads(files["privacy-report.json"])
    assert report["salt_stored"] is False and report["privacy_safe"] is True
    kinds = set(report["by_kind"])
    assert kinds >= {"run-id", "path", "user", "host", "name", "ip", "email", "key", "token", "secret", "private-key"}
    where = {i["where"] for i in report["items"]}
    assert {"case.ttl: finding entity", "case.ttl: evidence key", "case.ttl: hypothesis explanation",
            "case.ttl: run id", "ro-crate-metadata.json: attribution"} <= where
    assert any(w.startswith("case.ttl: experiment parameters") for w in where)
    assert any(w.startswith("environment.json") for w in where)
    case_ttl = files["case.ttl"].decode()
    assert "kb:GateInitBias" in case_ttl and "kb:ExpertImbalance" in case_ttl and "0.004" in case_ttl
    env = json.loads(files["environment.json"])
    assert env["python"] == "3.11.7" and env["packages"]["torch"] == "2.13.0+cpu"
    assert "cwd" not in env and "release" not in json.dumps(env)
    assert json.loads(files["ro-crate-metadata.json"])["@graph"][2]["name"].startswith("Alice W <email-")


def test_without_privacy_the_same_fields_do_carry_the_secrets(tmp_path: Path) -> None:
    st, _ = _planted_run(tmp_path)
    result = contribute(st, RUN_ID, tmp_path / "raw.zip", options=ContributeOptions(privacy_safe=False))
    body = b"".join(data for _, data in _contents(result.path)[1:])
    for secret in (RUN_ID, "alice.smith@acme-corp.com", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456", "10.23.4.117"):
        assert secret.encode() in body
    assert b"/home/alicew/ckpt" not in body and b"alice-zeus-runs" not in body  # never included
    assert json.loads(read_zip(result.path)["privacy-report.json"])["privacy_safe"] is False


def test_case_comes_from_the_top_hypothesis_and_the_best_experiment(tmp_path: Path) -> None:
    st = diagnosed_store("run-e")
    add_experiments(st, "run-e", [
        Experiment("t1", "RouterInitRescale", {"init_std": 0.05}, {"max_vio": 0.9}, 0.2, 1),
        Experiment("t2", "EnableBiasBalancing", {"bias_update_rate": 0.001}, {"max_vio": 0.2}, 0.2, 2),
        Experiment("t3", "RouterInitRescale", {"init_std": 0.004}, {"max_vio": 0.1}, 0.2, 3, "failed")])
    result = contribute(st, "run-e", tmp_path / "e.zip")
    assert (result.cause, result.remedy) == ("GateInitBias", "EnableBiasBalancing")
    assert any("best experiment (t2)" in n for n in result.notes)
    case_ttl = read_zip(result.path)["case.ttl"].decode()
    assert case_ttl.count("dt:Experiment") == 3 and "dt:StatusFailed" in case_ttl
    chosen = contribute(st, "run-e", tmp_path / "f.zip", options=ContributeOptions(objective="max_vio:max"))
    assert chosen.remedy == "RouterInitRescale"


def test_clear_errors(tmp_path: Path) -> None:
    st = fresh_store()
    with pytest.raises(ContributeError, match="diagnose it first"):
        contribute(st, "never-seen", tmp_path / "x.zip")
    st = diagnosed_store("run-f")
    with pytest.raises(ContributeError, match="pass --remedy"):
        contribute(st, "run-f", tmp_path / "x.zip")
    with pytest.raises(ContributeError, match="did you mean GateInitBias"):
        contribute(st, "run-f", tmp_path / "x.zip", options=ContributeOptions(cause="GateInitBais", remedy="x"))
    with pytest.raises(ContributeError, match="unknown remedy"):
        contribute(st, "run-f", tmp_path / "x.zip", options=ContributeOptions(remedy="NoSuchRemedy"))
    with pytest.raises(ContributeError, match="no sandbox for scenario None"):
        contribute(st, "run-f", tmp_path / "x.zip", options=ContributeOptions(remedy="RouterInitRescale", sandbox={}))
    with pytest.raises(ContributeError, match="'fault' is missing"):
        contribute(st, "run-f", tmp_path / "x.zip", options=ContributeOptions(
            remedy="RouterInitRescale", sandbox={"scenario": "moe_lm", "remedy": {"gate_bias": 0.0}}))
    with pytest.raises(PackageError, match="neither an SPDX licence id"):
        contribute(st, "run-f", tmp_path / "x.zip", options=ContributeOptions(remedy="RouterInitRescale",
                                                                              license="my licence!"))
    assert not (tmp_path / "x.zip").exists()


def test_cli_contribute_import_feedback(tmp_path: Path) -> None:
    source, target = tmp_path / "source-store", tmp_path / "target-store"
    st = open_store(source)
    load_knowledge(st)
    replace_diagnosis(st, "run-g", {"steps": 100}, FINDINGS, (), HYPOTHESES)
    st.close()
    del st
    runner = CliRunner()
    out = tmp_path / "g.zip"
    made = runner.invoke(tune_app, ["contribute", "run-g", "--out", str(out), "--store", str(source),
                                    "--remedy", "RouterInitRescale", "--attribution", "Team B", "--json"])
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["remedy"] == "RouterInitRescale" and out.is_file()
    first = runner.invoke(tune_app, ["import", str(out), "--store", str(target), "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output)["already_imported"] is False
    again = runner.invoke(tune_app, ["import", str(out), "--store", str(target)])
    assert again.exit_code == 0 and "already imported" in again.output
    fed = runner.invoke(tune_app, ["feedback", str(out), "--outcome", "success", "--store", str(target), "--json"])
    assert fed.exit_code == 0, fed.output
    assert json.loads(fed.output)["remedies"][0]["remedy"] == "RouterInitRescale"
    bad = runner.invoke(tune_app, ["import", str(tmp_path / "missing.zip"), "--store", str(target)])
    assert bad.exit_code != 0 and "no such file" in str(bad.exception)


AUDIT = {  # the audit's secrets (issue 18), each planted in every field below
    "query token": "tok3n-Secret-value", "hf key in a query": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234",
    "user in a URL path": "carolq", "private host": "git.acme-private.example",
    "private package": "acme-secret-tokenizer", "private path segment": "zeus-notes-2026",
}
AUDIT_URL = (f"https://{AUDIT['private host']}/{AUDIT['user in a URL path']}/{AUDIT['private path segment']}"
             f"?token={AUDIT['query token']}&api_key={AUDIT['hf key in a query']}#top")
PUBLIC_URL = f"https://github.com/{AUDIT['user in a URL path']}/zeus/issues/7?token={AUDIT['query token']}"


def test_every_audit_secret_in_every_field_is_gone(tmp_path: Path) -> None:
    """URLs in the source, title, description, attribution, run.json, findings, hypotheses and experiments; a
    private package name in the environment: none of it is in any byte of the package, the report included
    (main kept the source URL verbatim and named the package in environment.json and the report's "where")."""
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    everywhere = f"{AUDIT_URL} {PUBLIC_URL} {AUDIT['private package']}"
    write_run_json(run_dir, {
        "run_id": "r1", "user": AUDIT["user in a URL path"], "framework": "pytorch", "world_size": 1,
        "model": AUDIT["private package"], "command": everywhere, "notes": {everywhere: everywhere},
        "environment": {"python": "3.11.7", "platform": {"system": "Linux", "machine": "x86_64"},
                        "packages": {"torch": "2.13.0+cpu", AUDIT["private package"]: "1.2.3",
                                     "numpy": "2.4.6"}}})
    findings = [Finding("ExpertImbalance@r", "ExpertImbalance", "convergence", f"router {AUDIT_URL}", 0, 99, 1.0,
                        {f"maxvio {AUDIT_URL}": 7.0}, "moe.imbalance")]
    hypotheses = [Hypothesis("GateInitBias", 0.7, ("GateInitBias", "ExpertImbalance"), ("ExpertImbalance@r",),
                             f"see {everywhere}", 1)]
    experiments = [Experiment(f"tune {AUDIT_URL}", "RouterInitRescale",
                              {"init_std": 0.004, "url": everywhere, everywhere: 1.0},
                              {"max_vio": 0.3, f"loss@{AUDIT['private host']}": 2.0}, 0.5, 7, "ok",
                              replay_ref=AUDIT_URL)]
    st = open_store(None)
    load_knowledge(st)
    replace_diagnosis(st, "r1", {"run_dir": str(run_dir), "steps": 100}, findings, (), hypotheses)
    add_experiments(st, "r1", experiments)
    result = contribute(st, "r1", tmp_path / "case.zip", options=ContributeOptions(
        source=AUDIT_URL, title=f"case {everywhere}", description=f"notes at {everywhere}",
        attribution=f"Carol {AUDIT_URL}"))  # (the attribution keeps a known user name on purpose)
    leaks = [(kind, name) for kind, secret in AUDIT.items()
             for name, data in _contents(result.path) if secret.lower().encode() in data.lower()]
    assert leaks == []
    files = read_zip(result.path)
    env = json.loads(files["environment.json"])
    assert env["packages"]["torch"] == "2.13.0+cpu" and env["packages"]["numpy"] == "2.4.6"
    assert any(k.startswith("package-") and v == "1.2.3" for k, v in env["packages"].items())
    case_ttl = files["case.ttl"].decode()
    assert "dct:source <https://host-" in case_ttl and "github.com/user-" in case_ttl
    report = json.loads(files["privacy-report.json"])
    assert {"query", "host", "package"} <= set(report["by_kind"])
