"""Not a GPU OOM: host RAM kills, hardware faults, illegal accesses and NCCL failures.

**Signature**: kernel OOM killer / cgroup / Kubernetes OOMKilled (exit 137), a child process
killed by SIGKILL (-9), host RSS growth; Xid 48/63/64/74/79/92/94/95, ECC errors, a GPU fallen
off the bus; "an illegal memory access was encountered"; NCCL errors and watchdog timeouts —
with no GPU out-of-memory message.
**Not to be confused with**: a GPU OOM followed by teardown noise (Xid 43/45, peers' NCCL
timeouts): the GPU-or-not question keeps those on the GPU-OOM path.
**Recovery**: runbooks/host_oom.yaml, runbooks/gpu_fault.yaml
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..model import Cause, OomClass
from .base import Assessment
from .context import Context
from .gpu_or_not import GpuAnswer

CLASS = OomClass.NOT_GPU_OOM
_HW_XIDS = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}

# kind -> (cause id, title, confidence when it is the only signal)
_CAUSE_OF = {
    Kind.HOST_OOM_KILL.value: ("host_oom", "Host memory exhausted: the kernel OOM killer killed a process", 0.92),
    Kind.OOM_KILLED.value: ("host_oom", "Host memory exhausted: the container was OOMKilled (exit 137)", 0.92),
    Kind.CHILD_KILLED.value: ("host_oom", "A worker/engine process was SIGKILLed (-9), the footprint of the host OOM killer", 0.6),
    Kind.HOST_MEMORY_GROWTH.value: ("host_oom", "Host (CPU) memory of the process grows: a host RAM leak", 0.55),
    Kind.HOST_MEMORY_EXHAUSTED.value: ("host_oom", "Host memory exhausted: a CPU-side allocation failed", 0.85),
    Kind.SETUP_ERROR.value: ("other", "A broken install or environment (import, driver, device or tokenizer), not memory", 0.6),
    Kind.PROCESS_CRASH.value: ("process_crash", "The process crashed (segfault / stack overflow), not out of memory", 0.75),
    Kind.ECC_ERROR.value: ("gpu_hardware_fault", "GPU hardware fault: uncorrectable ECC error", 0.9),
    Kind.GPU_LOST.value: ("gpu_hardware_fault", "GPU hardware fault: the GPU fell off the bus", 0.92),
    Kind.ILLEGAL_MEMORY_ACCESS.value: ("illegal_memory_access", "Illegal memory access: a kernel fault, not exhaustion", 0.88),
    Kind.NCCL_ERROR.value: ("nccl_failure", "NCCL failure: a collective failed or timed out", 0.82),
    Kind.CUDA_ERROR.value: ("cuda_fault", "A CUDA error that is not out-of-memory", 0.7),
    Kind.SOFTWARE_FAULT.value: ("other", "A software fault (a panic, or a process a watchdog or health check gave up "
                                         "on), not memory exhaustion", 0.7),
}


def assess(ctx: Context, gpu: GpuAnswer) -> Assessment:
    if gpu.answer != "no":
        return Assessment(CLASS, 0.0, "", "a GPU OOM is in the evidence")
    causes: dict[str, Cause] = {}
    best = 0.0
    if not ctx.not_gpu:   # a GPU-looking OOM that the walk showed to be host memory (pinned buffers)
        return Assessment(CLASS, 0.8, "Not a GPU OOM: a pinned host-memory allocation failed (host RAM)", gpu.why,
                          list(gpu.evidence), [Cause("host_oom", "Host memory exhausted: pinned CPU buffers (swap "
                                                     "space / CPU KV cache) could not be allocated", tuple(gpu.evidence))])
    for rec in ctx.not_gpu:
        cid, title, conf = _classify(rec)
        if cid not in causes:
            causes[cid] = Cause(cid, title, (rec,))
        best = max(best, conf)
    ordered = sorted(causes.values(), key=lambda c: -_classify(c.evidence[0])[2])
    if len(ordered) > 1:
        best = min(0.95, best + 0.03)
    summary = "Not a GPU OOM: " + ordered[0].title
    attach = []
    if best < 0.7:
        attach.append("dmesg / journalctl -k around the crash and `kubectl get pod -o json` (OOMKilled, exit code)")
    evidence = [e for c in ordered for e in c.evidence]
    return Assessment(CLASS, round(best, 2), summary, gpu.why, evidence, ordered, attach)


def _classify(rec) -> tuple[str, str, float]:
    if rec.kind == Kind.OOM_KILLED.value and rec.fields.get("reason") != "OOMKilled":
        # Exit 137 is SIGKILL: the OOM killer most often, but also a kill after a stop timeout.
        return "host_oom", "The container exited 137 (SIGKILL), the usual footprint of the host OOM killer", 0.7
    if rec.kind == Kind.XID.value:
        code = rec.fields.get("code")
        if code in _HW_XIDS:
            return "gpu_hardware_fault", f"GPU hardware fault: Xid {code} ({rec.fields.get('detail', '')[:60]})", 0.9
        return "gpu_app_fault", f"GPU application fault: Xid {code}", 0.7
    return _CAUSE_OF.get(rec.kind, ("other", rec.kind, 0.5))
