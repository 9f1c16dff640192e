"""Question 2: did it fail before the engine was serving?

Decided by, in order: vLLM's own start-up checks (they only run at start-up); the stack
frames around the failure (weight loading, profiling, KV-cache sizing, warm-up and graph
capture are start-up; the engine's step/execute loop is serving); the log's lifecycle before
the failure (start-up lines only, or requests/stats already seen); the engine's own wrapper
("failed to start" vs "encountered a fatal error"). Model-forward frames alone do not decide:
the profiling pass runs the same forward as a request. The frame names are data
(triage/data/phase_frames.yaml, read through frames.py); the strengths are the confidence scale's.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from ..evidence.kinds import STARTUP_CHECK_KINDS, Kind
from ..evidence.logs import short_path
from ..lazyre import lazy
from ..model import Evidence
from ..thresholds import SAME_FAILURE_LINES, UNLOADED_ALLOCATED_SHARE
from ..units import format_bytes
from . import confidence as conf
from .context import Context

QUESTION = "Did it fail before the engine was serving?"

# An engine's own wording for running out of memory while serving: these only happen in the
# serving loop (a KV/token pool too full for the running batch, a leak check between batches).
RUNTIME_OOM_KINDS = frozenset({Kind.KV_POOL_OOM.value, Kind.POOL_LEAK.value, Kind.PREEMPTION.value})


def _warmup_request_failed(ctx: Context, anchor: Evidence) -> Evidence | None:
    """A start-up failure the engine states for its warm-up (the entries that read one set
    `stage: warmup`), on the lines around a runtime OOM record (same source, within one failure's
    span) with no start-up completed between them."""
    if anchor.line is None:
        return None
    for rec in ctx.ev.of(Kind.ENGINE_START_FAILED):
        if rec.fields.get("stage") != "warmup" or rec.source != anchor.source or rec.line is None \
                or abs(rec.line - anchor.line) > SAME_FAILURE_LINES:
            continue
        lo, hi = sorted((rec.line, anchor.line))
        if not any(e.source == anchor.source and e.line is not None and lo <= e.line <= hi
                   for e in ctx.ev.of(Kind.STARTUP_COMPLETE)):
            return rec
    return None


class PhaseAnswer(NamedTuple):
    """The question's answer (a NamedTuple: read-only, and cheap to define on the cold path)."""

    phase: str                      # "startup" | "runtime" | "unknown"
    why: str
    strength: float                 # how direct the deciding evidence is (0..1)
    evidence: Sequence[Evidence] = ()
    uptime_s: float | None = None
    # The failure is tied to request work (serving-loop frames, a failed step or request, requests
    # or stats before it, the engine's own runtime OOM wording), not merely to a running engine.
    request_work: bool = False


def assess(ctx: Context, anchor: Evidence) -> PhaseAnswer:
    # A start-up check decides only the failure it belongs to: in a crash loop, a restart that
    # fails its memory check says nothing about the runtime OOM before it.
    check_kinds = {k.value for k in STARTUP_CHECK_KINDS}
    checks = [e for e in ctx.gpu_oom if e.kind in check_kinds and (
        e is anchor or (e.source == anchor.source and e.line is not None and anchor.line is not None
                        and abs(e.line - anchor.line) <= SAME_FAILURE_LINES and not _restart_between(ctx, anchor, e)))]
    if checks:
        # Name the engine only where the evidence names it: the same checks are worded by other engines too.
        engine = {"vllm": "vLLM's", "unknown": "the engine's"}.get(ctx.engine, f"{ctx.engine}'s")
        return PhaseAnswer("startup", f"{engine} start-up memory check failed ({checks[0].kind} at {checks[0].where})",
                           conf.DECISIVE, checks[:2])
    if anchor is ctx.derived_anchor and anchor.kind == Kind.KV_CAPACITY.value:
        # The failure was derived from the start-up KV sizing (a cache too small for max_model_len,
        # then a cut failure): that check runs once, while the engine starts.
        return PhaseAnswer("startup", f"the failure follows the engine's start-up KV-cache sizing ({anchor.where}), "
                                      "a check that only runs while starting", conf.HIGH, [anchor])
    if anchor.kind in RUNTIME_OOM_KINDS:
        warmup = _warmup_request_failed(ctx, anchor)
        if warmup is not None:
            # The serving loop's own out-of-memory, on the one request an engine sends itself before
            # it says it is up (SGLang's and TGI's warm-up): the engine states its start failed.
            return PhaseAnswer("startup", f"the serving loop ran out of KV-pool memory ({anchor.kind} at {anchor.where}) "
                                          f"on the engine's own warm-up request: it says start-up failed ({warmup.where})",
                               conf.HIGH, [anchor, warmup])
        engine = ctx.engine if ctx.engine != "unknown" else "the engine"
        return PhaseAnswer("runtime", f"{engine}'s own serving-loop out-of-memory message ({anchor.kind} at "
                                      f"{anchor.where}): it only happens while requests run", conf.HIGH, [anchor],
                           _uptime(anchor), request_work=True)
    from .frames import frames    # the frame vocabulary is read only when a stack must decide

    tbs = ctx.tracebacks_near(anchor)
    vocab = frames()
    methods = _worker_methods(ctx, anchor)
    # A worker wrapper's "while processing method X" names the function the worker ran, and a native
    # runtime's "func: failed to ..." the function that failed: read either as the stack's outermost frame.
    stack = [("<worker method>", 0, _method(m)) for m in methods] + ctx.frames_near(anchor)
    idle = any(f[2] == vocab.idle_marker for f in stack)
    start_frames = [f for f in stack if vocab.is_startup(f) and not (idle and f[2] in vocab.idle_not_startup)]
    if start_frames:
        f = start_frames[0]
        if f[0] == "<worker method>":
            ran = next((m for m in methods if _method(m) == f[2]), methods[0])
            what = (f"{f[2]} reported the failure, a start-up function" if ran.fields.get("failed_function")
                    else f"the worker failed while running {f[2]}, a start-up method")
            return PhaseAnswer("startup", what, conf.VERY_HIGH, [ran] + tbs[:1])
        return PhaseAnswer("startup", f"the failing stack is in start-up code ({f[2]} in {short_path(f[0])})",
                           conf.VERY_HIGH, tbs[:2])
    called = _cut_stack_call(tbs, vocab)
    if called is not None:
        tb, name = called
        return PhaseAnswer("startup", f"the excerpt's stack stops at a call of {name}, a start-up function "
                                      "(its own frames are cut off)", conf.FAIRLY_HIGH, [tb])
    run_frames = [f for f in stack if vocab.is_runtime(f)]
    if not run_frames and ctx.engine not in _LOAD_ON_REQUEST:
        run_frames = [f for f in stack if vocab.handles_request(f)]
    if run_frames:
        f = run_frames[0]
        where = "a serving-loop method" if f[0] == "<worker method>" else short_path(f[0])
        return PhaseAnswer("runtime", f"the failing stack is in the serving loop ({f[2]} in {where})",
                           conf.FAIRLY_HIGH, (methods[:1] if f[0] == "<worker method>" else []) + tbs[:2],
                           _uptime(anchor), request_work=True)
    step = _step_failure(ctx, anchor)
    if step is not None:
        return PhaseAnswer("runtime", f"the engine failed a model step for scheduled requests ({step.where}): the "
                                      "serving loop", conf.FAIRLY_HIGH, [step], _uptime(anchor), request_work=True)
    life = str(anchor.fields.get("phase") or "unknown")
    elsewhere = _served_elsewhere(ctx, anchor)
    if life != "serving" and elsewhere is not None:
        return PhaseAnswer("runtime", f"another source shows the server serving before the failure ({elsewhere.where})",
                           conf.MEDIUM_HIGH, [elsewhere], _uptime(anchor), request_work=True)
    if life == "serving":
        served = ctx.last_before(Kind.REQUEST_SERVED.value, anchor, True) + ctx.last_before(Kind.STATS.value, anchor, True)
        return PhaseAnswer("runtime", "the server had already served requests before the failure", conf.HIGH,
                           sorted(served, key=lambda e: e.seq)[-1:], _uptime(anchor), request_work=True)
    if life == "ready":
        ready = ctx.last_before(Kind.STARTUP_COMPLETE.value, anchor, True)
        if ctx.engine in _LOAD_ON_REQUEST:
            return PhaseAnswer("runtime", "the engine had finished starting (no request seen yet)", conf.MEDIUM,
                               ready[-1:], _uptime(anchor))
        # A started engine holds its weights and pre-sized pools and allocates more only for the
        # requests it runs: an OOM after its ready line, with no start-up step between, came from
        # request work even when the log has no request lines (servers log requests at debug level).
        return PhaseAnswer("runtime", "the engine had finished starting and logged no start-up step after it (no "
                                      "request line either): a started engine allocates for the requests it runs",
                           conf.MEDIUM, ready[-1:], _uptime(anchor), request_work=True)
    bar = _progress_bar_beside(ctx, anchor)
    if bar is not None:
        return PhaseAnswer("runtime", f"an offline batch's progress bar beside the failure ({bar.where}) shows the "
                                      "engine generating: the bar is drawn only once the engine has started, and is "
                                      "written apart from the traceback", conf.MEDIUM_HIGH, [bar], _uptime(anchor),
                           request_work=True)
    loop_died = [d for d in ctx.ev.of(Kind.ENGINE_DEAD) if d.fields.get("scope") != "process" and _near(anchor, d)]
    if life == "starting":
        marks = [e for e in ctx.ev if e.source == anchor.source and e.seq < anchor.seq
                 and e.kind in ("weights_loaded", "memory_profile", "kv_capacity", "startup_begin", "launch_config")]
        # A pasted launch command is no start-up line of its own: with nothing else between it and
        # the failure, the engine loop's own death report beside the failure decides.
        only_command = all(m.kind == Kind.LAUNCH_CONFIG.value for m in marks)
        if not (only_command and loop_died):
            return PhaseAnswer("startup", "only start-up lines precede the failure (the server never served)",
                               conf.FAIRLY_HIGH, marks[-1:])
    if ctx.engine not in _LOAD_ON_REQUEST and _ERROR_BODY.search(anchor.text or "") \
            and not _start_failure_on_its_line(ctx, anchor):
        return PhaseAnswer("runtime", f"the out-of-memory is the body of an API error answer ({anchor.where}): a "
                                      "request was being served when it happened", conf.FAIRLY_HIGH, [anchor],
                           _uptime(anchor), request_work=True)
    answered = _error_answers(ctx, anchor)
    if answered is not None:
        return PhaseAnswer("runtime", f"the API answered inference requests with server errors beside the failure "
                                      f"({answered.where}): it failed while serving them", conf.MEDIUM_HIGH, [answered],
                           _uptime(anchor), request_work=True)

    unloaded = _held_almost_nothing(anchor)
    if unloaded is not None:
        return PhaseAnswer("startup", unloaded, conf.MEDIUM_HIGH, [anchor])

    dead = ctx.ev.of(Kind.ENGINE_DEAD, Kind.REQUEST_FAILED)
    failed = ctx.ev.of(Kind.ENGINE_START_FAILED)
    if failed and not dead:
        return PhaseAnswer("startup", f"the engine reported it failed to start ({failed[0].where})", conf.HIGH,
                           failed[:1])
    if dead and not failed:
        requests = [d for d in dead if d.kind == Kind.REQUEST_FAILED.value]
        if requests:
            return PhaseAnswer("runtime", f"a request failed while it was being served ({requests[0].where})", conf.FAIRLY_HIGH,
                               requests[:1], request_work=True)
        loop = [d for d in dead if d.fields.get("scope") != "process"]
        if loop:
            return PhaseAnswer("runtime", f"the engine loop died of it ({loop[0].where}): the loop runs the scheduled "
                                          "requests' steps", conf.FAIRLY_HIGH, loop[:1], request_work=True)
        return PhaseAnswer("runtime", f"the running engine died ({dead[0].where}): it had started serving", conf.MEDIUM_HIGH,
                           dead[:1])
    leaning = [f for f in stack if f[2] in vocab.startup_leaning]
    if leaning:
        f = leaning[0]
        named = next((m for m in methods if _method(m) == f[2]), None)
        return PhaseAnswer("startup", f"{f[2]} failed, a step a server runs while it starts (and only now and then "
                                      "again while serving), and nothing shows the server serving", conf.TENTATIVE,
                           [named] if named is not None else tbs[:1])
    return PhaseAnswer("unknown", "nothing in the evidence says whether the server had started serving", conf.NONE,
                       tbs[:1])


# An HTTP API's error answer carrying the failure as its message: OpenAI-style
# `{"object": "error", "message": ...}`, `{"error": {"message": ...}}` / `{"error": "..."}`, or an
# SSE `data: {"error": ...}` event, possibly escaped once inside a quoted paste, or printed by a
# Python client as a dict (`Error code: 500 - {'object': 'error', ...}`), or by a JavaScript
# client as an object literal whose message line starts `msg: '...` / `message: "...`.
_ERROR_BODY = lazy(r"""\{\s*\\?["'](?:object\\?["']\s*:\s*\\?["']error\\?["']|error\\?["']\s*:\s*[{"'\\])"""
                   r"""|^\s{0,12}(?:msg|message|detail|error)\s?:\s?['"]""")


def _start_failure_on_its_line(ctx: Context, anchor: Evidence) -> bool:
    """The error answer carrying the OOM also says the engine or its runner failed to start (Ollama
    answers a request whose model load failed with "llama runner process has terminated: ..."):
    the request only asked for a model that could not be brought up."""
    return any(rec.source == anchor.source and rec.line == anchor.line for rec in ctx.ev.of(Kind.ENGINE_START_FAILED))


def _cut_stack_call(tbs: Sequence[Evidence], vocab) -> tuple[Evidence, str] | None:
    """A traceback cut before its exception line whose innermost frame's source line calls a
    start-up function: the call in progress is that function (its frames are what the excerpt lost)."""
    from .frames import calls_in

    for tb in tbs:
        if tb.fields.get("exception"):
            continue
        frames = tb.fields.get("frames") or []
        for name in calls_in(frames[-1]) if frames else ():
            if name in vocab.startup:
                return tb, name
    return None


# Engines that load (or swap in) a model when a request names it.
_LOAD_ON_REQUEST = frozenset({"ollama", "xinference", "localai"})


def _progress_bar_beside(ctx: Context, anchor: Evidence) -> Evidence | None:
    """A progress bar of requests processed (an offline batch) near the failure, before or after it:
    a bar is redrawn in place on another stream, so its last state often lands after the traceback."""
    for rec in ctx.ev.of(Kind.REQUEST_SERVED):
        if rec.fields.get("progress_bar") and _near(anchor, rec) and not _restart_between(ctx, anchor, rec):
            return rec
    return None


def _near(anchor: Evidence, rec: Evidence) -> bool:
    return rec.source == anchor.source and (rec.line is None or anchor.line is None
                                            or abs(rec.line - anchor.line) <= SAME_FAILURE_LINES)


def _worker_methods(ctx: Context, anchor: Evidence) -> list[Evidence]:
    """Worker-wrapper records naming the method that raised, and failure lines naming the native
    function that reported them, beside the failure."""
    named = [rec for rec in ctx.ev.of(Kind.EXCEPTION) if _method(rec)]
    named += [rec for rec in ctx.ev if rec.kind != Kind.EXCEPTION.value and rec.fields.get("failed_function")]
    return [rec for rec in named if _near(anchor, rec) and not _restart_between(ctx, anchor, rec)]


def _method(rec: Evidence) -> str:
    """The worker method a wrapper record names (its wordings fill different fields), or the native
    function that reported a failure under its own name."""
    return str(rec.fields.get("worker_method") or rec.fields.get("worker_method2") or rec.fields.get("worker_method3")
               or rec.fields.get("worker_method4") or rec.fields.get("failed_function") or "")


def _error_answers(ctx: Context, anchor: Evidence) -> Evidence | None:
    """The API answering an inference request with a 5xx beside the failure: a request was being
    served when it happened (a probe's or listing's error says nothing of the kind). Servers that
    load a model on its first request (Ollama and other model-swapping wrappers) answer 500 when
    that load fails too, so there it says nothing about the phase."""
    if ctx.engine in _LOAD_ON_REQUEST:
        return None
    for rec in ctx.ev.of(Kind.REQUEST_SERVED):
        status = rec.fields.get("status")
        if not (isinstance(status, int) and status >= 500) or rec.source != anchor.source:
            continue
        if str(rec.fields.get("method", "POST")).upper() in ("GET", "HEAD", "OPTIONS"):
            continue
        if _near(anchor, rec) or (rec.line is not None and anchor.line is not None and rec.line > anchor.line):
            return rec
    return None


def _step_failure(ctx: Context, anchor: Evidence) -> Evidence | None:
    """A failed model step (vLLM's failed-execution dump, TensorRT-LLM's forward error, mistral.rs's
    step error) next to the OOM, in the same source and with no engine start between them."""
    for rec in ctx.ev.of(Kind.STEP_FAILED):
        if rec.source != anchor.source:
            continue
        if rec.line is None or anchor.line is None or abs(rec.line - anchor.line) <= SAME_FAILURE_LINES:
            if not _restart_between(ctx, anchor, rec):
                return rec
    return None


def _restart_between(ctx: Context, a: Evidence, b: Evidence) -> bool:
    """A new engine start (config line, weight loading) between two records of one source."""
    lo, hi = sorted((a.seq, b.seq))
    return any(r.source == a.source and lo < r.seq < hi and (
        r.kind in ("startup_begin", "engine_version", "weights_loaded")
        or (r.kind == "launch_config" and r.fields.get("origin") == "engine config")) for r in ctx.ev)


def _served_elsewhere(ctx: Context, anchor: Evidence) -> Evidence | None:
    """Serving evidence in another file (e.g. the API server's log beside the engine's) between the
    start of the anchor's lifecycle and the failure; needs times on both."""
    if anchor.time is None:
        return None
    since = None
    if isinstance(anchor.fields.get("uptime_s"), (int, float)):
        since = anchor.time.timestamp() - float(anchor.fields["uptime_s"])
    for rec in ctx.ev.of(Kind.REQUEST_SERVED, Kind.STATS):
        if rec.source == anchor.source or rec.time is None or rec.time >= anchor.time:
            continue
        if since is not None and rec.time.timestamp() < since:
            continue
        if rec.kind == Kind.STATS.value and not any((rec.fields.get(k) or 0) > 0 for k in ("running", "prompt_tps")):
            continue
        if rec.kind == Kind.REQUEST_SERVED.value and (rec.fields.get("status") or 0) >= 500:
            continue           # an error answer shows a server up, not one serving
        return rec
    return None


def _held_almost_nothing(anchor: Evidence) -> str | None:
    """Why the failing process had not brought its engine up yet: the allocator's own message shows
    it held almost nothing of the card, where a serving engine holds its weights and its pre-sized KV
    pool. The process's whole use ("this process has X memory in use", non-PyTorch memory included)
    is read where the message gives it: an engine whose weights live outside PyTorch's allocator
    holds them all the same. None when the message does not say, or says otherwise."""
    total = anchor.fields.get("capacity_bytes")
    held, what = anchor.fields.get("self_bytes"), "in use by the process"
    if not isinstance(held, (int, float)):
        held, what = anchor.fields.get("allocated_bytes"), "allocated through PyTorch"
    if not (isinstance(held, (int, float)) and isinstance(total, (int, float)) and total > 0):
        return None
    if held >= UNLOADED_ALLOCATED_SHARE * total:
        return None
    return (f"the failing process held {format_bytes(held)} of the {format_bytes(total)} card ({what}, "
            f"{anchor.where}): a serving engine holds its weights and KV cache, so it had not finished starting")


def _uptime(anchor: Evidence) -> float | None:
    up = anchor.fields.get("uptime_s")
    return float(up) if isinstance(up, (int, float)) else None

