"""The privacy scrubber: every kind of secret goes, ordinary training vocabulary stays, tokens are salted."""

from __future__ import annotations

import json

import pytest

from debugtune.engine.contribute.scrub import Scrubber, identifying_values, looks_random

SECRETS = {
    "path": "/home/alice/zeus-project/runs/0412",
    "windows path": "C:\\Users\\alice\\zeus\\train.py",
    "home path": "~/zeus/ckpt",
    "host": "gpu-node-17.acme.internal",
    "ipv4": "10.23.4.117",
    "ipv6": "fe80::1ff:fe23:4567:890a",
    "ipv6 short": "2001:db8::8a2e:370:7334",
    "email": "alice.smith@acme-corp.com",
    "aws key": "AKIAIOSFODNN7EXAMPLE",
    "aws secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "hf token": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456",
    "github token": "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ",
    "random key": "xK9mQ2vL8pR4tW7yZ1aB3cD5eF6gH0jN",
    "password": "hunter2-zeus!",
    "url credential": "svc_user:s3cr3tpass",
}
CONTEXTS = {
    "aws secret": "aws_secret_access_key={}", "password": "password: {}", "bearer": "Authorization: Bearer {}",
    "url credential": "https://{}@mirror.example.org/simple",
}
PRIVATE_KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
               "-----END OPENSSH PRIVATE KEY-----")
KEPT = [
    "ExpertImbalance@blocks.0.moe.router/expert:0", "router_grad_norm", "tokens_per_expert", "token_share",
    "blocks.0.moe.experts.1.fc1", "torch 2.13.0+cpu", "numpy 2.4.6", "the root cause is the gate bias",
    "step 12/150 at 12:30:45", "https://github.com/pytorch/torchtitan/issues/1246", "maxvio 7.0, cv 2.646",
    "link:0-1", "rank:3", "device:npu0", "a/b relative path", "StepTimeRegression@run",
]


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_of_secret_is_removed(kind: str) -> None:
    secret = SECRETS[kind]
    text = f"before {CONTEXTS.get(kind, '{}').format(secret)} after"
    out = Scrubber().text(text, "test")
    assert secret not in out
    assert out.startswith("before ") and out.endswith(" after")


def test_private_key_block_is_dropped_and_reported() -> None:
    s = Scrubber()
    out = s.text(f"key:\n{PRIVATE_KEY}\nend", "config")
    assert "PRIVATE KEY" not in out.replace("[private key removed]", "") and "b3BlbnNz" not in out
    assert {"kind": "private-key", "where": "config", "action": "removed", "count": 1} in s.report()["items"]


def test_known_names_are_hashed_at_word_boundaries() -> None:
    s = Scrubber({"name": ["llama-zeus-70b", "project-zeus"], "user": ["alice"], "host": ["node17"]})
    out = s.text("alice trained llama-zeus-70b for project-zeus on node17; malice and node170 stay", "t")
    for gone in ("alice trained", "llama-zeus-70b", "project-zeus", "node17;"):
        assert gone not in out
    assert "malice" in out and "node170" in out


def test_generic_account_names_do_not_garble_text() -> None:
    out = Scrubber({"user": ["root"], "host": ["localhost"]}).text("the root cause on localhost", "t")
    assert out == "the root cause on localhost"


@pytest.mark.parametrize("text", KEPT)
def test_training_vocabulary_is_left_alone(text: str) -> None:
    assert Scrubber({"user": ["alice"]}).text(text, "t") == text


def test_tokens_are_salted_per_scrubber_and_stable_within_one() -> None:
    a, b = Scrubber(), Scrubber()
    t1, t2 = a.text("ip 10.0.0.1", "x"), a.text("again 10.0.0.1", "y")
    assert t1.split()[-1] == t2.split()[-1]
    assert a.text("ip 10.0.0.1", "x") != b.text("ip 10.0.0.1", "x")
    assert Scrubber(salt=b"k" * 32).token("ip", "v") == Scrubber(salt=b"k" * 32).token("ip", "v")


def test_report_names_kinds_and_places_never_values() -> None:
    s = Scrubber({"user": ["alice"]})
    s.walk({"cmd": "ssh alice@10.1.2.3", "alice_key": "x"}, "params")
    report = json.dumps(s.report())
    assert "alice" not in report and "10.1.2.3" not in report
    assert s.report()["salt_stored"] is False
    assert {i["kind"] for i in s.report()["items"]} >= {"ip", "user"}


def test_walk_scrubs_keys_and_nested_values() -> None:
    out = Scrubber().walk({"/home/bob/data": ["contact bob@x.org", 3, {"k": "10.9.8.7"}]}, "w")
    text = json.dumps(out)
    assert "/home/bob" not in text and "bob@x.org" not in text and "10.9.8.7" not in text and "3" in text


def test_disabled_scrubber_changes_nothing() -> None:
    s = Scrubber({"user": ["alice"]}, enabled=False)
    assert s.text("alice at 10.1.2.3", "t") == "alice at 10.1.2.3"
    assert s.report()["privacy_safe"] is False


def test_identifying_values_found_at_any_depth() -> None:
    meta = {"run_id": "r1", "model": "zeus-70b", "config": {"wandb_project": "acme-zeus", "Hostname": "node-3"},
            "tags": ["secret-tag"], "steps": {"count": 10}}
    found = identifying_values(meta)
    assert found["name"] >= {"zeus-70b", "acme-zeus", "secret-tag"} and found["host"] == {"node-3"}


def test_looks_random_separates_keys_from_identifiers() -> None:
    assert looks_random("xK9mQ2vL8pR4tW7yZ1aB3cD5eF6gH0jN")
    assert looks_random("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
    assert not looks_random("blocks_0_moe_experts_1_fc1_weight_grad")
    assert not looks_random("StepTimeRegressionAtRunLevel")
