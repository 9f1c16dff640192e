"""Runtime burst OOM: a healthy server overwhelmed by a spike (long prompts, many prefills).

**Signature**: a GPU OOM while serving — serving-loop frames, a failed step or request, requests
or stats before it, or the engine's own runtime wording (SGLang's prefill/decode pool OOM and an
unrecovered retraction, TGI's Prefill/Decode errors, TensorRT-LLM's forward error) — that
nothing ties to chronic or prefix-cache. It is the default runtime class; its confidence says how
much load evidence there was: KV-cache usage near 100%, a waiting queue growing, preemptions,
one oversized allocation, an allocator message showing the memory really in use.
**Not to be confused with**: chronic fragmentation (reserved-but-unallocated at least the failed
request and a real share of the card) and a prefix-cache OOM (evidence tying the failure to the
cache: a low hit rate alone is not). A quiet server with a small failed allocation, prefix caching
turned on with nothing showing load, a borderline allocator reading, or an engine merely reported
dead keep it from being named (`unknown`). Its advice is runtime_levers': what grew outside the
pre-sized KV cache, by how much.
**Recovery**: runbooks/burst.yaml
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..flowchart import allocator
from ..flowchart import causes as shared
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.incident import Incident
from ..flowchart.knowledge import prefix_cache_unjudged, prefix_caching_enabled, prefix_caching_opted_in
from ..flowchart.phase import PhaseAnswer
from ..model import Cause, Evidence, OomClass, Recommendation, Verdict
from ..thresholds import KV_BUSY, KV_HIGH, OVERSIZED_SHARE, QUIET_KV, SPIKE_ALLOCATION_BYTES, SPIKE_ALLOCATION_SHARE
from ..units import format_bytes
from .base import Assessment, Branch, CauseSpec, ClassSpec, pct
from .prefix_cache import low_hit_rate
from .settings import as_whole, current

LOAD_SPIKE = CauseSpec("long_prompt_burst", "a load spike or an oversized request",
                       ("kv_high", "kv_busy", "quiet_kv", "oversized_request_share"))
SHARED_CAUSES = (shared.CONCURRENCY_MISJUDGED, shared.ACCOUNTING_DISCREPANCY, shared.KNOWN_ENGINE_BUG)
SPEC = ClassSpec(
    id=OomClass.BURST, label="runtime burst OOM", short_label="burst OOM", colour="red", branch=Branch.RUNTIME,
    causes=(LOAD_SPIKE, *SHARED_CAUSES),
    runtime_rank=2,              # the generic runtime class: loses ties
    generic=True, specificity=3)
# A runtime OOM named burst by default (nothing supports another class) is tentative: stronger when
# the phase answer was this direct (serving-loop frames, a failed step, the engine's own wording).
STRONG_PHASE = conf.FAIRLY_HIGH


def load_signals(ctx: Context, anchor: Evidence | None) -> tuple[list[str], list[Evidence]]:
    """Pressure just before the failure: KV usage high, queue growing, preemptions."""
    notes: list[str] = []
    used: list[Evidence] = []
    stats = ctx.last_before(Kind.STATS.value, anchor)[-12:]
    kv = [(s.fields["kv_usage"], s) for s in stats if s.fields.get("kv_usage") is not None]
    metrics_kv = [(m.fields["value"], m) for m in ctx.last_before(Kind.METRIC.value, anchor)
                  if m.fields.get("name") == "kv_cache_usage" and m.fields.get("value") is not None][-6:]
    peak = max(kv + metrics_kv, key=lambda x: x[0], default=None)
    if peak and peak[0] >= KV_HIGH:
        notes.append(f"KV-cache usage reached {pct(peak[0])}")
        used.append(peak[1])
    waiting = [s for s in stats if s.fields.get("waiting") is not None]
    if len(waiting) >= 2 and waiting[-1].fields["waiting"] > waiting[0].fields["waiting"] \
            and waiting[-1].fields["waiting"] >= max(1.0, waiting[-1].fields.get("running") or 0):
        notes.append(f"waiting queue grew {int(waiting[0].fields['waiting'])} -> {int(waiting[-1].fields['waiting'])}")
        used.append(waiting[-1])
    elif waiting and _saturated(waiting[-1].fields) and not _cache_thrashing(ctx, anchor):
        # One reading is enough when it shows a full cache with requests the scheduler could not
        # admit: the server was at its limit when it failed, whatever the trend.
        last = waiting[-1].fields
        notes.append(f"{int(last['waiting'])} requests waiting behind {int(last.get('running') or 0)} running "
                     f"at {pct(last['kv_usage'])} KV-cache usage")
        used.append(waiting[-1])
    preempt = ctx.last_before(Kind.PREEMPTION.value, anchor)
    preempt_stats = [s for s in stats if (s.fields.get("preemptions") or 0) > 0]
    counters = [m for m in ctx.last_before(Kind.METRIC.value, anchor) if m.fields.get("name") == "preemptions_total"]
    rising = len(counters) >= 2 and counters[-1].fields["value"] > counters[0].fields["value"]
    if preempt or preempt_stats or rising:
        src = (preempt or preempt_stats or counters)[-1]
        notes.append("requests were preempted for lack of KV-cache space")
        used.append(src)
    return notes, used


def _cache_thrashing(ctx: Context, anchor: Evidence | None) -> bool:
    """Prefix caching on with a low hit rate: a full cache with a queue is then what a prefix-cache
    OOM looks like too, so one such reading does not count for a burst."""
    return prefix_caching_enabled(ctx) is not False and low_hit_rate(ctx, anchor) is not None


def _saturated(fields) -> bool:
    kv = fields.get("kv_usage")
    return (fields.get("waiting") or 0) >= 1 and kv is not None and KV_BUSY <= kv < KV_HIGH


def quiet_before(ctx: Context, anchor: Evidence | None) -> str | None:
    """The last stats line before the failure, if it shows an idle-ish server (KV < 50%, no queue)."""
    stats = [s for s in ctx.last_before(Kind.STATS.value, anchor)
             if s.fields.get("kv_usage") is not None or s.fields.get("request_share") is not None]
    if not stats:
        return None
    last = stats[-1].fields
    if last.get("kv_usage") is not None:
        if last["kv_usage"] < QUIET_KV and not last.get("waiting"):
            return f"KV usage {pct(last['kv_usage'])}, nothing waiting"
        return None
    if last["request_share"] < QUIET_KV:
        # The request being served when it failed used a small part of its context window.
        return f"the request being served needed {pct(last['request_share'])} of its context window"
    return None


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    """A GPU OOM while serving is a burst unless the evidence says otherwise (the chronic and
    prefix-cache modules speak for "otherwise"). The confidence says how much load evidence
    there was: stats/metrics showing pressure, an oversized allocation, or allocator numbers
    showing the memory was really in use. With none of those it is still named, below a confident
    answer, with what to attach to confirm it."""
    oom = ctx.primary
    if oom is None or phase.phase == "startup":
        return Assessment(SPEC.id, conf.NONE, "", "it did not fail while serving")
    if oom.kind == Kind.POOL_LEAK.value:
        return Assessment(SPEC.id, conf.NONE, "", "the engine's leak check failed: accounting drift, not load")
    notes, used = load_signals(ctx, oom)
    tried, capacity = oom.fields.get("tried_bytes"), oom.fields.get("capacity_bytes")
    if phase.phase == "runtime" and tried and capacity and tried >= OVERSIZED_SHARE * capacity:
        # One allocation this large is one oversized request (a huge prompt or image), not load.
        notes.append(f"one allocation of {format_bytes(tried)} ({tried / capacity:.0%} of the card): an oversized request")
        used.append(oom)
    causes: list[Cause] = []
    confidence = conf.NONE
    if notes:
        causes.append(Cause(LOAD_SPIKE.id, "Load spike or oversized request: " + "; ".join(notes), tuple(used)))
        confidence = conf.MEDIUM + conf.BIG_STEP * len(notes)
    alloc = allocator.reading(oom)
    if phase.phase == "unknown" and not causes:
        # Without a phase, only load signals point at a burst; the allocator's numbers merely
        # rule fragmentation in or out.
        return Assessment(SPEC.id, conf.NONE, "", "nothing shows it was serving under load",
                          attach=["the log lines before the OOM (start-up lines, or requests/stats showing load)"])
    unsure: list[str] = []
    if phase.phase == "runtime" and not phase.request_work and not causes:
        # The engine was running, but nothing ties the failure to request work or load: the
        # allocator's numbers alone rule fragmentation out, not in a spike.
        unsure.append("nothing ties the failure to requests being served (only that the engine had started)")
    if alloc is not None and alloc.borderline:
        unsure.append(alloc.describe())
    elif alloc is not None and not alloc.fragmented:
        notes.append(alloc.describe())
        if not _cache_thrashing(ctx, oom):
            # Memory in use rules fragmentation out; with a thrashing prefix cache, cached blocks are
            # memory in use too, so the reading does not tell a spike from the cache.
            confidence = max(confidence, conf.MEDIUM) + (conf.STEP if causes else 0)
        elif not causes:
            confidence = conf.TENTATIVE_STRONG if phase.strength >= STRONG_PHASE else conf.TENTATIVE_WEAK
    if not notes:
        confidence = conf.TENTATIVE_STRONG if phase.strength >= STRONG_PHASE else conf.TENTATIVE_WEAK
    if not any(c.id == LOAD_SPIKE.id for c in causes) and prefix_cache_unjudged(ctx):
        # The operator turned the cache on (or the engine never reports on it) and nothing shows load:
        # whether the cache's code was involved is not in the evidence.
        unsure.append("prefix caching is on and nothing in the evidence shows the cache's state")
    quiet = quiet_before(ctx, oom)
    if quiet is not None and not any(c.id == LOAD_SPIKE.id for c in causes):
        # The KV cache is allocated up front, so how full it was is not the load that ran out of
        # memory. One step's large allocation is: a serving-loop OOM of that size at a half-empty
        # cache is a spike outside the cache. A small one there is memory that grew some other way.
        if phase.phase == "runtime" and tried and tried >= (SPIKE_ALLOCATION_SHARE * capacity if capacity
                                                            else SPIKE_ALLOCATION_BYTES):
            share = f" ({tried / capacity:.1%} of the card)" if capacity else ""
            notes.append(f"the KV cache was not the limit ({quiet}): one step's {format_bytes(tried)} allocation "
                         f"outside it{share} did not fit")
        else:
            unsure.append(f"the last stats before it show little load ({quiet})")
    if not any(c.id == LOAD_SPIKE.id for c in causes) and prefix_caching_opted_in(ctx) \
            and low_hit_rate(ctx, oom) is not None:
        # The operator turned the cache on and it was rarely hit: with no load to explain the OOM,
        # the cache is not ruled out, though its hit rate alone does not tie the failure to it.
        unsure.append("prefix caching was turned on and rarely hit, and nothing shows load")
    if unsure and not any(c.id == LOAD_SPIKE.id for c in causes):
        # Another explanation fits as well as a spike and no load evidence tips it: not named.
        confidence = min(confidence, conf.UNNAMED)
    notes += ["but " + u for u in unsure]
    if phase.phase == "unknown":
        confidence -= conf.BIG_STEP
    causes += shared.detect(ctx, *SHARED_CAUSES, oom_class=SPEC.id.value)
    confidence = min(conf.CEILING, confidence)
    attach = [] if len(notes) >= 2 and confidence >= conf.MEDIUM else [
        "/metrics scrapes or the stats lines from the minutes before the OOM (KV usage, running/waiting, preemptions)"]
    if any("prefix caching is on" in u for u in unsure):
        attach.append("the failure's whole traceback and the stats lines or /metrics before it (KV usage and running "
                      "requests: blocks held beyond what the running requests need tie it to the prefix cache)")
    if (alloc is None and oom.kind == Kind.TORCH_OOM.value) or (alloc is not None and alloc.borderline):
        attach.append("torch.cuda.memory_stats() or memory_summary() at the OOM (fragmentation or not)")
    summary = "Runtime burst OOM while serving" + (f": {'; '.join(notes)}" if notes else
                                                   " (no load or allocator signals to confirm it)")
    extra = [c for c in causes if c.id != LOAD_SPIKE.id]
    if extra:
        summary += ". Also: " + "; ".join(c.title for c in extra)
    return Assessment(SPEC.id, round(confidence, 2), summary, "; ".join(notes) or phase.why, [oom] + used, causes, attach)


# --- advice ----------------------------------------------------------------------------------------

def recommend(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """What grew outside the pre-sized KV cache, and by how much (runtime_levers). A KV pool that
    ran out (SGLang's, TGI's) is the exception: there the cache itself was the limit, and the
    concurrency it carried sizes the cap."""
    from .concurrency import kv_sized_cap     # only a verdict of this class needs these
    from .runtime_levers import runtime_levers

    out = runtime_levers(incident)
    if incident.failure is not None and incident.failure.kind == Kind.KV_POOL_OOM.value:
        cap = kv_sized_cap(incident.stats_before_failure, as_whole(current(incident, "max_num_seqs")), min_running=4)
        if cap:
            out.append(cap)
    return out
