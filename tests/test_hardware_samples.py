"""Hardware detectors judge from samples, not only steps; every npu-smi / nvidia-smi field reaches a detector or a
"not judged" note; the power detector (PowerCapped) on nvidia-smi logs; the probe's sampling cadence."""

# ruff: noqa: E501  (sample log lines are kept as the tools print them)

from __future__ import annotations

import pytest
from diagnose_helpers import knowledge_store, thresholds

from debugtune.engine.capture.importers import import_path
from debugtune.engine.diagnose import DiagnoseError, diagnose_run
from debugtune.engine.telemetry import TelemetryWriter, read_telemetry, write_run_json

GIB = float(1 << 30)


def _probe_like_run(run_dir, steps: int, per_step: int, used_frac: float):
    """What the live probe writes: its sampler drains several samples per training step, all at that step."""
    write_run_json(run_dir, {"run_id": "hw", "world_size": 1})
    with TelemetryWriter(run_dir, "hw", rank=0) as w:
        for s in range(steps):
            w.add(s, "convergence", "loss", "", 2.0 - 0.01 * s)
            for _ in range(per_step):
                w.add(s, "hardware", "mem_used_bytes", "device:gpu0", used_frac * 80 * GIB)
                w.add(s, "hardware", "mem_total_bytes", "device:gpu0", 80 * GIB)
                w.add(s, "hardware", "util_pct", "device:gpu0", 97.0)
    return run_dir


def test_a_short_probed_run_gets_a_hardware_diagnosis(tmp_path):
    d = diagnose_run(_probe_like_run(tmp_path / "run", steps=6, per_step=5, used_frac=0.97), thresholds(),
                     ["hardware"])
    (f,) = [f for f in d.findings if f.symptom == "MemoryPressure"]
    assert f.entity == "device:gpu0" and f.evidence["used_fraction"] == pytest.approx(0.97)
    assert f.onset_step == 0 and f.end_step == 5
    assert {"MemoryPressure", "LowAcceleratorUtilization"} <= d.judged  # 30 samples over 6 steps are enough


def test_too_few_samples_is_not_judged_with_the_count(tmp_path):
    with pytest.raises(DiagnoseError) as err:
        diagnose_run(_probe_like_run(tmp_path / "run", steps=3, per_step=2, used_frac=0.97), thresholds(),
                     ["hardware"])
    assert "LowAcceleratorUtilization not judged: 6 samples of util_pct recorded per device, at least 20 are needed" in str(err.value)
    assert "MemoryPressure not judged: 6 samples of mem_used_bytes recorded per device" in str(err.value)


NPU_WATCH_HEADER = "NpuID(Idx)  ChipId(Idx) Pwr(W)      Temp(C)     AI Core(%)  AI Cpu(%)   Ctrl Cpu(%) Memory(%)   Memory BW(%)\n"


def test_npu_smi_memory_percent_and_every_field_reaches_a_detector_or_a_note(tmp_path):
    rows = "".join(f"0           0           {180 + i % 3}.5       {45 + i % 2}          95          0           3           97          40\n"
                   for i in range(25))
    (tmp_path / "watch.log").write_text(NPU_WATCH_HEADER + rows)
    import_path(tmp_path / "watch.log", tmp_path / "run")
    d = diagnose_run(tmp_path / "run", thresholds(), ["hardware"])
    (f,) = [f for f in d.findings if f.symptom == "MemoryPressure"]
    assert f.entity == "device:npu0" and f.evidence["used_fraction"] == pytest.approx(0.97)
    assert f.evidence["from"] == "mem_used_pct"
    assert "LowAcceleratorUtilization" in d.judged  # AI Core(%)
    # power and temperature alone cannot decide their symptoms: said, with what is missing
    assert "ThermalThrottling not judged: temp_c alone does not show throttling: throttle (clock-event reasons) or clock_mhz needed" in d.notes
    assert "PowerCapped not judged: power_w recorded without power_limit_w or throttle_power: the device's power cap is unknown" in d.notes


def _nvidia_smi(n: int, power, limit: float, reason) -> str:
    head = ("timestamp, index, power.draw [W], enforced.power.limit [W], clocks.sm [MHz], temperature.gpu, "
            "clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown, clocks_event_reasons.sw_thermal_slowdown\n")
    lines = [f"2024/05/01 10:00:{i:02d}.100, 0, {power(i):.2f} W, {limit:.2f} W, 1980 MHz, 70, {reason(i)}, Not Active, [N/A]"
             for i in range(n)]
    return head + "\n".join(lines) + "\n"


def test_nvidia_smi_power_reasons_give_power_capped(tmp_path):
    (tmp_path / "gpu.csv").write_text(_nvidia_smi(30, lambda i: 690.0, 700.0,
                                                  lambda i: "Active" if i >= 10 else "Not Active"))
    import_path(tmp_path / "gpu.csv", tmp_path / "run")
    tel = read_telemetry(tmp_path / "run")
    assert tel.series("throttle_power", "device:gpu0")[1].tolist() == [0.0] * 10 + [1.0] * 20
    assert tel.series("throttle", "device:gpu0")[1].tolist() == [0.0] * 10 + [1.0] * 20  # any reason counts
    assert tel.series("power_limit_w", "device:gpu0")[1][0] == 700.0
    d = diagnose_run(tmp_path / "run", thresholds(), ["hardware"])
    (f,) = [f for f in d.findings if f.symptom == "PowerCapped"]
    assert f.detector == "hardware.power.flag" and f.onset_step == 10
    assert f.evidence["capped_fraction"] == pytest.approx(20 / 30)
    assert f.evidence["power_limit_w"] == 700.0 and f.evidence["power_w_median"] == 690.0


def test_power_at_the_limit_without_reasons_and_a_healthy_board(tmp_path):
    (tmp_path / "cap.csv").write_text(_nvidia_smi(30, lambda i: 420.0 if i < 8 else 697.0, 700.0,
                                                  lambda i: "[N/A]"))
    import_path(tmp_path / "cap.csv", tmp_path / "cap")
    d = diagnose_run(tmp_path / "cap", thresholds(), ["hardware"])
    (f,) = [f for f in d.findings if f.symptom == "PowerCapped"]
    assert f.detector == "hardware.power.level" and f.onset_step == 8
    assert f.evidence["cap_fraction"] == pytest.approx(697 / 700)
    (tmp_path / "ok.csv").write_text(_nvidia_smi(30, lambda i: 450.0, 700.0, lambda i: "Not Active"))
    import_path(tmp_path / "ok.csv", tmp_path / "ok")
    d = diagnose_run(tmp_path / "ok", thresholds(), ["hardware"])
    assert "PowerCapped" in d.judged and not [f for f in d.findings if f.symptom == "PowerCapped"]


def test_power_capped_is_knowledge_with_a_source_and_a_cause():
    rows = knowledge_store().query("""SELECT ?src ?cause ?th WHERE { kb:PowerCapped a dt:Symptom ; dct:source ?src .
        ?l dt:from ?cause ; dt:to kb:PowerCapped . ?t dt:thresholdKey ?th ; dt:appliesTo kb:PowerCapped }""").dicts()
    assert rows and {r["cause"].rsplit("/", 1)[-1] for r in rows} == {"ThermalOrPowerLimit"}
    assert {r["th"] for r in rows} == {"hardware.power.cap_frac"}


def test_probe_samples_hardware_at_the_knowledge_base_cadence(tmp_path):
    torch = pytest.importorskip("torch")
    import time

    import debugtune

    th = thresholds()
    interval = th["hardware.sample_interval_s"]
    assert 10.0 / interval >= 2 * th.as_int("hardware.min_samples")  # a 10 s run has the samples its detectors need
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with debugtune.attach(model, opt, tmp_path / "run", detectors=False) as probe:
        deadline = time.monotonic() + 1.6
        while time.monotonic() < deadline:
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
            time.sleep(0.02)
    assert probe.report()["sampler"]["interval_s"] == interval
    rows = read_telemetry(tmp_path / "run", metrics="cpu_util_pct").table.num_rows
    assert rows >= 4  # ~1.6 s / 0.25 s, with slack for a loaded machine
