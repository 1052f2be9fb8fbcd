"""Importers of formats without a shared fixture, on realistic files written here in their documented formats."""

# ruff: noqa: E501  (sample log lines are kept as long as the tools print them)

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from debugtune.engine.capture.importers import detect_format, import_path
from debugtune.engine.telemetry import read_run_json, read_telemetry


def _series(run, metric, entity="", rank=None):
    return read_telemetry(run).series(metric, entity, rank)


def test_tensorboard_hf_megatron_lightning_tags(tmp_path):
    tb = pytest.importorskip("torch.utils.tensorboard", reason="tensorboard not installed")
    logs = tmp_path / "tb"
    hf = tb.SummaryWriter(str(logs / "hf"))
    for step in range(1, 31):
        hf.add_scalar("train/loss", 4.0 / step, step)
        hf.add_scalar("train/learning_rate", 1e-4 * min(1, step / 10), step)
        hf.add_scalar("train/grad_norm", math.nan if step == 17 else 1.0 + step / 100, step)
    hf.add_scalar("eval/loss", 1.25, 30, new_style=True)  # TF2-style tensor summary
    hf.close()
    mega = tb.SummaryWriter(str(logs / "megatron"))
    for it in (100, 200):
        mega.add_scalar("lm loss", 7.5 - it / 100, it)
        mega.add_scalar("lm loss vs samples", 7.5 - it / 100, it * 512)  # another x-axis: not a step series
        mega.add_scalar("iteration-time", 1.5, it)  # seconds
        mega.add_scalar("loss-scale", 65536.0, it)
    mega.close()
    light = tb.SummaryWriter(str(logs / "lightning"))
    light.add_scalar("lr-AdamW", 3e-4, 500)
    light.add_scalar("val_loss", 2.0, 500)
    light.close()
    assert detect_format(logs) == "tensorboard"
    result = import_path(logs, tmp_path / "run")
    assert {"loss", "lr", "grad_norm", "eval_loss", "step_time_ms", "loss_scale"} <= set(result.metrics)
    steps, loss = _series(tmp_path / "run", "loss")
    hf_steps = steps <= 30
    np.testing.assert_allclose(loss[hf_steps], np.float32(4.0 / np.arange(1, 31)), rtol=1e-6)
    assert dict(zip(*_series(tmp_path / "run", "loss"), strict=True))[200] == pytest.approx(5.5)
    assert math.isnan(dict(zip(*_series(tmp_path / "run", "grad_norm"), strict=True))[17])  # NaN is data
    assert dict(zip(*_series(tmp_path / "run", "step_time_ms"), strict=True)) == {100: 1500.0, 200: 1500.0}
    assert dict(zip(*_series(tmp_path / "run", "eval_loss"), strict=True)) == {30: 1.25, 500: 2.0}
    assert 102400 not in steps  # the "vs samples" tag was not imported as a step


MEGATRON_LOG = """\
using world size: 8, data-parallel size: 2, tensor-model-parallel size: 2, pipeline-model-parallel size: 2
 [2024-05-01 10:00:00] iteration       10/     100 | consumed samples:         5120 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.500000E-05 | global batch size:   512 | lm loss: 9.876543E+00 | loss scale: 65536.0 | grad norm: 12.345 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-05-01 10:00:12] iteration       20/     100 | consumed samples:        10240 | elapsed time per iteration (ms): 1201.0 | learning rate: 3.000000E-05 | global batch size:   512 | lm loss: 8.500000E+00 | load_balancing_loss: 1.020000E+00 | loss scale: 32768.0 | grad norm: nan | number of skipped iterations:   1 | number of nan iterations:   1 |
--------------------------------------------------------------------------------------------
 validation loss at iteration 20 | lm loss value: 8.123400E+00 | lm loss PPL: 3.37E+03 |
--------------------------------------------------------------------------------------------
"""


def test_megatron_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(MEGATRON_LOG)
    assert detect_format(log) == "megatron-log"
    import_path(log, tmp_path / "run")
    run = tmp_path / "run"
    assert dict(zip(*_series(run, "loss"), strict=True)) == {10: 9.876543, 20: 8.5}
    assert dict(zip(*_series(run, "lr"), strict=True)) == {10: 1.5e-5, 20: 3e-5}
    assert dict(zip(*_series(run, "step_time_ms"), strict=True)) == {10: 1234.5, 20: 1201.0}
    assert dict(zip(*_series(run, "aux_loss"), strict=True)) == {20: 1.02}
    assert dict(zip(*_series(run, "eval_loss"), strict=True)) == {20: 8.1234}
    assert dict(zip(*_series(run, "nan_iterations"), strict=True)) == {10: 0.0, 20: 1.0}
    assert math.isnan(dict(zip(*_series(run, "grad_norm"), strict=True))[20])
    assert read_run_json(run)["framework"] == "megatron"


def test_jsonl_and_hf_trainer_state(tmp_path):
    log = tmp_path / "metrics.jsonl"
    records = [{"step": s, "loss": 2.0 - s / 10, "learning_rate": 1e-3, "rank": s % 2} for s in range(6)]
    records.append({"step": 6, "eval_loss": 1.5, "loss": float("nan")})
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert detect_format(log) == "jsonl"
    result = import_path(log, tmp_path / "run")
    assert result.ranks == [0, 1]
    assert dict(zip(*_series(tmp_path / "run", "loss", rank=1), strict=True)) == {1: 1.9, 3: 1.7, 5: 1.5}
    assert math.isnan(dict(zip(*_series(tmp_path / "run", "loss", rank=0), strict=True))[6])
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 20, "log_history": [
        {"epoch": 0.5, "grad_norm": 3.2, "learning_rate": 5e-5, "loss": 2.1, "step": 10},
        {"epoch": 1.0, "eval_loss": 1.9, "eval_runtime": 3.1, "step": 20}]}))
    import_path(state, tmp_path / "hf")
    assert dict(zip(*_series(tmp_path / "hf", "grad_norm"), strict=True)) == {10: 3.2}
    assert dict(zip(*_series(tmp_path / "hf", "eval_loss"), strict=True)) == {20: 1.9}


def test_csv_metric_log_lightning_style(tmp_path):
    log = tmp_path / "metrics.csv"
    log.write_text("epoch,step,train_loss_step,val_loss,lr-AdamW\n0,49,0.91,,0.001\n0,99,0.72,,0.001\n0,99,,0.80,\n")
    assert detect_format(log) == "csv"
    import_path(log, tmp_path / "run")
    assert dict(zip(*_series(tmp_path / "run", "loss"), strict=True)) == {49: 0.91, 99: 0.72}
    assert dict(zip(*_series(tmp_path / "run", "eval_loss"), strict=True)) == {99: 0.80}
    assert dict(zip(*_series(tmp_path / "run", "lr"), strict=True)) == {49: 0.001, 99: 0.001}


def test_msprobe_monitor_csv(tmp_path):
    rank_dir = tmp_path / "monitor_output" / "Dec03_10-00-00-rank1-abc123"
    rank_dir.mkdir(parents=True)
    (rank_dir / "grad_reduced_0-1.csv").write_text(
        "vpp_stage,name,step,min,max,norm,mean,zeros,nans\n"
        "0,1.post_attention_norm.weight,0,-0.5,0.25,3.0,0.01,0.1,0\n"
        "0,1.mlp.dense_h_to_4h.weight,0,-2.0,1.0,4.0,0.0,0.0,0\n"
        "0,1.post_attention_norm.weight,1,-0.1,0.2,nan,nan,0.2,12\n"
        "0,1.mlp.dense_h_to_4h.weight,1,-1.0,1.0,2.0,0.0,0.0,0\n")
    (rank_dir / "grad_unreduced_0-1.csv").write_text(
        "vpp_stage,name,step,min,max,norm,mean,zeros,nans\n0,1.mlp.dense_h_to_4h.weight,0,-9,9,99.0,0,0,0\n")
    (rank_dir / "actv_0-1.csv").write_text(
        "vpp_stage,name,step,micro_step,min,max,norm,mean,zeros,nans\n"
        "0,1.mlp.output,0,0,-1,1,10.0,0,0.5,0\n0,1.mlp.output,0,1,-1,1,20.0,0,0.3,0\n")
    (rank_dir / "exp_avg_sq_0-1.csv").write_text("vpp_stage,name,step,norm\n0,1.mlp.dense_h_to_4h.weight,0,1e-6\n")
    assert detect_format(tmp_path / "monitor_output") == "msprobe"
    result = import_path(tmp_path / "monitor_output", tmp_path / "run")
    assert result.ranks == [1]
    tel = read_telemetry(tmp_path / "run")
    assert dict(zip(*tel.series("grad_norm", "1.mlp.dense_h_to_4h.weight"), strict=True)) == {0: 4.0, 1: 2.0}
    assert tel.series("grad_norm", "")[1][0] == pytest.approx(5.0)  # sqrt(3² + 4²), reduced grads preferred
    assert tel.series("grad_absmax", "1.mlp.dense_h_to_4h.weight")[1][0] == 2.0
    assert tel.series("grad_nan", "1.post_attention_norm.weight")[1].tolist() == [0.0, 12.0]
    assert tel.series("act_norm", "1.mlp.output")[1].tolist() == [15.0]  # micro steps averaged
    assert tel.series("exp_avg_sq_norm", "1.mlp.dense_h_to_4h.weight")[1].tolist() == [1e-6]


NVIDIA_SMI = """\
timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, clocks.sm [MHz], clocks_throttle_reasons.active
2024/05/01 10:00:00.100, 0, NVIDIA H100 80GB HBM3, 98 %, 40 %, 71234 MiB, 81559 MiB, 650.12 W, 71, 1980 MHz, 0x0000000000000000
2024/05/01 10:00:00.102, 1, NVIDIA H100 80GB HBM3, 97 %, 41 %, 71000 MiB, 81559 MiB, 640.00 W, 70, 1980 MHz, 0x0000000000000001
2024/05/01 10:00:01.100, 0, NVIDIA H100 80GB HBM3, 99 %, 42 %, 71240 MiB, 81559 MiB, 699.50 W, 86, 1410 MHz, 0x0000000000000040
2024/05/01 10:00:01.102, 1, NVIDIA H100 80GB HBM3, [N/A], 41 %, 71001 MiB, 81559 MiB, 641.00 W, 70, 1980 MHz, 0x0000000000000000
"""


def test_nvidia_smi_csv(tmp_path):
    log = tmp_path / "gpu.csv"
    log.write_text(NVIDIA_SMI)
    assert detect_format(log) == "nvidia-smi"
    import_path(log, tmp_path / "run")
    tel = read_telemetry(tmp_path / "run")
    steps, keys, util = tel.pivot("util_pct")
    assert keys == ["device:gpu0", "device:gpu1"]
    np.testing.assert_array_equal(util, [[98.0, 97.0], [99.0, np.nan]])
    assert tel.series("mem_used_bytes", "device:gpu0")[1].tolist() == [71234 * 2**20, 71240 * 2**20]
    assert tel.series("throttle", "device:gpu0")[1].tolist() == [0.0, 1.0]  # 0x40 = HW thermal slowdown
    assert tel.series("throttle", "device:gpu1")[1].tolist() == [0.0, 0.0]  # 0x1 = idle, not throttling
    assert tel.series("sample_time_s", "device:gpu0")[1] == pytest.approx([0.0, 1.0])


NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc2                 Version: 23.0.rc2                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 101.8       43                0    / 0             |
| 0                         | 0000:C1:00.0  | {u0}           0    / 0          3318 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 95.2        41                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          {m1} / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 12345         | python                   | 3000                    |
+===========================+===============+====================================================+
"""


def test_npu_smi_info_and_watch(tmp_path):
    log = tmp_path / "npu.log"
    log.write_text(NPU_SMI.format(u0=35, m1=3300) + NPU_SMI.format(u0=88, m1=60000))
    assert detect_format(log) == "npu-smi"
    import_path(log, tmp_path / "run")
    tel = read_telemetry(tmp_path / "run")
    steps, keys, util = tel.pivot("util_pct")
    assert keys == ["device:npu0", "device:npu1"] and util.tolist() == [[35.0, 0.0], [88.0, 0.0]]
    assert tel.series("mem_used_bytes", "device:npu1")[1].tolist() == [3300 * 2**20, 60000 * 2**20]
    assert tel.series("power_w", "device:npu0")[1].tolist() == [101.8, 101.8]
    watch = tmp_path / "watch.log"
    watch.write_text("NpuID(Idx)  ChipId(Idx) Pwr(W)      Temp(C)     AI Core(%)  AI Cpu(%)   Ctrl Cpu(%) Memory(%)"
                     "   Memory BW(%)\n0           0           72.3        38          10          0           3      "
                     "     6           1\n0           0           180.5       45          95          0           3    "
                     "       60          40\n")
    import_path(watch, tmp_path / "watch")
    tel = read_telemetry(tmp_path / "watch")
    assert tel.series("util_pct", "device:npu0")[1].tolist() == [10.0, 95.0]
    assert tel.series("mem_util_pct", "device:npu0")[1].tolist() == [1.0, 40.0]
