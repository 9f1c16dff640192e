"""Live GPU readings through NVML (nvidia-ml-py), degrading to a plain note without a driver.

Every function returns data or a `NoNvml` saying why it could not read: recovery then reports
"not checked: no NVIDIA driver" instead of failing or, worse, assuming the GPU is free.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class NoNvml:
    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    pids: tuple[int, ...] = field(default_factory=tuple)   # compute + graphics processes on it

    @property
    def used_share(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def free_share(self) -> float:
        return self.free_bytes / self.total_bytes if self.total_bytes else 0.0


NVML_TIMEOUT_S = 10.0
_STUCK: list[threading.Thread] = []      # an NVML call that never came back (a wedged GPU or driver)


def read_gpus(timeout_s: float | None = None) -> list[GpuReading] | NoNvml:
    """Every GPU's memory and processes, or why NVML could not be read.

    Bounded: NVML calls can block for minutes on a GPU that fell off the bus (Xid 79) — exactly
    when recovery runs — and a signal cannot interrupt a call inside the driver. So the reading
    runs in a daemon thread; if it does not answer in time the GPU is reported as not checked."""
    return _bounded(_reading, timeout_s)


def read_inventory(timeout_s: float | None = None) -> list[GpuInventory] | NoNvml:
    """`read_gpus` and what an incident bundle keeps besides: bus id, driver, utilisation, ECC
    and row-remapping counters, and each process with its own memory. Bounded the same way."""
    return _bounded(_inventory, timeout_s)


def _bounded(per_device: Callable[[Any, int], Any], timeout_s: float | None) -> Any:
    limit = NVML_TIMEOUT_S if timeout_s is None else timeout_s
    if _STUCK and _STUCK[0].is_alive():
        return NoNvml(f"NVML has not answered for over {limit:g} s (a wedged GPU or driver?): GPU memory not checked")
    _STUCK.clear()
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(_read_now(per_device)), name="triage-nvml", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        _STUCK.append(thread)
        return NoNvml(f"NVML did not answer within {limit:g} s (a wedged GPU or driver?): GPU memory not checked")
    return box[0] if box else NoNvml("NVML failed: no answer: GPU memory not checked")


def _read_now(per_device: Callable[[Any, int], Any]) -> list[Any] | NoNvml:
    try:
        import pynvml
    except ImportError:
        return NoNvml("nvidia-ml-py is not installed: GPU memory not checked")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NoNvml(f"no NVIDIA driver ({_nvml_error(exc)}): GPU memory not checked")
    try:
        return [per_device(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as exc:
        return NoNvml(f"NVML failed: {_nvml_error(exc)}: GPU memory not checked")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _reading(pynvml: Any, index: int) -> GpuReading:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    pids: list[int] = []
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            pids += [int(p.pid) for p in getattr(pynvml, getter)(handle)]
        except Exception:
            pass
    name = pynvml.nvmlDeviceGetName(handle)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    return GpuReading(index, name.decode() if isinstance(name, bytes) else str(name),
                      uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                      int(mem.total), int(mem.used), int(mem.free), tuple(sorted(set(pids))))


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None        # None: the driver does not account it (MIG, some vGPU setups)
    kind: str                     # compute | graphics


@dataclass(frozen=True)
class GpuInventory:
    reading: GpuReading
    pci_bus_id: str | None
    driver_version: str | None
    utilization_pct: float | None
    # Counters the driver exposes on this card (data-centre GPUs); absent ones are left out:
    # ecc_{corrected,uncorrected}_{volatile,aggregate}, retired_pages_pending,
    # remapped_rows_{correctable,uncorrectable,pending,failed}.
    counters: dict[str, int] = field(default_factory=dict)
    processes: tuple[GpuProcess, ...] = ()


def _inventory(pynvml: Any, index: int) -> GpuInventory:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    procs: dict[int, GpuProcess] = {}
    for getter, kind in (("nvmlDeviceGetComputeRunningProcesses", "compute"),
                         ("nvmlDeviceGetGraphicsRunningProcesses", "graphics")):
        for p in _optional(lambda g=getter: getattr(pynvml, g)(handle)) or []:
            used = getattr(p, "usedGpuMemory", None)
            procs.setdefault(int(p.pid), GpuProcess(int(p.pid), int(used) if isinstance(used, int) else None, kind))
    pci = _optional(lambda: pynvml.nvmlDeviceGetPciInfo(handle))
    util = _optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
    return GpuInventory(_reading(pynvml, index), _text(getattr(pci, "busId", None)),
                        _text(_optional(pynvml.nvmlSystemGetDriverVersion)),
                        float(util.gpu) if util is not None else None, _counters(pynvml, handle),
                        tuple(sorted(procs.values(), key=lambda p: p.pid)))


def _counters(pynvml: Any, handle: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for error_type, name in ((1, "uncorrected"), (0, "corrected")):          # NVML_MEMORY_ERROR_TYPE_*
        for counter_type, span in ((0, "volatile"), (1, "aggregate")):        # NVML_VOLATILE_ECC / AGGREGATE
            value = _optional(lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type))
            if isinstance(value, int):
                out[f"ecc_{name}_{span}"] = value
    pending = _optional(lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    if pending is not None:
        out["retired_pages_pending"] = int(pending)
    rows = _optional(lambda: pynvml.nvmlDeviceGetRemappedRows(handle))     # Ampere and later
    if isinstance(rows, (tuple, list)) and len(rows) >= 4:
        for key, value in zip(("correctable", "uncorrectable", "pending", "failed"), rows):
            out[f"remapped_rows_{key}"] = int(value)
    return out


def _optional(call: Callable[[], Any]) -> Any:
    """A query a card or driver may not support (NVMLError_NotSupported, an old binding): None."""
    try:
        return call()
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_error(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:120]


def describe(reading: GpuReading) -> str:
    gib = 1024 ** 3
    return (f"GPU {reading.index} {reading.name}: {reading.used_bytes / gib:.1f} of {reading.total_bytes / gib:.1f} GiB "
            f"used ({reading.used_share:.0%}), processes {list(reading.pids) or 'none'}")
