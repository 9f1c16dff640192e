"""A failure whose evidence never speaks of memory: a lean away from a GPU OOM.

Every runtime that runs out of device memory says so somewhere in what it prints at the failure:
the allocator's message, an engine's capacity check, an allocation that failed, a pool with no
room, a process killed. When a server fails and none of its failure lines, exception messages or
failing frames hold any word of memory, allocation, capacity, caches or kills (and no reading
shows the GPU full), an expert reads the failure as something else: an assertion, a bad
argument, a crash in a kernel. That is a lean, not a finding: the excerpt may have lost the
first report. It is named as such (triage/data/lookalikes.yaml `failure_silent_on_memory`).

Asked only after every reading that derives a GPU OOM from a failure (a memory check's stack, a
KV cache too small) has come up empty, and only when nothing else named the failure.
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..lazyre import lazy
from ..model import Evidence
from .context import Context

# Words by which runtimes speak of memory running short or of a process killed for it, in any
# case they print them; a cache, pool, block, page or slot is the KV store's own vocabulary.
_SHORTAGE_WORDS = lazy(
    r"(?i:memory|\bmem(?!ber)|\boom\b|oom[-_ ]?kill|out ?of|alloc|enough|insufficient|capacit|exhaust|no (?:free )?space"
    r"|killed|sigkill|\b137\b|signal:? ?9\b|too (?:small|large|big|long|many)|\bv?ram\b|buffer|cache|\bkv\b"
    r"|pools?\b|pages?\b|blocks?\b|slots?\b|swap|resource"
    # Runners' wrappers for a load that failed, out of memory as often as not (llama.cpp, Ollama).
    r"|create (?:the )?context|load(?:ing)? (?:the )?model)")
# An error stated with its message: a Python exception, a native assertion, a C++ what(), a panic,
# an `error:` with what it was. A failure line without one (a wrapper, a bare abort) does not say
# what failed, so silence about memory there is no evidence.
_STATED = lazy(r"(?:\b[A-Z][\w.]{0,100}?(?:Error|Exception)|Assertion failed|Assertion `|GGML_ASSERT|what\(\)|\bpanic"
               r"|\b[Ee]rror)\s*[:(]\s*\S[^\n]{11}"
               # a logfmt record's error value (Go servers: Ollama, LocalAI)
               r'|\berr(?:or)?="[^"\n]{12}')
# Wrappers that point at an earlier failure, whatever their exception type: the cause is elsewhere.
_POINTS_ELSEWHERE = lazy(r"(?i:see (?:the )?(?:root cause|above|stack|logs?|error)|original (?:error|exception)|\bdead\b"
                         r"|\bdied\b|hit an exception|while processing|failed to start|initiali[sz]ation failed"
                         r"|finished unexpectedly|encountered an? (?:fatal )?error|background|traceback)")
# An error about one request's input: the API refuses that request (a 4xx) and the server lives on.
_ABOUT_A_REQUEST = lazy(r"(?i:request|prompt|input|template|messages?\b|tokens?\b|part type)")

# Failure records read for those words (the failure itself, and what the engine raised or printed).
FAILURE_KINDS = (Kind.ENGINE_START_FAILED, Kind.ENGINE_DEAD, Kind.REQUEST_FAILED, Kind.PROCESS_DIED,
                  Kind.EXCEPTION, Kind.TRACEBACK, Kind.STEP_FAILED)
# Records that speak of memory pressure by what they are, whatever their words.
PRESSURE_KINDS = (Kind.PREEMPTION, Kind.MEMORY_STATS, Kind.SLEEP_MEMORY, Kind.HOST_MEMORY_GROWTH)
# A GPU reading this full is memory pressure beside the failure.
_FULL_SHARE = 0.9


def open_failures(ctx: Context) -> list[Evidence]:
    """The failures no reading named, when nothing else (a GPU OOM, a look-alike, memory pressure)
    is in the evidence: what a lean may read. Empty otherwise."""
    if ctx.gpu_oom or ctx.not_gpu or ctx.ev.of(*PRESSURE_KINDS):
        return []
    return ctx.other_failures


def quiet_about_memory(ctx: Context) -> bool:
    """No failure record speaks of memory and no GPU reading shows the card full."""
    return not any(speaks_of_memory(e) for e in ctx.ev.of(*FAILURE_KINDS)) and not gpu_full(ctx)


def derived(failures: list[Evidence], kind: Kind, why: str) -> Evidence:
    """A lean's record, placed at the first failure it reads."""
    first = failures[0]
    return Evidence(first.source, first.line, kind.value, first.text, first.time,
                    {"derived": why, "failures": len(failures)}, first.seq)


def failure_silent_on_memory(ctx: Context) -> Evidence | None:
    """The derived record of a failure whose evidence holds no memory words, or None."""
    failures = open_failures(ctx)
    if not failures:
        return None
    tracebacks = ctx.ev.of(Kind.TRACEBACK)
    if any(_cut_short(tb) or tb.fields.get("rejected_request") for tb in tracebacks):
        return None
    if not any(_states_a_cause(e) for e in failures) or not quiet_about_memory(ctx):
        return None
    return derived(failures, Kind.FAILURE_SILENT_ON_MEMORY, "no memory words in any failure line")


def _cut_short(tb: Evidence) -> bool:
    """A traceback whose exception line the excerpt lost: what failed there is not in the evidence."""
    return not tb.fields.get("exception")


def _states_a_cause(rec: Evidence) -> bool:
    if rec.kind == Kind.TRACEBACK.value:
        text = f"{rec.fields.get('exception')}: {rec.fields.get('message') or ''}"
    else:
        text = rec.text or ""
    return bool(_STATED.search(text)) and not _POINTS_ELSEWHERE.search(text) and not _ABOUT_A_REQUEST.search(text)


def points_elsewhere(rec: Evidence) -> bool:
    """A failure whose words point at an earlier one (see above, engine dead, failed to start)."""
    texts = [str(rec.fields.get("message") or "")]
    if rec.kind != Kind.TRACEBACK.value:       # a traceback's own text is its summary, not its words
        texts.append(rec.text or "")
    return any(_POINTS_ELSEWHERE.search(t) for t in texts if t)


def speaks_of_memory(rec: Evidence) -> bool:
    fields = rec.fields
    texts = [rec.text or "", str(fields.get("message") or ""), str(fields.get("exception") or "")]
    texts += [f"{f[0]} {f[2]}" for f in fields.get("frames") or () if len(f) > 2]
    return any(_SHORTAGE_WORDS.search(t) for t in texts if t)


def gpu_full(ctx: Context) -> bool:
    if not ctx.ev.of(Kind.GPU_MEMORY):
        return False
    from .causes import actual_usage    # read only when a GPU reading is in the evidence

    usage = actual_usage(ctx.ev)
    return usage is not None and usage[0] >= _FULL_SHARE
