"""GPU readings for a bundle: NVML first, nvidia-smi when NVML cannot be read.

NVML readings are written twice: as CSV in the layout of `nvidia-smi --query-gpu` /
`--query-compute-apps` (so the classifier, the timeline and the postmortem read them with the
nvidia-smi reader they already have) and as gpu/nvml.json with what CSV cannot hold: each
process's command line (masked) and start time, and the ECC and row-remapping counters. CSV
times are written as nvidia-smi writes them, in the host's zone without a zone suffix, so they
are read in the zone incident.yaml names.
"""
from __future__ import annotations

import json
from datetime import datetime, tzinfo

from ...redact import redact_argv, redact_text
from ...timestamps import rfc3339
from ..command import run as run_command
from ..nvml import GpuInventory, NoNvml, read_inventory
from ..procs import read_proc
from ..source import SourceRun

MIB = 1 << 20
GPU_FIELDS = ("timestamp", "index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total",
              "memory.used", "memory.free", "utilization.gpu", "ecc.errors.uncorrected.volatile.total",
              "retired_pages.pending")
APP_FIELDS = ("timestamp", "gpu_name", "gpu_bus_id", "gpu_uuid", "pid", "process_name", "used_gpu_memory")
_UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB", "utilization.gpu": "%",
          "used_gpu_memory": "MiB"}
NA = "[N/A]"


def nvml(run: SourceRun, zone: tzinfo) -> bool:
    """True when NVML was read (nvidia-smi is then not needed)."""
    gpus = read_inventory(timeout_s=run.left())
    if isinstance(gpus, NoNvml):
        run.fail(str(gpus).replace(": GPU memory not checked", ""))
        return False
    now = datetime.now(zone)
    stamp = smi_time(now)
    procs = sum(len(g.processes) for g in gpus)
    run.write("gpu/nvml-gpus.csv", _csv(GPU_FIELDS, [_gpu_row(g, stamp) for g in gpus]))
    if procs:
        run.write("gpu/nvml-processes.csv", _csv(APP_FIELDS, [_app_row(g, p.pid, p.used_bytes, stamp)
                                                              for g in gpus for p in g.processes]))
    run.write("gpu/nvml.json", (json.dumps(_document(gpus, now), indent=2) + "\n").encode())
    run.ok(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}, {procs} process{'es' if procs != 1 else ''}")
    return True


def nvidia_smi(run: SourceRun) -> None:
    gpus = run_command(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv"], run.left())
    if not gpus.ok:
        run.fail(str(gpus.problem))
        return
    run.write("gpu/nvidia-smi-gpus.csv", gpus.stdout, "nvidia-smi --query-gpu=... --format=csv")
    apps = run_command(["nvidia-smi", f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv"], run.left())
    if apps.ok:
        run.write("gpu/nvidia-smi-processes.csv", apps.stdout, "nvidia-smi --query-compute-apps=... --format=csv")
    run.ok("GPUs" + (" and processes" if apps.ok else f"; processes: {apps.problem}"))


def smi_time(when: datetime) -> str:
    """nvidia-smi's own timestamp format: 2026/03/12 14:17:03.123 (local time, no zone)."""
    return when.strftime("%Y/%m/%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"


def _csv(fields: tuple[str, ...], rows: list[list[str]]) -> bytes:
    header = ", ".join(f"{f} [{_UNITS[f]}]" if f in _UNITS else f for f in fields)
    return ("\n".join([header] + [", ".join(_cell(c) for c in row) for row in rows]) + "\n").encode()


def _cell(value: str) -> str:
    # nvidia-smi does not quote; a name with a comma (never seen, but possible) is quoted for csv readers
    return f'"{value}"' if "," in value or '"' in value else value


def _mib(value: int | None) -> str:
    return NA if value is None else f"{value // MIB} MiB"


def _gpu_row(g: GpuInventory, stamp: str) -> list[str]:
    r = g.reading
    ecc = g.counters.get("ecc_uncorrected_volatile")
    pending = g.counters.get("retired_pages_pending")
    return [stamp, str(r.index), r.name, r.uuid, g.pci_bus_id or NA, g.driver_version or NA, _mib(r.total_bytes),
            _mib(r.used_bytes), _mib(r.free_bytes), NA if g.utilization_pct is None else f"{g.utilization_pct:g} %",
            NA if ecc is None else str(ecc), NA if pending is None else ("Yes" if pending else "No")]


def _app_row(g: GpuInventory, pid: int, used: int | None, stamp: str) -> list[str]:
    info = read_proc(pid)
    name = redact_text(info.cmdline[0] if info and info.cmdline else info.comm if info else NA)
    return [stamp, g.reading.name, g.pci_bus_id or NA, g.reading.uuid, str(pid), name, _mib(used)]


def _document(gpus: list[GpuInventory], now: datetime) -> dict:
    """gpu/nvml.json: every reading in bytes, and each process as /proc shows it from here."""
    doc_gpus = []
    for g in gpus:
        r = g.reading
        procs = []
        for p in g.processes:
            entry: dict = {"pid": p.pid, "kind": p.kind, "used_bytes": p.used_bytes}
            info = read_proc(p.pid)
            if info is None:
                entry["visible"] = False        # another PID namespace (a container), or it just exited
            else:
                started = info.start_utc
                entry.update(visible=True, uid=info.uid, name=info.comm, argv=redact_argv(list(info.cmdline)),
                             started=started.strftime("%Y-%m-%dT%H:%M:%SZ") if started else None)
            procs.append(entry)
        doc_gpus.append({"index": r.index, "name": r.name, "uuid": r.uuid, "pci_bus_id": g.pci_bus_id,
                         "total_bytes": r.total_bytes, "used_bytes": r.used_bytes, "free_bytes": r.free_bytes,
                         "utilization_pct": g.utilization_pct, "counters": g.counters, "processes": procs})
    driver = next((g.driver_version for g in gpus if g.driver_version), None)
    return {"schema": "triage.nvml/v1", "taken": rfc3339(now), "driver_version": driver, "gpus": doc_gpus}
