"""The telemetry store: writer/reader round trip, filters, atomic parts, plain-pyarrow readability, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from debugtune.engine.telemetry import (
    SCHEMA,
    Telemetry,
    TelemetryError,
    TelemetryWriter,
    environment_snapshot,
    read_run_json,
    read_telemetry,
    update_run_json,
    write_run_json,
)
from debugtune.kg.errors import DebugtuneError


def _fill(run_dir, ranks=(0, 1), steps=50, flush_rows=65536):
    """Rows with values that encode (rank, step, layer) so a read-back can be checked exactly."""
    for r in ranks:
        with TelemetryWriter(run_dir, "run-a", rank=r, flush_rows=flush_rows) as w:
            for s in range(steps):
                w.add(s, "convergence", "loss", "", 10.0 - s * 0.1 + r)
                w.add_many(s, "gradient", "grad_norm", [f"layers.{i}" for i in range(4)],
                           np.array([r * 1000 + s + i / 10 for i in range(4)]))
            w.add_columns(np.arange(steps), "communication", "step_time_ms", "", np.arange(steps) * 2.0 + r)
    write_run_json(run_dir, {"run_id": "run-a", "framework": "pytorch", "world_size": len(ranks),
                             "parallel": {"tp": 1, "pp": 1, "dp": len(ranks), "ep": 1}})


def test_round_trip_exact(tmp_path):
    _fill(tmp_path)
    tel = read_telemetry(tmp_path)
    assert isinstance(tel, Telemetry)
    assert len(tel) == 2 * (50 * 5 + 50)
    assert tel.table.schema.equals(SCHEMA)
    assert tel.metrics() == ["grad_norm", "loss", "step_time_ms"]
    assert tel.ranks() == [0, 1]
    assert tel.meta["world_size"] == 2 and tel.run_id == "run-a"
    steps, values = tel.series("loss", rank=1)
    assert steps.tolist() == list(range(50))
    np.testing.assert_array_equal(values, [10.0 - s * 0.1 + 1 for s in range(50)])
    steps, keys, grid = tel.pivot("grad_norm", by="entity", rank=1)
    assert keys == [f"layers.{i}" for i in range(4)]
    assert grid.shape == (50, 4) and grid[7, 3] == 1000 + 7 + 0.3
    steps, keys, grid = tel.pivot("step_time_ms", by="rank")
    assert keys == [0, 1] and grid[10].tolist() == [20.0, 21.0]


def test_filters_push_down_and_match_in_memory_filter(tmp_path):
    _fill(tmp_path, flush_rows=100)  # many small parts
    everything = read_telemetry(tmp_path)
    picked = read_telemetry(tmp_path, metrics=["grad_norm"], entities="layers.2", steps=range(10, 20), ranks=1)
    rows = picked.table.to_pylist()
    assert len(rows) == 10
    assert {(r["rank"], r["metric"], r["entity"]) for r in rows} == {(1, "grad_norm", "layers.2")}
    assert sorted(r["step"] for r in rows) == list(range(10, 20))
    assert picked.table.num_rows == everything.filter(metrics="grad_norm", entities=["layers.2"], steps=range(10, 20),
                                                       ranks=[1]).table.num_rows
    dims = read_telemetry(tmp_path, dimensions="communication", columns=["rank", "step", "value"])
    assert dims.table.column_names == ["rank", "step", "value"] and dims.table.num_rows == 100
    assert len(read_telemetry(tmp_path, steps=[3, 4], metrics="loss")) == 4


def test_metric_filter_skips_row_groups(tmp_path):
    with TelemetryWriter(tmp_path, "big", rank=0) as w:
        for metric in ("a_metric", "m_metric", "z_metric"):
            w.add_columns(np.arange(20000), "gradient", metric, "", np.ones(20000))
    dataset = ds.dataset(tmp_path / "telemetry", format="parquet", schema=SCHEMA,
                         partitioning=ds.partitioning(pa.schema([("rank", pa.int32())]), flavor="hive"))
    fragment = next(iter(dataset.get_fragments()))
    kept = fragment.subset(filter=ds.field("metric") == "m_metric")
    assert len(kept.row_groups) < fragment.num_row_groups / 2


def test_readable_by_plain_pyarrow(tmp_path):
    _fill(tmp_path)
    table = ds.dataset(tmp_path / "telemetry", partitioning="hive").to_table()
    assert table.num_rows == 600
    assert set(table.column("rank").to_pylist()) == {0, 1}
    one = pq.read_table(next((tmp_path / "telemetry" / "rank=0").glob("part-*.parquet")))
    assert set(one.column_names) == set(SCHEMA.names)


def test_nan_and_inf_are_data(tmp_path):
    with TelemetryWriter(tmp_path, "nan", rank=0) as w:
        w.add_many(0, "gradient", "grad_norm", ["a", "b", "c"], [math.nan, math.inf, -math.inf])
    _, _, grid = read_telemetry(tmp_path).pivot("grad_norm")
    assert np.isnan(grid[0, 0]) and grid[0, 1] == math.inf and grid[0, 2] == -math.inf


def test_crash_mid_write_leaves_only_complete_parts(tmp_path, monkeypatch):
    w = TelemetryWriter(tmp_path, "crash", rank=0, flush_rows=10)
    for s in range(10):
        w.add(s, "convergence", "loss", "", float(s))  # first part written by the automatic flush
    real_write = pq.write_table

    def dying_write(table, where, **kwargs):
        real_write(table.slice(0, 3), where, **kwargs)  # half a file reaches the disk, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", dying_write)
    for s in range(10, 19):
        w.add(s, "convergence", "loss", "", float(s))
    with pytest.raises(KeyboardInterrupt):
        w.add(19, "convergence", "loss", "", 19.0)
    files = sorted(p.name for p in (tmp_path / "telemetry" / "rank=0").iterdir())
    assert files == ["part-000000.parquet"]
    tel = read_telemetry(tmp_path)
    assert tel.series("loss")[0].tolist() == list(range(10))
    monkeypatch.setattr(pq, "write_table", real_write)
    w.close()  # the buffer survived the failed flush and is written now
    assert read_telemetry(tmp_path).series("loss")[0].tolist() == list(range(20))


def test_writer_appends_new_parts_after_existing(tmp_path):
    _fill(tmp_path, ranks=(0,))
    _fill(tmp_path, ranks=(0,))
    names = sorted(p.name for p in (tmp_path / "telemetry" / "rank=0").iterdir())
    assert names == ["part-000000.parquet", "part-000001.parquet"]
    assert len(read_telemetry(tmp_path)) == 600


def test_bad_input_names_the_file(tmp_path):
    _fill(tmp_path, ranks=(0,))
    part = next((tmp_path / "telemetry" / "rank=0").glob("part-*.parquet"))
    (part.parent / "part-000009.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TelemetryError, match="part-000009.parquet") as err:
        read_telemetry(tmp_path)
    assert isinstance(err.value, DebugtuneError)
    (part.parent / "part-000009.parquet").unlink()
    wrong = pa.table({"run": ["x"], "rank": pa.array([0], pa.int32()), "step": [1], "dimension": ["gradient"],
                      "metric": ["loss"], "entity": [""], "value": ["1.5"]})
    pq.write_table(wrong, part.parent / "part-000010.parquet")
    with pytest.raises(TelemetryError, match=r"part-000010.parquet.*'value'"):
        read_telemetry(tmp_path)


def test_run_json_errors_and_update(tmp_path):
    with pytest.raises(TelemetryError, match="run.json"):
        read_run_json(tmp_path)
    with pytest.raises(TelemetryError, match="not a debugtune run directory"):
        read_telemetry(tmp_path)
    (tmp_path / "run.json").write_text('{"run_id": "x",\n  "steps": }')
    with pytest.raises(TelemetryError, match=r"run.json:2:"):
        read_run_json(tmp_path)
    write_run_json(tmp_path, {"run_id": "x", "loss0": math.nan})
    assert json.loads((tmp_path / "run.json").read_text())["loss0"] == "nan"
    meta = update_run_json(tmp_path, probe_errors=3)
    assert meta["run_id"] == "x" and read_run_json(tmp_path)["probe_errors"] == 3
    assert len(read_telemetry(tmp_path)) == 0  # run.json without telemetry: an empty run
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_writer_rejects_bad_rows(tmp_path):
    with TelemetryWriter(tmp_path, "bad", rank=0) as w:
        with pytest.raises(TelemetryError, match="unknown dimension"):
            w.add(0, "vibes", "loss", "", 1.0)
        with pytest.raises(TelemetryError, match="3 steps for 2 values"):
            w.add_columns([1, 2, 3], "gradient", "x", "", [1.0, 2.0])
    with pytest.raises(TelemetryError, match="closed"):
        w.add(0, "gradient", "x", "", 1.0)


def test_environment_snapshot_has_versions_not_paths():
    env = environment_snapshot()
    assert env["packages"]["numpy"] == np.__version__
    assert env["device_kind"] in {"cpu", "cuda", "npu"} and env["cpu_count"] >= 1
    text = json.dumps(env)
    assert "/" not in text.replace("+", "")  # no file paths
