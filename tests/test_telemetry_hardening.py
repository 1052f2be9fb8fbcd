"""Issue 18, probe and run directories: telemetry survives SIGKILL (flushed by time), a failing disk is dropped
with a count instead of retried, an unwritable run directory degrades to memory, and --replace only replaces a
run directory (stale staging folders are cleaned)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from debugtune.engine.capture.importers import import_path
from debugtune.engine.telemetry import TelemetryError, TelemetryWriter, read_telemetry

torch = pytest.importorskip("torch")

TRAINING = textwrap.dedent("""
    import sys, time, torch, debugtune
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    probe = debugtune.attach(model, opt, sys.argv[1], hardware=False, thresholds={}, detectors=False)
    x, y = torch.randn(256, 32), torch.randint(0, 4, (256,))
    t0 = time.monotonic()
    for step in range(1_000_000):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        probe.log(loss=loss.item())
        print(step, round(time.monotonic() - t0, 3), flush=True)
        time.sleep(0.002)
""")


@pytest.mark.slow
def test_a_probed_training_killed_with_sigkill_keeps_all_but_the_last_seconds(tmp_path):
    """main flushed only every 65,536 rows, so a run killed mid-way kept no telemetry at all."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", TRAINING, str(run)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    seen: list[tuple[int, float]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        step, at = line.split()
        seen.append((int(step), float(at)))
        if float(at) >= 9.0:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = seen[-1][1]
    must_have = max(s for s, at in seen if at <= killed_at - 6.0)  # the documented bound is 5 s (+ one step)
    steps, _ = read_telemetry(run).series("loss")
    assert len(steps) and steps.max() >= must_have


def _broken(writer: TelemetryWriter) -> None:
    """Make the writer's directory unusable for anyone, root included: a file where the folder was."""
    for p in writer.directory.iterdir():
        p.unlink()
    writer.directory.rmdir()
    writer.directory.write_text("not a directory")


def test_a_failing_sink_backs_off_and_counts_what_it_drops(tmp_path):
    w = TelemetryWriter(tmp_path, "r", flush_rows=100, on_error="drop")
    _broken(w)
    t0 = time.perf_counter()
    for step in range(20_000):
        w.add(step, "convergence", "loss", "", 1.0)
        assert w.pending_rows <= 100
    assert time.perf_counter() - t0 < 10
    assert 1 <= w.write_errors <= 3  # not one retry per flush: backing off
    assert w.dropped_rows + w.pending_rows == 20_000 and w.stats()["last_error"]
    with pytest.raises(TelemetryError):  # the importers keep failing loudly
        strict = TelemetryWriter(tmp_path / "strict", "r", flush_rows=10)
        _broken(strict)
        for step in range(20):
            strict.add(step, "convergence", "loss", "", 1.0)


def test_attach_on_an_unwritable_directory_degrades_to_memory(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, so nothing can be created below it")
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = __import__("debugtune").attach(model, opt, blocker / "run", hardware=False, thresholds={},
                                               detectors=False, flush_rows=10)
    assert any("in memory" in str(c.message) for c in caught)
    for _ in range(5):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        probe.log(loss=1.0)
    probe.close()
    assert probe.writer.degraded and probe.writer.recent().num_rows > 0


def _jsonl(tmp_path: Path) -> Path:
    log = tmp_path / "m.jsonl"
    log.write_text("".join(f'{{"step": {s}, "loss": {1 / (s + 1)}}}\n' for s in range(5)))
    return log


def test_replace_only_replaces_a_run_directory(tmp_path):
    """main's --replace deleted any directory it was pointed at."""
    log = _jsonl(tmp_path)
    mydata = tmp_path / "mydata"
    mydata.mkdir()
    (mydata / "precious.txt").write_text("keep me")
    with pytest.raises(TelemetryError, match="not a run directory"):
        import_path(log, mydata, replace=True)
    assert (mydata / "precious.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    import_path(log, empty)
    assert (empty / "run.json").is_file()
    import_path(log, empty, replace=True)  # a run directory is replaced
    assert (empty / "run.json").is_file()


def test_stale_staging_folders_are_cleaned(tmp_path):
    """A killed import leaves .<name>.<pid>.<random>.staging; the next import of that name removes it."""
    log = _jsonl(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".run-x.{dead}.abc123.staging"
    (stale / "telemetry").mkdir(parents=True)
    old = tmp_path / ".run-x.legacy7.staging"  # written before staging names held a process id
    old.mkdir()
    os.utime(old, (time.time() - 3 * 86400,) * 2)
    busy = tmp_path / f".run-x.{os.getppid()}.live.staging"  # a live process's import is left alone
    busy.mkdir()
    import_path(log, tmp_path / "run-x")
    assert not stale.exists() and not old.exists() and busy.exists()
