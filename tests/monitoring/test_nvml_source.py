"""The NVML GPU source (issue 6 §3, §9) against a stand-in `pynvml` module with NVML's call
shapes: memory in bytes -> MiB under DCGM field names, utilisation, temperature, power in mW ->
W, ECC counters, driver and CUDA versions, Xids from the critical-error event set, and a GPU
reset through nvidia-smi. A real GPU run is still to be recorded (docs/benchmarks.md): no
session of this project has had a GPU lent so far."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from monitoring.agent_sources import NvmlSource

GIB = 2**30


class NVMLError(Exception):
    pass


def fake_pynvml(*, xids=(), events_supported=True, temperature=True) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    pending = list(xids)
    module.NVMLError = NVMLError
    module.NVML_TEMPERATURE_GPU = 0
    module.NVML_MEMORY_ERROR_TYPE_CORRECTED, module.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    module.NVML_VOLATILE_ECC = 0
    module.nvmlEventTypeXidCriticalError = 8
    module.nvmlInit = lambda: None
    module.nvmlDeviceGetCount = lambda: 2
    module.nvmlDeviceGetHandleByIndex = lambda i: f"handle-{i}"
    module.nvmlDeviceGetIndex = lambda handle: int(handle.rsplit("-", 1)[1])
    module.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    module.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    module.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=20 * GIB, free=60 * GIB, total=80 * GIB)
    module.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=87, memory=41)
    module.nvmlDeviceGetUUID = lambda h: f"GPU-{h}".encode()
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H200"

    def temperature_of(h, sensor):
        if not temperature:
            raise NVMLError("not supported")
        return 61

    module.nvmlDeviceGetTemperature = temperature_of
    module.nvmlDeviceGetPowerUsage = lambda h: 412_345
    module.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: 3 if kind == 0 else 0

    def event_set_create():
        if not events_supported:
            raise NVMLError("not supported")
        return "events"

    module.nvmlEventSetCreate = event_set_create
    module.nvmlDeviceRegisterEvents = lambda h, kind, events: None

    def wait(events, timeout_ms):
        if not pending:
            raise NVMLError("timeout")
        gpu, xid = pending.pop(0)
        return SimpleNamespace(device=f"handle-{gpu}", eventData=xid)

    module.nvmlEventSetWait_v2 = wait
    return module


@pytest.fixture
def nvml(monkeypatch):
    def install(**kwargs):
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(**kwargs))
        monkeypatch.delenv("EBCLOUD_WORKLOAD_CUDA", raising=False)
        return NvmlSource()

    return install


def test_samples_use_dcgm_field_names_and_units(nvml):
    gpus = nvml().sample()
    assert [g["index"] for g in gpus] == [0, 1]
    first = gpus[0]
    assert (first["uuid"], first["name"]) == ("GPU-handle-0", "NVIDIA H200")
    assert (first["DCGM_FI_DEV_FB_USED"], first["DCGM_FI_DEV_FB_FREE"], first["DCGM_FI_DEV_FB_TOTAL"]) == (20480, 61440, 81920)
    assert (first["DCGM_FI_DEV_GPU_UTIL"], first["DCGM_FI_DEV_MEM_COPY_UTIL"], first["DCGM_FI_DEV_GPU_TEMP"]) == (87, 41, 61)
    assert first["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(412.345)
    assert (first["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"], first["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]) == (3, 0)


def test_a_field_the_gpu_does_not_support_is_left_out_not_an_error(nvml):
    assert "DCGM_FI_DEV_GPU_TEMP" not in nvml(temperature=False).sample()[0]


def test_versions_are_the_driver_and_the_cuda_it_supports(nvml, monkeypatch):
    monkeypatch.setattr("monitoring.agent_sources.Path.read_text", lambda self: (_ for _ in ()).throw(OSError()))
    assert nvml().versions() == ("550.54.15", "12.4")


def test_xids_come_from_the_critical_error_event_set(nvml):
    source = nvml(xids=[(1, 79), (0, 48)])
    assert [(x["gpu"], x["xid"]) for x in source.xids()] == [(1, 79), (0, 48)]
    assert source.xids() == []
    assert nvml(events_supported=False, xids=[(0, 79)]).xids() == []


def test_a_gpu_reset_runs_nvidia_smi_and_reports_its_outcome(nvml, monkeypatch):
    calls = []
    monkeypatch.setattr("monitoring.agent_sources.subprocess.run",
                        lambda args, **kw: calls.append(args) or SimpleNamespace(returncode=0, stdout="GPU 00000000:1B:00.0 was reset.", stderr=""))
    source = nvml()
    assert source.execute({"action": "reset_gpu", "gpu": 1}) == (True, "GPU 00000000:1B:00.0 was reset.")
    assert calls == [["nvidia-smi", "-r", "-i", "1"]]
    assert source.execute({"action": "cordon_ack"}) == (True, "cordon acknowledged")
    ok, message = source.execute({"action": "replace"})
    assert not ok and "provider" in message
