"""Several commands on one on-disk store at once: `serve` (read-only), a diagnosis (the one writer) and three
lints (read-only) run as real processes together and all succeed; a second writer waits a bounded time and
then names the process that holds the store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from debugtune.kg import open_store
from debugtune.kg.errors import StoreLockedError
from debugtune.kg.knowledge import load_knowledge
from tests.test_diagnose_cli import moe_run

CLI = str(Path(sys.executable).with_name("cann-debug"))
SCRIPT = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 12 "
          "--seq-length 1024 --max-position-embeddings 1024 --tensor-model-parallel-size 8 --micro-batch-size 1 "
          "--global-batch-size 16 --lr 1e-4 --bf16\n")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _store(path: Path) -> str:
    st = open_store(path)
    load_knowledge(st)
    st.close()
    return str(path)


def test_serve_a_diagnosis_and_three_lints_at_once(tmp_path):
    store = _store(tmp_path / "store")
    (tmp_path / "bad.sh").write_text(SCRIPT)
    run_dir = moe_run(tmp_path / "moe")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "DEBUGTUNE_LOCK_WAIT_S": "60"}
    port = _port()
    serve = subprocess.Popen([CLI, "serve", "--store", store, "--port", str(port)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert r.status == 200
                break
            except OSError:
                assert serve.poll() is None, serve.communicate()[1]
                assert time.monotonic() < deadline, "serve did not come up"
                time.sleep(0.5)
        diagnosis = subprocess.Popen([CLI, "diagnose", str(run_dir), "--store", store, "--json"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lints = [subprocess.Popen([CLI, "lint", str(tmp_path / "bad.sh"), "--store", store, "--json"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
        outs = [p.communicate(timeout=300) for p in lints]
        for p, (out, err) in zip(lints, outs, strict=True):
            assert p.returncode == 1, err  # MEG016: 12 heads over TP 8 — found, not a lock error
            assert "MEG016" in {v["rule"] for v in json.loads(out)["configs"][0]["violations"]}
        out, err = diagnosis.communicate(timeout=300)
        assert diagnosis.returncode == 0, err
        assert json.loads(out)["run"] == "cli-moe"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
        assert serve.poll() is None
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    again = subprocess.run([CLI, "root-cause", "cli-moe", "--store", store, "--json"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and json.loads(again.stdout)["hypotheses"], again.stderr


def test_a_second_writer_waits_then_names_the_holder(tmp_path):
    holder = open_store(tmp_path / "s")
    try:
        t0 = time.monotonic()
        try:
            open_store(tmp_path / "s", wait_s=1.0)
            raise AssertionError("the second writer opened a held store")
        except StoreLockedError as err:
            message = str(err)
        assert time.monotonic() - t0 >= 1.0
        assert f"pid {os.getpid()}" in message and "after waiting 1 s" in message
    finally:
        holder.close()
