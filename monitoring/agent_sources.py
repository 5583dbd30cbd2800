"""Where the agent reads its GPUs: NVML (`pynvml`, from nvidia-ml-py) when the driver and a GPU
are there, otherwise a simulated source with the same interface (seeded, so deterministic).
The simulated source's Xids come from the simulated cloud: `ControlPlaneFaults` fetches the
faults raised on this node's machine from the control plane over HTTP with the node's
credential, as a real driver would log them (local `faults` remain for offline runs).
Standard library plus pynvml only: the agent runs on the GPU node.

Both produce per-GPU dicts keyed by DCGM field names (memory in MiB) and Xid dicts
`{"gpu", "xid", "at"}`, and run the node-local commands the control plane hands out.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger("ebcloud.agent")

def _now() -> str:
    return datetime.now(UTC).isoformat()


class GpuSource(Protocol):
    name: str

    def versions(self) -> tuple[str, str]:
        """(driver version, workload CUDA version)."""

    def sample(self) -> list[dict]:
        """Per-GPU metrics, DCGM field names."""

    def xids(self) -> list[dict]:
        """Xid events seen since the last call."""

    def execute(self, command: dict) -> tuple[bool, str]:
        """Run a node-local command (reset_gpu, reboot, cordon_ack); (ok, message)."""


def workload_cuda(default: str) -> str:
    """The CUDA the node's workloads are built with: EBCLOUD_WORKLOAD_CUDA, else the toolkit in
    the system image (/usr/local/cuda/version.json), else what the driver supports."""
    if os.environ.get("EBCLOUD_WORKLOAD_CUDA"):
        return os.environ["EBCLOUD_WORKLOAD_CUDA"]
    try:
        version = json.loads(Path("/usr/local/cuda/version.json").read_text())["cuda"]["version"]
        return ".".join(version.split(".")[:2])
    except (OSError, KeyError, ValueError):
        return default


class ControlPlaneFaults:
    """The simulated cloud's GPU faults of this node, fetched from the control plane
    (`POST /api/agent/v1/simulated-faults/`, the node's credential): the simulated source's
    hardware. The server hands each fault out once. While the control plane is away the faults
    wait there; a 404 means it runs no simulated cloud, and the feed stops asking."""

    PATH = "/api/agent/v1/simulated-faults/"

    def __init__(self, *, server: str, credential, http: Any):
        self.url = server.rstrip("/") + self.PATH
        self.credential = credential  # a callable: the agent's current credential (None before joining)
        self.http = http
        self.enabled = True

    @classmethod
    def of(cls, agent) -> ControlPlaneFaults:
        return cls(server=agent.server, credential=lambda: agent.credential, http=agent.http)

    def __call__(self) -> list[dict]:
        credential = self.credential()
        if not self.enabled or not credential:
            return []
        try:
            response = self.http.post(self.url, json={}, headers={"Authorization": f"Bearer {credential}"})
        except Exception as exc:  # noqa: BLE001 - any transport error: the faults stay on the server
            logger.debug("simulated faults not fetched: %s", exc)
            return []
        if response.status_code == 404:
            logger.info("the control plane runs no simulated cloud: no simulated GPU faults to fetch")
            self.enabled = False
            return []
        if response.status_code >= 400:
            logger.warning("simulated faults: HTTP %s", response.status_code)
            return []
        return [{"gpu": f.get("gpu"), "xid": int(f["xid"]), "at": f.get("at") or _now()} for f in response.json().get("faults", [])]


# Xids that NVIDIA's Xid catalog ties to an uncorrectable (double-bit) ECC error: 48 "DBE (Double
# Bit Error) ECC Error", 94 contained and 95 uncontained memory errors, 140 "ECC unrecovered
# error". A real GPU counts each in its volatile DBE counter, which a GPU reset or a reboot
# (a driver reload) sets back to zero.
UNCORRECTABLE_ECC_XIDS = frozenset({48, 94, 95, 140})


class SimulatedSource:
    """A deterministic stand-in for a node's GPUs. Its Xids come from `fault_feed` (normally
    `ControlPlaneFaults`: faults injected into the simulated cloud) and, for offline runs and
    unit tests, from `faults`, which maps a sample number (1-based) to Xids to raise then, as
    [(gpu, xid), ...]; `inject_xid` raises one at the next sample.

    Its ECC counters agree with its Xids, as a real GPU's do (issue 21: a node page showed an
    Xid 48 next to 0 double-bit errors): each uncorrectable-ECC Xid adds one to its GPU's volatile
    DBE counter in the same report, and a reset of that GPU or a reboot clears it."""

    name = "simulated"

    def __init__(self, *, gpus: int | None = None, memory_mib: int = 81920, seed: int = 0, driver: str = "535.104.05",
                 cuda: str = "12.2", faults: dict[int, list[tuple[int, int]]] | None = None, fault_feed=None):
        self.pinned = gpus is not None  # else it takes the node's count once the agent learns it
        gpus = 8 if gpus is None else gpus
        self.gpus, self.memory_mib = gpus, memory_mib
        self.rng = random.Random(seed)
        self.driver, self.cuda = driver, cuda
        self.faults = dict(faults or {})
        self.fault_feed = fault_feed
        self.samples = 0
        self._pending: list[dict] = []
        self.executed: list[dict] = []
        self.dbe = [0] * gpus  # volatile double-bit ECC errors per GPU since the last reset

    def versions(self) -> tuple[str, str]:
        return self.driver, self.cuda

    def adopt_node_gpus(self, count: int) -> None:
        """Simulate the node's `count` GPUs, unless `gpus` was given."""
        if not self.pinned and count != self.gpus:
            self.gpus, self.dbe = count, [0] * count

    def inject_xid(self, gpu: int, xid: int) -> None:
        self._raise({"gpu": gpu, "xid": xid, "at": _now()})

    def _raise(self, fault: dict) -> None:
        self._pending.append(fault)
        gpu = fault.get("gpu")
        if fault.get("xid") in UNCORRECTABLE_ECC_XIDS and isinstance(gpu, int) and 0 <= gpu < self.gpus:
            self.dbe[gpu] += 1

    def _pull(self) -> None:
        """Take the faults the feed has now, so that the report that carries an Xid also
        carries the ECC count it implies."""
        if self.fault_feed is not None:
            for fault in self.fault_feed():
                self._raise(fault)

    def sample(self) -> list[dict]:
        self.samples += 1
        for gpu, xid in self.faults.pop(self.samples, []):
            self.inject_xid(gpu, xid)
        self._pull()
        out = []
        for i in range(self.gpus):
            util = self.rng.randint(20, 100)
            used = min(self.memory_mib, int(self.memory_mib * self.rng.uniform(0.2, 0.95)))
            out.append({
                "index": i, "uuid": f"GPU-sim-{i:02d}",
                "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": self.memory_mib - used,
                "DCGM_FI_DEV_FB_TOTAL": self.memory_mib, "DCGM_FI_DEV_GPU_UTIL": util,
                "DCGM_FI_DEV_GPU_TEMP": 40 + util // 3, "DCGM_FI_DEV_POWER_USAGE": round(80 + util * 3.2, 1),
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": self.dbe[i],
            })
        return out

    def xids(self) -> list[dict]:
        self._pull()
        out, self._pending = self._pending, []
        return out

    def execute(self, command: dict) -> tuple[bool, str]:
        self.executed.append(command)
        gpu = command.get("gpu")
        if command.get("action") == "reboot" or (command.get("action") == "reset_gpu" and gpu is None):
            self.dbe = [0] * self.gpus
        elif command.get("action") == "reset_gpu" and isinstance(gpu, int) and 0 <= gpu < self.gpus:
            self.dbe[gpu] = 0
        return True, f"simulated {command.get('action')}"


class NvmlSource:
    """The node's real GPUs through NVML. Xids come from NVML's critical-error event set."""

    name = "nvml"

    def __init__(self):
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.events = None
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for h in self.handles:
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, self.events)
        except pynvml.NVMLError:
            self.events = None  # not supported (e.g. some virtualised GPUs): no Xids from NVML

    def versions(self) -> tuple[str, str]:
        n = self.nvml
        driver = n.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        supported = n.nvmlSystemGetCudaDriverVersion_v2()
        return driver, workload_cuda(f"{supported // 1000}.{supported % 1000 // 10}")

    def _field(self, fn, *args, default=None):
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return default

    def sample(self) -> list[dict]:
        n = self.nvml
        out = []
        for i, h in enumerate(self.handles):
            mem = n.nvmlDeviceGetMemoryInfo(h)
            util = self._field(n.nvmlDeviceGetUtilizationRates, h)
            gpu = {
                "index": i,
                "uuid": self._field(n.nvmlDeviceGetUUID, h, default=""),
                "name": self._field(n.nvmlDeviceGetName, h, default=""),
                "DCGM_FI_DEV_FB_USED": mem.used // 2**20, "DCGM_FI_DEV_FB_FREE": mem.free // 2**20,
                "DCGM_FI_DEV_FB_TOTAL": mem.total // 2**20,
            }
            for key in ("uuid", "name"):
                if isinstance(gpu[key], bytes):
                    gpu[key] = gpu[key].decode()
            if util is not None:
                gpu["DCGM_FI_DEV_GPU_UTIL"] = util.gpu
                gpu["DCGM_FI_DEV_MEM_COPY_UTIL"] = util.memory
            temp = self._field(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
            if temp is not None:
                gpu["DCGM_FI_DEV_GPU_TEMP"] = temp
            power = self._field(n.nvmlDeviceGetPowerUsage, h)
            if power is not None:
                gpu["DCGM_FI_DEV_POWER_USAGE"] = power / 1000.0
            for key, err in (("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", n.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                             ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
                value = self._field(n.nvmlDeviceGetTotalEccErrors, h, err, n.NVML_VOLATILE_ECC)
                if value is not None:
                    gpu[key] = value
            out.append(gpu)
        return out

    def xids(self) -> list[dict]:
        if self.events is None:
            return []
        n, out = self.nvml, []
        while True:
            try:
                data = n.nvmlEventSetWait_v2(self.events, 0)
            except n.NVMLError:  # NVML_ERROR_TIMEOUT: nothing more
                return out
            out.append({"gpu": self._field(n.nvmlDeviceGetIndex, data.device), "xid": int(data.eventData), "at": _now()})

    def execute(self, command: dict) -> tuple[bool, str]:
        action = command.get("action")
        if action == "cordon_ack":
            return True, "cordon acknowledged"
        if action == "reset_gpu" and command.get("gpu") is not None:
            done = subprocess.run(["nvidia-smi", "-r", "-i", str(command["gpu"])], capture_output=True, text=True, timeout=120)
            return done.returncode == 0, (done.stdout + done.stderr).strip()[:400]
        return False, f"{action} is not run by this agent; the control plane's provider does it"


def source_open(*, simulate: bool, seed: int = 0, gpus: int | None = None) -> GpuSource:
    """NVML when it loads and finds a GPU, else the simulated source."""
    if not simulate:
        try:
            source = NvmlSource()
            if source.handles:
                return source
        except Exception:  # noqa: BLE001 - no library, no driver, no GPU: all mean "simulate"
            pass
    return SimulatedSource(seed=seed, gpus=gpus)
