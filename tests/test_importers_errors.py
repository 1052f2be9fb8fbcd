"""Malformed inputs: the error names the file and line/field, and no run directory (or staging debris) is left."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from debugtune.engine.capture.importers import ImportFormatError, import_path
from debugtune.engine.telemetry import TelemetryError
from debugtune.kg.errors import DebugtuneError


def _fails(path, out, match, **kwargs):
    with pytest.raises(ImportFormatError, match=match) as err:
        import_path(path, out, **kwargs)
    assert isinstance(err.value, DebugtuneError)
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]  # no staging left
    return err.value


def test_truncated_gzip_trace(tmp_path, fixtures_dir):
    raw = (fixtures_dir / "pytorch-profiler" / "nccl_allreduce_rank0.json.gz").read_bytes()
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(raw[: len(raw) // 2])
    err = _fails(bad, tmp_path / "run", r"rank0\.json\.gz:\d+: truncated")
    assert err.line and err.line > 1


def test_malformed_event_in_plain_trace(tmp_path, fixtures_dir):
    text = gzip.decompress((fixtures_dir / "pytorch-profiler" / "sampled_rank-1.json.gz").read_bytes()).decode()
    pretty = json.dumps(json.loads(text), indent=1)  # one field per line, so the line number is precise
    lines = pretty.split("\n")
    target = next(i for i, line in enumerate(lines) if '"ts":' in line and i > len(lines) // 2)
    lines[target] = lines[target].replace('"ts":', '"ts" ')  # a missing colon
    bad = tmp_path / "trace.json"
    bad.write_text("\n".join(lines))
    err = _fails(bad, tmp_path / "run", r"trace\.json:\d+: ")
    assert abs(err.line - (target + 1)) <= 1


def test_truncated_plain_trace(tmp_path, fixtures_dir):
    text = gzip.decompress((fixtures_dir / "pytorch-profiler" / "sampled_rank-0.json.gz").read_bytes()).decode()
    bad = tmp_path / "trace.json"
    bad.write_text(text[: int(len(text) * 0.7)])
    _fails(bad, tmp_path / "run", r"trace\.json:1: .*(truncated|not closed)")


def test_ascend_csv_missing_column(tmp_path, fixtures_dir):
    src = fixtures_dir / "ascend-profiler" / "level1" / "rank0_ascend_pt"
    dst = tmp_path / "prof" / "rank0_ascend_pt"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("trace_view.json", "operator_details.csv"))
    csv_path = dst / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    header, row = csv_path.read_text().splitlines()[:2]
    drop = header.split(",").index("Free")
    csv_path.write_text("\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != drop)
                                  for line in (header, row)) + "\n")
    err = _fails(tmp_path / "prof", tmp_path / "run", r"step_trace_time\.csv:1 \(field 'Free'\): required column")
    assert err.field == "Free"


def test_ascend_bad_number_and_bad_json(tmp_path, fixtures_dir):
    src = fixtures_dir / "ascend-profiler" / "level1" / "rank1_ascend_pt"
    dst = tmp_path / "prof" / "rank1_ascend_pt"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("trace_view.json", "operator_details.csv"))
    out = dst / "ASCEND_PROFILER_OUTPUT"
    kernels = (out / "kernel_details.csv").read_text().splitlines()
    cells = kernels[5].split(",")
    cells[9] = "12.x"  # Duration(us)
    kernels[5] = ",".join(cells)
    (out / "kernel_details.csv").write_text("\n".join(kernels) + "\n")
    _fails(tmp_path / "prof", tmp_path / "run", r"kernel_details\.csv:6 \(field 'Duration\(us\)'\): not a number")
    shutil.copy(src / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", out / "kernel_details.csv")
    text = (out / "communication.json").read_text()
    (out / "communication.json").write_text(text[: len(text) // 2])
    _fails(tmp_path / "prof", tmp_path / "run", r"communication\.json:1: malformed JSON")


def test_megatron_bad_line(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        " iteration       10/     100 | elapsed time per iteration (ms): 1234.5 | lm loss: 9.876543E+00 |\n"
        " iteration       20/     100 | elapsed time per iteration (ms): 1201.0 | lm loss: 8.5E+0x |\n")
    err = _fails(log, tmp_path / "run", r"train\.log:2 \(field 'lm loss'\): not a number")
    assert err.line == 2


def test_jsonl_bad_line(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": \n{"step": 3, "loss": 1.0}\n')
    _fails(log, tmp_path / "run", r"m\.jsonl:2: not a JSON object")


def test_truncated_tensorboard_file(tmp_path):
    tb = pytest.importorskip("torch.utils.tensorboard", reason="tensorboard not installed")
    writer = tb.SummaryWriter(str(tmp_path / "tb"))
    for step in range(50):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
    event = next((tmp_path / "tb").glob("*tfevents*"))
    event.write_bytes(event.read_bytes()[:-7])
    _fails(tmp_path / "tb", tmp_path / "run", r"tfevents.*\(field 'byte \d+'\): truncated record")


def test_nvidia_smi_garbage_value(tmp_path):
    log = tmp_path / "gpu.csv"
    log.write_text("timestamp, index, utilization.gpu [%], memory.used [MiB]\n"
                   "2024/05/01 10:00:00.100, 0, 98 %, 71234 MiB\n2024/05/01 10:00:01.100, 0, lots %, 1 MiB\n")
    _fails(log, tmp_path / "run", r"gpu\.csv:3 \(field 'utilization\.gpu \[%\]'\): not a number")


def test_unknown_format_and_existing_run_dir(tmp_path):
    odd = tmp_path / "notes.txt"
    odd.write_text("nothing to see\n")
    _fails(odd, tmp_path / "run", "format not recognised")
    good = tmp_path / "m.jsonl"
    good.write_text('{"step": 1, "loss": 2.0}\n')
    import_path(good, tmp_path / "run")
    with pytest.raises(TelemetryError, match="already exists"):
        import_path(good, tmp_path / "run")
    import_path(good, tmp_path / "run", replace=True)
