"""No OOM: the evidence shows a server working normally and no failure of any kind.

**Signature**: start-up lines that complete (weights loaded, KV cache sized, graphs captured,
routes up) and/or serving lines (requests, stats), with no error — for every engine the signature
data knows (vLLM stats and offline progress, SGLang batch lines, TGI shards and requests, lmdeploy
and TensorRT-LLM sizing and stats, llama.cpp/Ollama loading and slots), busy or not: a KV cache at
95% with a queue that never failed is a busy server, not an incident.
**Not to be confused with**: an excerpt with nothing recognisable at all — that is `unknown`,
since the failure may simply not be in it (one with only the engine's version and configuration,
or with start-up steps that never reach "up", leans healthy below the confident level and asks
for the rest of the start-up). Nor with an input that was cut short or could not be read (a `.gz`
whose stream ends early, an archive member cut off, a file refused as damaged): what is missing
is often the end, where the failure is, so it is `unknown`, naming the file.
"""
from __future__ import annotations

from ..evidence.kinds import HEALTHY_KINDS, SERVING_KINDS, Kind
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..model import Evidence, OomClass, SourceInfo
from .base import Assessment, Branch, ClassSpec

SPEC = ClassSpec(id=OomClass.NO_OOM, label="no OOM found", short_label="healthy", colour="green",
                 branch=Branch.HEALTHY)
QUESTION = "Does the evidence show a working server?"
_HEALTHY = frozenset(k.value for k in HEALTHY_KINDS)
_SERVING = frozenset(k.value for k in SERVING_KINDS)


# What an engine prints before it does any work: its version, its configuration, "starting".
_CONFIGURING = frozenset({Kind.ENGINE_VERSION.value, Kind.LAUNCH_CONFIG.value, Kind.STARTUP_BEGIN.value})

# Inputs whose error says nothing about the incident's evidence (the bundle's own metadata).
_METADATA_KINDS = frozenset({"incident"})


def cut_inputs(ctx: Context) -> list[tuple[SourceInfo, Evidence | None]]:
    """Inputs cut short or not readable (whole or in part), each with the last record read from
    it (None when nothing was): the evidence may lack what came after."""
    out = []
    for src in ctx.ev.sources:
        if src.error is None or src.kind in _METADATA_KINDS:
            continue
        own = [e for e in ctx.ev.items if e.source == src.path and e.line]
        out.append((src, max(own, key=lambda e: e.line) if own else None))
    return out


def describe_cut(src: SourceInfo, last: Evidence | None) -> str:
    """What is missing from one damaged input, for the attach list."""
    if src.records and last is not None:
        read = (f"the last record read from it is line {last.line} ({src.records} records); "
                "whatever came after the cut is missing")
    elif src.records:
        read = f"{src.records} records read; the rest is missing"
    else:
        read = "nothing usable was read from it"
    return f"{src.path} complete and uncut — it was cut short or unreadable ({src.error}): {read}"


def assess(ctx: Context) -> Assessment:
    if ctx.any_failure:
        return Assessment(SPEC.id, conf.NONE, "", "a failure is in the evidence")
    cut = cut_inputs(ctx)
    if cut:
        names = ", ".join(src.path for src, _ in cut)
        why = (f"cannot tell: {names} {'was' if len(cut) == 1 else 'were'} cut short or unreadable, "
               "and the failure may be in what is missing")
        return Assessment(SPEC.id, conf.NONE, "", why, [last for _, last in cut if last is not None],
                          attach=[describe_cut(src, last) for src, last in cut])
    healthy = [e for e in ctx.ev if e.kind in _HEALTHY]
    if not healthy:
        return Assessment(SPEC.id, conf.NONE, "", "nothing recognisable in the evidence")
    served = [e for e in healthy if e.kind in _SERVING and not _failed_request(e)]
    complete = [e for e in healthy if e.kind == Kind.STARTUP_COMPLETE.value]
    if served:
        why, level = f"the server was serving ({len(served)} request/stats lines) and nothing failed", conf.VERY_HIGH
        if all(e.kind == Kind.PREEMPTION.value for e in served):
            # Only the scheduler's back-pressure is in the excerpt: requests were running (a
            # preemption needs them), and it handled a full KV cache the way it is built to.
            why = (f"the scheduler preempted requests ({len(served)} line(s)) to make room in the KV cache, "
                   "which it handles without failing, and nothing failed")
            level = conf.MEDIUM_HIGH
    elif complete:
        why, level = "start-up completed normally and nothing failed", conf.HIGH
    elif all(e.kind in _CONFIGURING for e in healthy):
        # Only the engine's version and configuration, and nothing failed in them: the engine was
        # starting normally as far as the excerpt goes. A lean, not an all-clear (below CONFIDENT):
        # start-up failures come after these lines, and the excerpt stops before weights or memory.
        why = ("the engine printed its version and configuration and nothing failed; the excerpt stops before "
               "it loaded weights or sized memory, where start-up failures happen")
        return Assessment(SPEC.id, conf.TENTATIVE, "No OOM in the excerpt: " + why, why, [healthy[0]],
                          attach=["the rest of the start-up log (weight loading, KV-cache sizing, the first request "
                                  "or the error that ended it)"])
    else:
        # Start-up steps and no failure read, but the start never completed in the excerpt: start-up
        # is where failures happen, and one in words no reader knows would look exactly like this.
        # A lean, below the confident level, as for configuration lines alone.
        why, level = ("start-up was progressing normally (no error in the excerpt), but the excerpt ends before "
                      "the engine said it was up"), conf.TENTATIVE_STRONG
    key = (served or complete or healthy)
    return Assessment(SPEC.id, level, "No OOM: " + why, why, [key[0], key[-1]] if len(key) > 1 else key[:1])


def _failed_request(rec: Evidence) -> bool:
    """An access line that answered an error: not a sign of a working server."""
    status = rec.fields.get("status")
    return rec.kind == Kind.REQUEST_SERVED.value and isinstance(status, int) and status >= 500
