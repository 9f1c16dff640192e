"""Capture real GPU evidence on a machine with an NVIDIA GPU and PyTorch with CUDA.

    python tests/real_gpu/capture.py OUTDIR

Writes what the parsers must read in the wild, produced by the real driver and allocator
rather than typed from documentation:

  oom-simple/      an allocation larger than the card: the OOM traceback, memory_stats, summary
  oom-fragmented/  a caching allocator whose free space is split into pieces too small for the
                   next request (the chronic / fragmentation signature), the same three files
  (manifest only)  the same tensors and request under PYTORCH_CUDA_ALLOC_CONF=
                   expandable_segments:True, the fix triage recommends for it: does it succeed
  nvidia-smi.txt, nvidia-smi-gpu.csv, nvidia-smi-apps.csv   taken while a holder process
                   keeps HOLD_GIB on the card, whose PID is in holder.pid
  manifest.json    torch, CUDA and driver versions, the card, and the numbers each capture used

Each OOM runs in its own child process so that the allocator starts clean. Nothing here needs
triage itself: the tests read these files through the parsers (tests/test_real_gpu_captures.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HOLD_GIB = 4
GIB = 1024 ** 3
MIB = 1024 ** 2


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _dump_allocator(torch, out: Path) -> dict:
    stats = torch.cuda.memory_stats()
    _write(out / "memory_stats.json", json.dumps(stats, indent=2, sort_keys=True) + "\n")
    _write(out / "memory_summary.txt", torch.cuda.memory_summary())
    return {
        "reserved_bytes": torch.cuda.memory_reserved(),
        "allocated_bytes": torch.cuda.memory_allocated(),
        "inactive_split_bytes": stats.get("inactive_split_bytes.all.current"),
        "num_ooms": stats.get("num_ooms"),
    }


def _record_oom(torch, nbytes: int, out: Path, what: str) -> None:
    """Allocate `nbytes`, which must fail; the traceback is the log a server would have written."""
    try:
        torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        _write(out / "server.log", traceback.format_exc())
    else:
        raise SystemExit(f"{what} did not fail")


def oom_simple(out: Path) -> dict:
    """One request bigger than the whole card."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    warm = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")   # some live memory to report
    request = total + 8 * GIB
    _record_oom(torch, request, out, "the oversized allocation")
    info = _dump_allocator(torch, out)
    del warm
    return {"requested_bytes": request, "total_bytes": total, **info}


def _fragmenting_workload(torch, fill_bytes: int | None) -> tuple[list, int]:
    """1 GiB segments, freed and each re-used by a 600 MiB tensor, then `fill_bytes` more (all
    the driver has left, less than one request, when None). Returns the live tensors and the fill."""
    free, _ = torch.cuda.mem_get_info()
    segments = int(free * 0.6) // GIB
    big = [torch.empty(GIB, dtype=torch.uint8, device="cuda") for _ in range(segments)]
    del big                                   # segments stay cached by the allocator
    live = [torch.empty(600 * MIB, dtype=torch.uint8, device="cuda") for _ in range(segments)]
    filled = 0
    while fill_bytes is None or filled < fill_bytes:
        free, _ = torch.cuda.mem_get_info()
        if fill_bytes is None and free < 1536 * MIB:
            break
        size = (free - 768 * MIB) if fill_bytes is None else min(fill_bytes - filled, 8 * GIB)
        try:
            live.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
        filled += size
    return live, filled


def oom_fragmented(out: Path) -> dict:
    """Cached 1 GiB segments each pinned by a 600 MiB tensor: ~40% of the reserve is free but no
    piece holds the next 1 GiB request, and the allocator cannot release a pinned segment."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    live, filled = _fragmenting_workload(torch, None)
    _record_oom(torch, GIB, out, "the fragmented allocation")
    info = _dump_allocator(torch, out)
    del live
    return {"fill_bytes": filled, "requested_bytes": GIB, "total_bytes": total, **info}


def fragmented_with_expandable_segments(fill_bytes: int) -> dict:
    """The same tensors, the same fill and the same request under
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the parent sets it for this child), the fix
    triage recommends for fragmentation: freed memory is no longer tied to the segment it was in."""
    import torch

    live, filled = _fragmenting_workload(torch, fill_bytes)
    try:
        torch.empty(GIB, dtype=torch.uint8, device="cuda")
        ok, message = True, None
    except torch.OutOfMemoryError as exc:
        ok, message = False, str(exc)
    del live
    return {"fill_bytes": filled, "requested_bytes": GIB, "allocation_succeeded": ok, "message": message,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}


def hold(gib: int) -> None:
    """Keep `gib` GiB on GPU 0 until killed (the process nvidia-smi and NVML must list)."""
    import torch

    block = torch.empty(gib * GIB, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    print("holding", flush=True)
    while True:
        time.sleep(1)


def _smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60).stdout


def main(outdir: str) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__]
    results = {}
    for name in ("oom-simple", "oom-fragmented"):
        done = subprocess.run([*me, "--child", name, str(out / name)], check=True, timeout=300,
                              stdout=subprocess.PIPE, text=True)
        results[name] = json.loads(done.stdout)
    done = subprocess.run([*me, "--expandable", str(results["oom-fragmented"]["fill_bytes"])], check=True,
                          timeout=300, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    results["fragmented-expandable"] = json.loads(done.stdout)
    holder = subprocess.Popen([*me, "--hold", str(HOLD_GIB)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        _write(out / "holder.pid", f"{holder.pid}\n")
        _write(out / "nvidia-smi.txt", _smi())
        _write(out / "nvidia-smi-gpu.csv", _smi(
            "--query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu",
            "--format=csv"))
        _write(out / "nvidia-smi-apps.csv", _smi(
            "--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory", "--format=csv"))
    finally:
        holder.kill()
        holder.wait()
    import torch

    manifest = {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "driver": _smi("--query-gpu=driver_version", "--format=csv,noheader").strip(),
        "card": torch.cuda.get_device_name(0), "holder_gib": HOLD_GIB, "captures": results,
    }
    _write(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        target = Path(sys.argv[3])
        result = {"oom-simple": oom_simple, "oom-fragmented": oom_fragmented}[sys.argv[2]](target)
        print(json.dumps(result))
    elif sys.argv[1] == "--expandable":
        print(json.dumps(fragmented_with_expandable_segments(int(sys.argv[2]))))
    elif sys.argv[1] == "--hold":
        hold(int(sys.argv[2]))
    else:
        main(sys.argv[1])
