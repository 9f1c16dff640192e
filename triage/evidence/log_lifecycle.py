"""The lifecycle phase of a server as its log goes on (starting, ready, serving), which the
flowchart needs to tell a start-up OOM from a runtime one, and which records are failures."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from ..model import Phase
from .kinds import Kind

_LIFECYCLE_RESET = {Kind.STARTUP_BEGIN, Kind.ENGINE_VERSION, Kind.WEIGHTS_LOADED}
_STARTUP_PROGRESS = {Kind.MEMORY_PROFILE, Kind.KV_CAPACITY, Kind.MAX_CONCURRENCY,
                     Kind.AVAILABLE_KV_MEMORY, Kind.GRAPH_CAPTURE, Kind.STARTUP_STEP}
# Records that note the phase and uptime they happened at, and keep the load before them whole.
FAILURE_KINDS = {
    Kind.TORCH_OOM, Kind.CUDA_OOM, Kind.KV_CACHE_INSUFFICIENT, Kind.NO_CACHE_BLOCKS, Kind.FREE_MEMORY_LOW,
    Kind.WARMUP_OOM, Kind.LOAD_MODEL_OOM, Kind.PROFILING_ERROR, Kind.KV_POOL_OOM, Kind.ENGINE_START_FAILED,
    Kind.ENGINE_DEAD, Kind.REQUEST_FAILED, Kind.PROCESS_DIED, Kind.TRACEBACK, Kind.EXCEPTION, Kind.HOST_OOM_KILL,
    Kind.OOM_KILLED, Kind.CHILD_KILLED, Kind.WORKER_VANISHED,
    Kind.XID, Kind.ILLEGAL_MEMORY_ACCESS, Kind.ECC_ERROR, Kind.GPU_LOST, Kind.NCCL_ERROR, Kind.CUDA_ERROR,
    Kind.HOST_MEMORY_EXHAUSTED, Kind.PROCESS_CRASH, Kind.SETUP_ERROR, Kind.ERROR_NOT_MEMORY,
    Kind.TERMINATED,
}
# Requests that show a server up, not serving: probes, scrapes, the model list.
# HTTP methods of probes and listings, never of inference.
_PROBE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_NON_SERVING_PATHS = ("/health", "/metrics", "/v1/models", "/ping", "/version", "/load", "/docs", "/openapi.json")


def advance_phase(phase: Phase, start: datetime | None, kind: Kind, fields: dict[str, Any],
                  time: datetime | None) -> tuple[Phase, datetime | None]:
    """(phase, lifecycle start) after a record of `kind` at `time`: a (re)start begins a new
    lifecycle, start-up steps mean starting, a served request or a busy stats line means serving."""
    if kind in _LIFECYCLE_RESET or (kind is Kind.LAUNCH_CONFIG and fields.get("origin") == "engine config"):
        if phase in (Phase.SERVING, Phase.READY):
            start = time
        if phase is not Phase.STARTING:
            phase = Phase.STARTING
            start = time or start
    elif kind is Kind.LAUNCH_CONFIG and fields.get("origin") == "command line":
        # The launch command itself: what follows it, until a readiness or serving line, is start-up.
        if phase is Phase.UNKNOWN:
            phase = Phase.STARTING
            start = time or start
    elif kind in _STARTUP_PROGRESS:
        if phase is Phase.UNKNOWN:
            phase = Phase.STARTING
    elif kind is Kind.STARTUP_COMPLETE:
        if phase is not Phase.SERVING:
            phase = Phase.READY
    elif kind in (Kind.REQUEST_SERVED, Kind.STATS):
        if shows_serving(kind.value, fields):
            phase = Phase.SERVING
    elif kind in (Kind.PREEMPTION, Kind.REQUEST_FAILED):
        phase = Phase.SERVING
    return phase, start


def shows_serving(kind: str, fields: Mapping[str, Any]) -> bool:
    """A record that shows the server serving: an inference request answered without a server
    error (a POST to completions, chat, generate, embeddings, or an engine's own request record such
    as an offline batch; a probe's GET or HEAD of / or /health shows a server up, not serving), or a
    stats line with work in it."""
    if kind == Kind.REQUEST_SERVED.value:
        if fields.get("in_progress"):       # an engine's trace of a request it is working on
            return True
        path = str(fields.get("path", ""))
        return fields.get("status", 500) < 500 and str(fields.get("method", "POST")).upper() not in _PROBE_METHODS \
            and not path.startswith(_NON_SERVING_PATHS)
    if kind == Kind.STATS.value:
        return any((fields.get(k) or 0) > 0
                   for k in ("running", "prompt_tps", "generation_tps", "throughput_tps", "kv_usage", "waiting"))
    return False
