"""Question 1: was this a GPU memory exhaustion at all?

Host OOM kills (kernel, cgroup, Kubernetes OOMKilled/137, a child or shard killed by SIGKILL, a
bare `Killed` from the shell), host allocation failures (Ray's memory monitor, swap space, pinned
or mmap'd host memory, a host KV tier), Xid faults, ECC errors, illegal memory accesses, NCCL
failures and software faults (panics, watchdog and health-check timeouts) look like "the server
died of memory" on a dashboard but need a different response. A real GPU OOM (the allocator's
message, a CUDA out-of-memory error, the engines' start-up checks and their own runtime pool
OOMs) is never dismissed as one of those: when both appear, only a hardware fault or host kill
*before* the GPU OOM takes precedence.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from ..evidence.kinds import Kind
from ..lazyre import lazy
from ..model import Evidence
from ..thresholds import ROOT_CAUSE_WINDOW_S, SAME_FAILURE_LINES
from .context import Context
from .silent_on_memory import failure_silent_on_memory

QUESTION = "Is this a GPU out-of-memory failure?"

# Signals that follow a GPU OOM as its consequences (teardown, peers timing out). Which Xids are
# consequences or only informational is data (triage/data/xids.yaml).
_CONSEQUENCES = {Kind.NCCL_ERROR.value, Kind.CHILD_KILLED.value, Kind.WORKER_VANISHED.value, Kind.CUDA_ERROR.value,
                 Kind.PROCESS_CRASH.value, Kind.SETUP_ERROR.value, Kind.SOFTWARE_FAULT.value,
                 Kind.ERROR_NOT_MEMORY.value, Kind.FAILURE_SILENT_ON_MEMORY.value, Kind.TERMINATED.value,
                 Kind.FAILURE_IN_HOST_CODE.value}


class GpuAnswer(NamedTuple):
    """The question's answer (a NamedTuple: read-only, and cheap to define on the cold path)."""

    answer: str                     # "yes" | "no" | "no_failure" | "unclear"
    why: str
    evidence: Sequence[Evidence] = ()


def assess(ctx: Context) -> GpuAnswer:
    gpu, not_gpu = ctx.gpu_oom, ctx.not_gpu
    if gpu:
        first = gpu[0]
        pinned = _pinned_host_allocation(ctx, first)
        if pinned is not None:
            return GpuAnswer("no", f"the failing allocation at {pinned.where} is pinned host memory (CPU cache / swap "
                                   "space), which CUDA reports as out of memory: a host RAM limit", [pinned, first])
        earlier = [e for e in not_gpu if _is_root_cause(e) and (_shortly_before(e, first) or _host_failure_restated(e, first))]
        if earlier:
            return GpuAnswer("no", f"{_label(earlier[0])} happened before the GPU OOM, which followed from it",
                             earlier[:3] + [first])
        why = f"{_label(first)} at {first.where}"
        roots = [e for e in not_gpu if _is_root_cause(e)]
        if roots:
            why += (f"; also seen: {_label(roots[0])} at {roots[0].where}, not shown to come before it "
                    "(check it separately)")
        return GpuAnswer("yes", why, gpu[:3] + roots[:2])
    if not_gpu and not (all(e.kind in _CONSEQUENCES for e in not_gpu) and _unmatched_memory_words(ctx)):
        return GpuAnswer("no", f"{_label(not_gpu[0])}, and no GPU out-of-memory message anywhere",
                         not_gpu[:4])
    if not ctx.other_failures:
        retraction = _unrecovered_retraction(ctx)
        if retraction is not None:
            ctx.derived_anchor = retraction
            return GpuAnswer("yes", f"the engine ran out of KV-pool memory while serving and retracted requests "
                                    f"({retraction.where}), and the log shows no batch served after it", [retraction])
    if ctx.other_failures:
        first = ctx.other_failures[0]
        checked = _failed_memory_check(ctx)
        if checked is not None:
            ctx.derived_anchor = checked
            return GpuAnswer("yes", f"the failing stack ends in an engine's start-up memory check ({checked.where}), which "
                                    "fails only when the KV cache the settings ask for does not fit the memory left",
                             [checked, first])
        derived = _derived_kv_failure(ctx)
        if derived is not None:
            ctx.derived_anchor = derived
            return GpuAnswer("yes", f"the engine failed ({first.where}) right after logging a KV cache too small for "
                                    f"max_model_len ({derived.where}): vLLM's KV-cache check fails exactly there",
                             [derived, first])
        from .host_code import failure_in_host_code    # read only when a failure is still unnamed

        leans = ((failure_in_host_code, "and every other failure were raised or logged by code that runs on the "
                                        "host CPU only (tokenizing, parsers, grammars), which allocates no GPU memory"),
                 (failure_silent_on_memory, "and every other failure line speak of no memory, allocation, capacity "
                                            "or kill: it leans to another cause"))
        for lean, why in leans:
            found = lean(ctx)
            if found is not None:
                ctx.not_gpu.append(found)  # the look-alike class names the failure from ctx.not_gpu
                return GpuAnswer("no", f"the failure at {first.where} {why}", [found, *ctx.other_failures[1:3]])
        return GpuAnswer("unclear", f"a failure at {first.where}, but the evidence does not say what failed",
                         ctx.other_failures[:3])
    return GpuAnswer("no_failure", "no failure of any kind in the evidence")


# The argument scan stops at the next `_allocate_kv_cache(`: a line of many costs linear time.
_HOST_BUFFER = lazy(r"cpu_cache\b|num_cpu_blocks|_allocate_kv_cache\((?:(?!_allocate_kv_cache\()[^)])*[\"']cpu[\"']"
                    r"|pin_memory=True")


def _pinned_host_allocation(ctx: Context, oom: Evidence) -> Evidence | None:
    """A raw CUDA OOM whose innermost frames allocate the CPU (swap) KV cache or pinned buffers."""
    if oom.kind != Kind.CUDA_OOM.value:
        return None
    for tb in ctx.tracebacks_near(oom, span=SAME_FAILURE_LINES):
        inner = tb.fields.get("frames", [])[-2:]
        if any(len(f) > 3 and _HOST_BUFFER.search(str(f[3])) for f in inner):
            return tb
    return None


def _unrecovered_retraction(ctx: Context) -> Evidence | None:
    """SGLang's decode "out of memory ... retract requests" that is the last thing its source logged.

    A retraction followed by more batches is back-pressure the scheduler absorbed (no failure);
    one after which the server logs no further batch is where serving stopped: the engine's own
    runtime out-of-memory wording, and the incident."""
    retracts = [e for e in ctx.ev.of(Kind.PREEMPTION) if e.fields.get("mode") == "retract"]
    if not retracts:
        return None
    last = retracts[-1]
    # A storm of retractions is one record per time bucket (evidence/repeats.py): the bucket's
    # last line, not its first, is the last retraction logged.
    end = last.fields.get("last_line") or last.line
    # A request answered with a server error is no sign the engine served again.
    later = [s for s in ctx.ev.of(Kind.STATS, Kind.REQUEST_SERVED) if s.source == last.source
             and not (s.kind == Kind.REQUEST_SERVED.value and (s.fields.get("status") or 0) >= 500)
             and (s.line > end if s.line is not None and end is not None else s.seq > last.seq)]
    return None if later else retracts[0]


# A check's own failure: its exception cut off, or the plain ValueError / RuntimeError it raises.
_CHECK_EXCEPTIONS = (None, "ValueError", "RuntimeError")


def _failed_memory_check(ctx: Context) -> Evidence | None:
    """A traceback whose innermost frame is an engine's start-up memory check
    (triage/data/phase_frames.yaml memory_checks), ending with no other error named."""
    tracebacks = ctx.ev.of(Kind.TRACEBACK)
    if not tracebacks:
        return None
    from .frames import calls_in, frames    # the frame vocabulary is read only when a stack must decide

    checks = frames().memory_checks
    for tb in tracebacks:
        stack = tb.fields.get("frames") or []
        if not stack or tb.fields.get("exception") not in _CHECK_EXCEPTIONS:
            continue
        # The innermost frame is the check, or (the excerpt cut before the check's own frame) calls it.
        called = [] if tb.fields.get("exception") else calls_in(stack[-1])
        if stack[-1][2] in checks or any(name in checks for name in called):
            return tb
    return None


def _derived_kv_failure(ctx: Context) -> Evidence | None:
    """A failure whose message is cut, after the log already showed max_model_len cannot fit."""
    from .causes import kv_cache_blowout

    cause = kv_cache_blowout(ctx)
    return cause.evidence[0] if cause and cause.evidence else None


# Memory-exhaustion wording in a failure record that no signature read as an OOM. A crash,
# abort, assertion or CUDA error is usually the teardown after the failure that caused it
# (ggml aborts after a failed allocation, Go runners SIGABRT after a CUDA error): when such
# wording sits beside it, the crash does not show that memory was not the cause.
_MEMORY_WORDS = lazy(r"out of (?:device )?memory|OutOfMemory|OUT_OF_(?:DEVICE_)?MEMORY|[Ii]nsufficient memory"
                     r"|failed to allocate|[Aa]llocation (?:of [^\n]{0,60})?failed")


def _unmatched_memory_words(ctx: Context) -> bool:
    return any(_MEMORY_WORDS.search(e.text or "") for e in ctx.ev if e.kind not in _CONSEQUENCES)


def _is_root_cause(e: Evidence) -> bool:
    if e.fields.get("explains_next_oom"):
        return True
    if e.kind in _CONSEQUENCES:
        return False
    if e.kind == Kind.XID.value:
        from .xids import may_cause_oom    # the Xid table is read only when an Xid is in the evidence

        # DCGM's gauge holds the *last* Xid ever seen, stamped with the scrape time: never a cause.
        return may_cause_oom(e.fields.get("code")) and e.fields.get("detail") != "reported by dcgm-exporter"
    return e.kind != Kind.HOST_MEMORY_GROWTH.value


def _host_failure_restated(host: Evidence, oom: Evidence) -> bool:
    """A host allocation that failed on the lines just before a GPU OOM reading, with no time on
    either to order them: an engine restating the same failure (TensorRT-LLM explains any
    exception holding "out of memory" as insufficient GPU memory, a pinned host buffer's included).
    Likewise a refusal the data marks as explaining the allocation failure after it (a buffer over
    the device's per-allocation limit, refused before the driver was asked)."""
    explains = host.kind == Kind.HOST_MEMORY_EXHAUSTED.value or bool(host.fields.get("explains_next_oom"))
    if not explains or host.source != oom.source:
        return False
    if host.line is None or oom.line is None or (host.time is not None and oom.time is not None):
        return False
    return 0 < oom.line - host.line <= SAME_FAILURE_LINES


def _shortly_before(a: Evidence, b: Evidence) -> bool:
    if a.time is None or b.time is None:
        return False
    gap = (b.time - a.time).total_seconds()
    return 0 < gap <= ROOT_CAUSE_WINDOW_S


_LABELS = {
    "torch_oom": "PyTorch's allocator reported CUDA out of memory",
    "cuda_oom": "a CUDA out-of-memory error",
    "kv_cache_insufficient": "vLLM's KV-cache capacity check failed",
    "no_cache_blocks": "no GPU memory was left for KV-cache blocks",
    "free_memory_low": "free GPU memory at start-up was below the utilisation budget",
    "warmup_oom": "the start-up warm-up ran out of GPU memory",
    "load_model_oom": "loading the weights ran out of GPU memory",
    "kv_pool_oom": "the KV token pool could not fit the batch",
    "pool_leak": "the engine's own KV-pool leak check failed",
    "preemption": "the engine retracted requests: its KV pool ran out of memory",
    "software_fault": "a software fault (a panic, a hang a watchdog or health check gave up on, a fixed buffer overflowing)",
    "host_oom_kill": "the kernel OOM killer killed a process (host RAM)",
    "oom_killed": "the container was OOMKilled (host RAM limit, exit 137)",
    "child_killed": "an engine/worker process was killed by SIGKILL (-9)",
    "worker_vanished": "a worker process died outside its own error handling (killed, or crashed in native code)",
    "xid": "an NVIDIA Xid event",
    "illegal_memory_access": "an illegal memory access (a kernel fault, not exhaustion)",
    "ecc_error": "an uncorrectable ECC error (hardware)",
    "gpu_lost": "the GPU was lost (fell off the bus, or the driver lost the device)",
    "context_full": "the context's KV cells were full even for a batch of one (a configured limit, not memory)",
    "nccl_error": "an NCCL collective failure",
    "cuda_error": "a CUDA error that is not out-of-memory",
    "host_memory_growth": "host process memory (RSS) growth",
    "error_not_memory": "an error whose own words name a cause other than memory",
    "failure_silent_on_memory": "a failure none of whose lines speaks of memory",
    "failure_in_host_code": "a failure in code that runs on the host CPU only",
    "host_memory_exhausted": "a host (CPU) memory allocation failed",
    "process_crash": "the process crashed (segfault / stack overflow)",
    "terminated": "a process was stopped by SIGTERM (from outside: an operator, an orchestrator, a parent shutting down)",
    "setup_error": "a broken install or environment (import, driver, device, tokenizer)",
    "profiling_error": "vLLM's memory profile failed its sanity check (free memory did not fall while profiling)",
}


def _label(e: Evidence) -> str:
    base = _LABELS.get(e.kind, e.kind)
    if e.kind == "xid" and e.fields.get("code") is not None:
        base = f"NVIDIA Xid {e.fields['code']}"
    return base
