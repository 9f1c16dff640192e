"""Facts derived once from the evidence, shared by every flowchart module.

Modules stay small pure functions because the bookkeeping lives here: which record is the
failure, which tracebacks belong to it, what the launch arguments were, the GPU's size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping

from ..evidence.kinds import GPU_OOM_KINDS, NOT_GPU_KINDS, Kind
from ..evidence.log_lifecycle import shows_serving
from ..evidence.logs import BENIGN_EXCEPTIONS
from ..evidence.signatures import literal
from ..model import Evidence, EvidenceSet
from ..thresholds import FAILURE_TRACEBACK_LINES, STOP_AFTER_KILL_LINES

# An exception type that states an error (not a wrapper of another one, a dead engine, memory, a
# device, communication or a cancellation), and the words that keep an error's message from
# counting as a stated cause other than memory (as in signatures.yaml `generic-stated-error-not-memory`,
# less the words of a request's input).
_STATED_ERROR_TYPE = re.compile(
    r"(?:[\w.]{1,120}\.)?(?!(?:OutOfMemory|Memory|CudaOutOfMemory|Allocation|Alloc|Cuda|CUDA|Hip|HIP|Nccl|NCCL|"
    r"EngineDead|MQEngineDead|AsyncEngineDead|EngineCore|EngineGenerate|Worker|Ray\w{0,20}Actor|ActorDied|Killed|"
    r"Cancelled|BrokenPipe|Timeout|Connection)\w{0,40}(?:Error|Exception)$)[A-Z][A-Za-z0-9]{1,60}(?:Error|Exception)")
_NOT_A_STATED_CAUSE = re.compile(
    r"[Mm]emory|MEMORY|\bOOM\b|[Oo]ut of|[Aa]lloc|[Ss]pace|[Ee]nough|[Ii]nsufficient|[Cc]apacity|[Bb]locks?\b|"
    r"[Cc]ache|KV|kv_|[Ll]imit|CUDA|cuda|HIP|NCCL|nccl|[Dd]evice|[Ee]xceed|[Ll]arger than|[Tt]oo (?:large|long|big|many)|"
    r"[Ss]ee (?:the )?(?:root cause|above|stack|logs?|error)|[Oo]riginal (?:error|exception)|[Dd]ead\b|[Dd]ied|"
    r"[Kk]illed|[Ss]ignal|[Tt]erminat|[Tt]imed? ?out|[Ww]orker|[Ee]ngine|[Pp]rocess|negative (?:dimension|size)")
_ARG_PRIORITY = {"command line": 4, "non-default args": 3, "argparse namespace": 2, "launcher args": 2,
                 "server_args": 2, "engine config": 1}
_FAILURE_TEXT_KINDS = {Kind.ENGINE_START_FAILED, Kind.ENGINE_DEAD, Kind.REQUEST_FAILED, Kind.PROCESS_DIED,
                       Kind.EXCEPTION, Kind.TRACEBACK, Kind.STEP_FAILED}
# The engine's name as its own records state it, most direct first.
_ENGINE_KINDS = (Kind.ENGINE_VERSION, Kind.LAUNCH_CONFIG, Kind.STATS, Kind.KV_POOL_OOM, Kind.WARMUP_OOM,
                 Kind.KV_CAPACITY, Kind.POOL_LEAK, Kind.PREEMPTION, Kind.STARTUP_STEP, Kind.CUDA_OOM, Kind.STEP_FAILED,
                 Kind.REQUEST_FAILED, Kind.REQUEST_SERVED, Kind.ENGINE_START_FAILED, Kind.NO_CACHE_BLOCKS)


@dataclass
class Context:
    """The evidence of one incident and what the flowchart's questions worked out from it."""
    ev: EvidenceSet
    notes: list[str] = field(default_factory=list)
    derived_anchor: Evidence | None = None     # set when the OOM is derived from numbers, not stated

    # -- failures ------------------------------------------------------------------------------
    @cached_property
    def gpu_oom(self) -> list[Evidence]:
        return _ordered(self.ev.of(*GPU_OOM_KINDS))

    @cached_property
    def not_gpu(self) -> list[Evidence]:
        return _ordered([e for e in [*self.ev.of(*NOT_GPU_KINDS), *self._loop_stated_errors] if not self._engine_teardown(e)
                         and not (e.kind == Kind.ERROR_NOT_MEMORY.value and self._served_after(e))
                         and not (e.kind == Kind.TERMINATED.value and self._shutdown_after_serving(e))])

    @cached_property
    def _loop_stated_errors(self) -> list[Evidence]:
        """Tracebacks through an engine's serving loop that end in an error stating a cause with no
        memory, device, communication or dead-process words: the loop itself raised it, so the
        engine died of that error. The line-level reading (the `generic-stated-error-not-memory`
        entry) leaves out errors about a request's input (its tokens, prompt, messages), which a
        front end refuses while serving on; raised inside the loop they are the engine's failure.
        Read as an error naming another cause (a lean), and dropped like one when the server went
        on serving."""
        from .frames import frames   # the frame vocabulary is read only when a stack must decide

        out = []
        for tb in self.ev.of(Kind.TRACEBACK):
            exc, msg = tb.fields.get("exception"), tb.fields.get("message") or ""
            if (not exc or exc in BENIGN_EXCEPTIONS or tb.fields.get("rejected_request") or len(msg) < 12
                    or not _STATED_ERROR_TYPE.fullmatch(exc) or _NOT_A_STATED_CAUSE.search(f"{exc}: {msg}")):
                continue
            vocabulary = frames()     # read once, then cached
            stack = [tuple(f) for f in tb.fields.get("frames", [])]
            if any(vocabulary.is_runtime(f) for f in stack) and not any(vocabulary.is_startup(f) for f in stack):
                out.append(Evidence(tb.source, tb.line, Kind.ERROR_NOT_MEMORY.value, f"{exc}: {msg}", tb.time,
                                    {"exception": exc, "derived": "serving loop", "phase": tb.fields.get("phase")},
                                    tb.seq))
        return out

    def _served_after(self, rec: Evidence) -> bool:
        """The server went on serving after the error (an inference request answered, a busy stats
        line, in the same source): it was handled, one request's error and not the incident. Asked
        only of errors that name no failure of their own (a line at ERROR level, an error naming
        another cause)."""
        span = self._serving_span.get(rec.source)
        return span is not None and span[1] > rec.seq

    def _shutdown_after_serving(self, rec: Evidence) -> bool:
        """A SIGTERM after the server served, with nothing else failing: the server was shut down
        (a deploy, a scale-down, an operator), which is how a healthy server ends."""
        span = self._serving_span.get(rec.source)
        return span is not None and span[0] < rec.seq and not any(
            e.kind != Kind.TERMINATED.value for e in self.ev.of(*NOT_GPU_KINDS, *GPU_OOM_KINDS))

    @cached_property
    def _serving_span(self) -> dict[str, tuple[int, int]]:
        """Per source, the order of its first and of its last record that shows the server serving."""
        out: dict[str, tuple[int, int]] = {}
        for rec in self.ev.of(Kind.REQUEST_SERVED, Kind.STATS):
            if shows_serving(rec.kind, rec.fields):
                first, last = out.get(rec.source, (rec.seq, rec.seq))
                out[rec.source] = (min(first, rec.seq), max(last, rec.seq))
        return out

    def _engine_teardown(self, rec: Evidence) -> bool:
        """A shell's bare "Killed" after the engine reported a failed child is the engine's own
        teardown (SGLang kills its process group when a child fails), not the host OOM killer; a
        runner's `signal: killed` that its supervisor follows at once with "runner stopped" is the
        supervisor ending it on purpose (Ollama unloading an idle model)."""
        if rec.kind != Kind.CHILD_KILLED.value:
            return False
        process = rec.fields.get("process")
        if process == "runner":
            return any(s.source == rec.source and 0 < s.seq - rec.seq <= STOP_AFTER_KILL_LINES
                       for s in self.ev.of(Kind.RUNNER_STOPPED))
        return process == "shell" and any(d.source == rec.source and d.seq < rec.seq
                                          and "child" in str(d.fields.get("signal", ""))
                                          for d in self.ev.of(Kind.PROCESS_DIED))

    @cached_property
    def other_failures(self) -> list[Evidence]:
        """Failure lines that do not say what failed (wrappers, bare tracebacks, exceptions).
        A traceback ending in a shutdown or client-disconnect exception is not a failure."""
        return _ordered([e for e in self.ev.of(*_FAILURE_TEXT_KINDS)
                         if not (e.kind == Kind.TRACEBACK.value and (e.fields.get("exception") in BENIGN_EXCEPTIONS
                                                                     or e.fields.get("rejected_request")))
                         and not (e.kind in (Kind.EXCEPTION.value, Kind.TRACEBACK.value) and self._served_after(e))])

    @property
    def any_failure(self) -> bool:
        return bool(self.gpu_oom or self.not_gpu or self.other_failures)

    @cached_property
    def primary(self) -> Evidence | None:
        """The GPU OOM the verdict is about: the earliest one (by time, then order)."""
        if self.gpu_oom:
            return self.gpu_oom[0]
        return self.derived_anchor

    def tracebacks_near(self, anchor: Evidence, span: int = FAILURE_TRACEBACK_LINES) -> list[Evidence]:
        out = []
        for tb in self.ev.of(Kind.TRACEBACK):
            if tb.source != anchor.source:
                continue
            if anchor.line is None or tb.line is None or abs(tb.line - anchor.line) <= span:
                out.append(tb)
        return out

    def frames_near(self, anchor: Evidence) -> list[tuple[str, int, str]]:
        frames: list[tuple[str, int, str]] = []
        for tb in self.tracebacks_near(anchor):
            frames.extend(tuple(f) for f in tb.fields.get("frames", []))  # type: ignore[misc]
        return frames

    # -- launch configuration ------------------------------------------------------------------
    @cached_property
    def launch(self) -> list[Evidence]:
        return self.ev.of(Kind.LAUNCH_CONFIG)

    @cached_property
    def args(self) -> dict[str, Any]:
        """Launch arguments merged, the most direct source winning (command line > logged)."""
        merged: dict[str, Any] = {}
        # vLLM's cache_config_info metric carries the cache settings as labels: the weakest source.
        for rec in self.ev.of(Kind.METRIC):
            if rec.fields.get("name") == "cache_config":
                for key, raw in (rec.fields.get("labels") or {}).items():
                    if key in ("gpu_memory_utilization", "block_size", "enable_prefix_caching", "num_gpu_blocks",
                               "cache_dtype", "swap_space_bytes", "cpu_offload_gb"):
                        merged[key] = literal(raw)
        for rec in sorted(self.launch, key=lambda e: _ARG_PRIORITY.get(str(e.fields.get("origin")), 0)):
            args = rec.fields.get("args") or {}
            if isinstance(args, dict):
                merged.update(args)
        if "max_seq_len" in merged and "max_model_len" not in merged:
            merged["max_model_len"] = merged["max_seq_len"]
        return merged

    @cached_property
    def explicit_args(self) -> dict[str, Any]:
        """Only what the operator set: the command line and vLLM's 'non-default args' line
        (an engine config line also prints defaults, e.g. V1's enable_prefix_caching=True)."""
        out: dict[str, Any] = {}
        for rec in self.launch:
            if rec.fields.get("origin") in ("command line", "non-default args") and isinstance(rec.fields.get("args"), dict):
                out.update(rec.fields["args"])
        return out

    @cached_property
    def argv(self) -> list[str] | None:
        for rec in reversed(self.launch):
            if rec.fields.get("argv"):
                return list(rec.fields["argv"])
        return None

    @cached_property
    def engine(self) -> str:
        for kind in _ENGINE_KINDS:
            for rec in self.ev.of(kind):
                engine = rec.fields.get("engine")
                if engine:
                    return str(engine)
        paths = " ".join(f[0] for tb in self.ev.of(Kind.TRACEBACK) for f in tb.fields.get("frames", []))
        for name, engine in (("sglang", "sglang"), ("vllm", "vllm"), ("text_generation_server", "tgi"),
                             ("lmdeploy", "lmdeploy"), ("tensorrt_llm", "trtllm"), ("xinference", "xinference")):
            if f"/{name}/" in paths:
                return engine
        if self.ev.has(Kind.MEMORY_PROFILE, Kind.KV_CAPACITY, Kind.KV_CACHE_INSUFFICIENT, Kind.ENGINE_DEAD,
                       Kind.ENGINE_START_FAILED, Kind.PREEMPTION):
            return "vllm"
        return "unknown"

    @cached_property
    def version(self) -> str | None:
        for rec in self.ev.of(Kind.ENGINE_VERSION, Kind.LAUNCH_CONFIG):
            if rec.fields.get("version"):
                return str(rec.fields["version"]).lstrip("v")
        return None

    @cached_property
    def engine_mode(self) -> str | None:
        """vLLM engine generation: "v1" or "v0", from the config line, prefixes or frames."""
        for rec in self.launch:
            mode = rec.fields.get("engine_mode")
            if mode:
                return str(mode).lower()
        procs = {str(e.fields.get("process") or "") for e in self.ev}
        if any(p.startswith(("EngineCore", "APIServer", "Worker_", "VllmWorker")) for p in procs if p):
            return "v1"
        frames = [f[0] for tb in self.ev.of(Kind.TRACEBACK) for f in tb.fields.get("frames", [])]
        if any("/vllm/v1/" in f for f in frames):
            return "v1"
        if any("/vllm/engine/" in f or "/vllm/worker/" in f for f in frames):
            return "v0"
        if self.ev.has(Kind.PREEMPTION):
            return "v0"
        return None

    # -- sizes ----------------------------------------------------------------------------------
    @cached_property
    def gpu_total_bytes(self) -> int | None:
        for rec in self.ev.of(Kind.TORCH_OOM, Kind.FREE_MEMORY_LOW, Kind.MEMORY_PROFILE, Kind.GPU_MEMORY):
            for key in ("capacity_bytes", "total_bytes", "total_gpu_memory_bytes"):
                val = rec.fields.get(key)
                if val:
                    return int(val)
        return None

    @cached_property
    def block_size(self) -> int:
        try:
            return int(self.args.get("block_size") or 16)
        except (TypeError, ValueError):
            return 16

    def arg(self, *names: str) -> Any:
        return first_arg(self.args, names)

    def last_before(self, kind: str, anchor: Evidence | None, source_only: bool = False) -> list[Evidence]:
        """Records of `kind` that precede `anchor` (by time when both have one, else by order)."""
        out = []
        for rec in self.ev.of(kind):
            if anchor is None or _before(rec, anchor, source_only):
                out.append(rec)
        return out


def first_arg(args: Mapping[str, Any], names: Iterable[str]) -> Any:
    """The first of `names` the launch arguments set (None and "None" are not set)."""
    for name in names:
        if name in args and args[name] not in (None, "None"):
            return args[name]
    return None


def _before(rec: Evidence, anchor: Evidence, source_only: bool) -> bool:
    if source_only and rec.source != anchor.source:
        return False
    if rec.time is not None and anchor.time is not None:
        return rec.time <= anchor.time
    if rec.source == anchor.source:
        return rec.seq < anchor.seq
    return True


def _ordered(items: list[Evidence]) -> list[Evidence]:
    timed = [e.time for e in items if e.time is not None]
    if timed and len(timed) == len(items):
        return sorted(items, key=lambda e: (e.time, e.seq))
    return sorted(items, key=lambda e: e.seq)


def _level_only(rec: Evidence) -> bool:
    """A line the server logged at an error level that no entry explains (no exception type)."""
    return rec.kind == Kind.EXCEPTION.value and "type" in rec.fields and rec.fields["type"] is None
