"""Recovery and NVML against a real NVIDIA driver. Skipped without a GPU and torch with CUDA.

The rest of the suite runs NVML through a fake `pynvml`; these tests check the same paths on
a real card: a process holding GPU memory is listed by PID, stays listed while it lives and
drops out when it exits — which `stop_server` waits for and `check_gpu_free` relies on before
a relaunch — and a chronic recovery runs end to end with the engine holding real memory.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.simkit import alive, complete, wait_until, words
from tests.test_real_gpu_captures import has_cuda
from tests.test_recover_execute import (SHORT, audit_ok, ends, env, new_server, recover, records,  # noqa: F401
                                        start, until_failure)
from triage.live.nvml import NoNvml, read_gpus

pytestmark = pytest.mark.skipif(not has_cuda(), reason="needs an NVIDIA GPU and torch with CUDA")

CAPTURE = Path(__file__).resolve().parent / "real_gpu" / "capture.py"
GiB = 1 << 30


def listed() -> dict[int, int]:
    """PID -> index of the GPU NVML lists it on."""
    gpus = read_gpus()
    assert not isinstance(gpus, NoNvml), str(gpus)
    return {pid: g.index for g in gpus for pid in g.pids}


def test_nvml_lists_a_process_holding_gpu_memory_until_it_exits():
    before = read_gpus()
    assert not isinstance(before, NoNvml), str(before)
    holder = subprocess.Popen([sys.executable, str(CAPTURE), "--hold", "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        assert holder.pid in listed()
        during = read_gpus()
        assert not isinstance(during, NoNvml)
        gpu = next(g for g in during if holder.pid in g.pids)
        was = next(g for g in before if g.index == gpu.index)
        assert gpu.used_bytes - was.used_bytes >= 2 * GiB
        assert gpu.total_bytes == was.total_bytes and gpu.free_bytes < was.free_bytes
    finally:
        holder.kill()
        holder.wait()
    assert wait_until(lambda: holder.pid not in listed(), 10), "NVML still lists a process that exited"


def test_chronic_recovery_on_a_real_gpu_waits_for_the_driver_to_free_the_memory(start, env):  # noqa: F811
    live = start("--scenario", "chronic", "--sim-hold-gpu-gib", "2")
    engine = live.pid_of("EngineCore_DP0")
    assert wait_until(lambda: engine in listed(), 60), "the engine core never showed up in NVML"
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)

    done = recover(live.incident, env, "--execute", "--yes", *SHORT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not alive(engine) and engine not in listed()
    result = ends(live.incident)
    assert result["stop"] == "ok" and result["relaunch"] == "ok" and result["healthy"] == "ok"
    # With a real driver the GPU is checked, not skipped as it is without one.
    assert result["gpu-free"] == "ok"
    gpu_free = next(r for r in records(live.incident) if r["step"] == "gpu-free" and r["phase"] == "end")
    assert "no NVIDIA driver" not in str(gpu_free)

    pid, url = new_server(live.incident)
    assert complete(url, "hello after the fix", 2) == 200
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in environ
    children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    assert wait_until(lambda: any(c in listed() for c in children), 60), "the relaunched engine holds no GPU memory"
    audit_ok(live.incident, env)


def test_a_tenant_holding_the_card_stops_the_startup_relaunch_at_the_gpu_check(tmp_path, env):  # noqa: F811
    """startup-other-tenant's advice keeps gpu_memory_utilization 0.9 (no lower target holds the
    weights) and asks for the other process to go: on a real card with another process holding
    most of it, the recovery's GPU check requires the relaunch's own 0.9 and stops the run before
    anything is started — the plan and the advice agree."""
    import json
    import shutil

    incident = tmp_path / "INC"
    shutil.copytree(Path(__file__).resolve().parent.parent / "samples" / "startup-other-tenant", incident)
    total = next(g for g in read_gpus()).total_bytes
    hold_gib = max(2, int(total * 0.5 / GiB))
    holder = subprocess.Popen([sys.executable, str(CAPTURE), "--hold", str(hold_gib)], stdout=subprocess.PIPE,
                              text=True)
    marker = tmp_path / "RELAUNCHED"
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        done = recover(incident, env, "--execute", "--yes", "--url", "http://127.0.0.1:9",
                       "--launch-command", f"/usr/bin/touch {marker}", "--param", "gpu-free.timeout_s=5",
                       timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        result = ends(incident)
        assert result.get("gpu-free") == "failed" and "relaunch" not in result, result
        gpu_free = next(r for r in records(incident) if r.get("step") == "gpu-free" and r["phase"] == "end")
        assert "90%" in json.dumps(gpu_free), gpu_free          # the relaunch's own target, not a lowered one
        assert not marker.exists()
    finally:
        holder.kill()
        holder.wait()
