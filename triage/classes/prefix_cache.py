"""Prefix-cache OOM: cached prefix blocks crowd out the live KV cache.

**Signature**: prefix caching on; a low hit rate (below ~30%: the cache holds prefixes nobody
reuses); KV usage growing with request count; or a token-pool OOM while most of the pool is
held by evictable cached prefixes that were not evicted (SGLang radix cache). Versions with a
known prefix-cache leak make it more likely.
**Not to be confused with**: illegal memory accesses that only happen with prefix caching on
(those are faults: not_gpu_oom), and a plain burst (high hit rate, load spike).
**Recovery**: runbooks/prefix_cache.yaml
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..flowchart import causes as shared
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.incident import Incident
from ..flowchart.knowledge import has_hit_rate, prefix_caching_enabled, prefix_caching_opted_in
from ..flowchart.phase import PhaseAnswer
from ..model import Cause, Evidence, OomClass, Recommendation, Verdict
from ..thresholds import EVICTABLE_SHARE, KV_PINNED, LOW_HIT_RATE
from .base import Assessment, Branch, CauseSpec, ClassSpec, pct
from .settings import as_whole, current

PRESSURE = CauseSpec("prefix_cache_pressure", "cached prefixes crowd out live KV",
                     ("prefix_hit_low", "evictable_share", "kv_pinned"))
SPEC = ClassSpec(
    id=OomClass.PREFIX_CACHE, label="prefix-cache OOM", short_label="prefix-cache OOM", colour="cyan",
    branch=Branch.RUNTIME, causes=(PRESSURE, shared.KNOWN_ENGINE_BUG),
    runtime_rank=0,              # the most specific runtime class: wins ties
    specificity=0, early_question="Is the prefix cache starving live requests?")
# A stall: running requests fell to this share of their peak (of at least STALL_MIN_PEAK) with
# requests waiting; from a single snapshot, the queue must be STALL_QUEUE_FACTOR times what runs.
STALL_RUNNING_SHARE = 0.25
STALL_MIN_PEAK = 4
STALL_QUEUE_FACTOR = 10
HIGH_CONCURRENCY_CAP = 256   # a cap above this, with no running counts to size it from, is halved


def pool_not_evicted(ctx: Context) -> Cause | None:
    for rec in ctx.ev.of(Kind.KV_POOL_OOM):
        f = rec.fields
        if f.get("engine") == "vllm" and prefix_caching_enabled(ctx):
            return Cause(PRESSURE.id,
                         "KV block pool exhausted with prefix caching on: no cached block left to evict", (rec,),
                         "the block manager found no free or evictable block for a running sequence")
        avail, free, evictable = f.get("available_tokens"), f.get("free_tokens"), f.get("evictable_tokens")
        if avail and evictable is not None and free is not None and evictable >= EVICTABLE_SHARE * avail:
            return Cause(PRESSURE.id,
                         f"Prefix cache held the pool: {evictable} of {avail} tokens were cached prefixes, only {free} free",
                         (rec,), f"the batch needed {f.get('requested_tokens', '?')} tokens; the cache was not evicted")
    return None


def low_hit_rate(ctx: Context, anchor: Evidence | None) -> tuple[float, Evidence] | None:
    rates = [(s.fields["prefix_hit_rate"], s) for s in ctx.last_before(Kind.STATS.value, anchor)
             if s.fields.get("prefix_hit_rate") is not None][-10:]
    rates += [(m.fields["value"], m) for m in ctx.last_before(Kind.METRIC.value, anchor)
              if m.fields.get("name") == "prefix_cache_hit_rate" and (m.fields.get("value") or -1) >= 0][-5:]
    if not rates:
        return None
    avg = sum(r for r, _ in rates) / len(rates)
    return (avg, rates[-1][1]) if avg < LOW_HIT_RATE else None


def early(ctx: Context) -> Assessment | None:
    """Thrashing without an OOM: prefix caching on, hit rate low, KV usage pinned near 100% while
    running requests collapse and the queue grows (formats.md: KV pressure, not an allocator OOM)."""
    if not prefix_caching_enabled(ctx):
        return None
    readings = _load_readings(ctx)
    if not readings:
        return None
    kv, running, waiting, rec = readings[-1]
    low = low_hit_rate(ctx, None)
    if kv < KV_PINNED or low is None:
        return None
    peak_running = max(r for _, r, _, _ in readings)
    if len(readings) >= 3:
        collapsed = (peak_running >= STALL_MIN_PEAK and running <= STALL_RUNNING_SHARE * peak_running
                     and waiting >= max(1, running))
    else:   # a single snapshot: the queue must dwarf what runs
        collapsed = waiting >= STALL_QUEUE_FACTOR * max(1.0, running)
    if not collapsed:
        return None
    cause = Cause(PRESSURE.id,
                  f"Prefix cache crowding out live requests: KV cache {pct(kv)} full with {int(running)} running "
                  f"(peak {int(peak_running)}) and {int(waiting)} waiting; hit rate {pct(low[0])}",
                  (rec, low[1]), "cached prefix blocks hold the KV pool; sequences are preempted instead of served")
    causes = [cause] + shared.detect(ctx, shared.KNOWN_ENGINE_BUG, oom_class=SPEC.id.value)
    level = conf.MEDIUM_HIGH if len(causes) > 1 or prefix_caching_opted_in(ctx) else conf.MEDIUM
    return Assessment(SPEC.id, level, "Prefix-cache thrashing (no OOM line yet): " + cause.title, cause.title,
                      [rec, low[1]], causes, [])


def _load_readings(ctx: Context) -> list[tuple[float, float, float, Evidence]]:
    """(kv usage, running, waiting, record) from stats lines, else from /metrics scrapes."""
    out = [(s.fields["kv_usage"], s.fields["running"], s.fields.get("waiting") or 0.0, s)
           for s in ctx.ev.of(Kind.STATS) if s.fields.get("kv_usage") is not None and s.fields.get("running") is not None]
    if out:
        return out
    by_time: dict = {}
    for m in ctx.ev.of(Kind.METRIC):
        name = m.fields.get("name")
        if name in ("kv_cache_usage", "requests_running", "requests_waiting"):
            by_time.setdefault((m.source, m.time), {})[name] = m
    for group in by_time.values():
        if "kv_cache_usage" in group and "requests_running" in group:
            waiting = group.get("requests_waiting")
            out.append((group["kv_cache_usage"].fields["value"], group["requests_running"].fields["value"],
                        waiting.fields["value"] if waiting else 0.0, group["kv_cache_usage"]))
    return out


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    if phase.phase == "startup":
        return Assessment(SPEC.id, conf.NONE, "", "it failed during start-up")
    oom = ctx.primary
    pool = pool_not_evicted(ctx)
    if pool is not None:
        causes = [pool] + shared.detect(ctx, shared.KNOWN_ENGINE_BUG, oom_class=SPEC.id.value)
        return Assessment(SPEC.id, conf.HIGH, f"Prefix-cache OOM: {pool.title}", pool.detail, [*pool.evidence], causes, [])
    enabled = prefix_caching_enabled(ctx)
    if not enabled or oom is None:
        return Assessment(SPEC.id, conf.NONE, "", "prefix caching is off or unknown" if not enabled else "no OOM")
    low = low_hit_rate(ctx, oom)
    bug = shared.detect(ctx, shared.KNOWN_ENGINE_BUG, oom_class=SPEC.id.value)
    prefix_bug = [c for c in bug if "prefix" in c.title.lower()]
    if low is None and not prefix_bug:
        known = has_hit_rate(ctx)
        why = "prefix caching is on but its hit rate is not low" if known else \
              "prefix caching is on; the evidence has no hit rate to judge it by"
        attach = [] if known else ["stats lines or /metrics with the prefix-cache hit rate"]
        return Assessment(SPEC.id, conf.NONE, "", why, attach=attach)
    causes: list[Cause] = []
    evidence: list[Evidence] = [oom]
    confidence = conf.TENTATIVE
    if low is not None:
        causes.append(Cause(PRESSURE.id,
                            f"Prefix cache thrashing: hit rate {pct(low[0])} (below {LOW_HIT_RATE:.0%}) with caching on",
                            (low[1],), "cached prefixes are rarely reused but keep their KV blocks"))
        evidence.append(low[1])
        # vLLM V1 turns prefix caching on by default and evicts cached blocks under pressure: a low
        # hit rate there is common and weighs less than one the operator opted into (V0, explicit flag).
        opted_in = prefix_caching_opted_in(ctx) or ctx.engine_mode == "v0"
        confidence = conf.MEDIUM_HIGH if opted_in else conf.EVEN
    causes += bug
    if prefix_bug:
        confidence += conf.BOOST
    if phase.phase == "unknown":
        confidence -= conf.BIG_STEP
    summary = "Prefix-cache OOM: " + "; ".join(c.title for c in causes[:2])
    attach = [] if low is not None else ["stats lines or /metrics with the prefix-cache hit rate"]
    why = "; ".join(c.title for c in causes[:2])
    return Assessment(SPEC.id, round(min(confidence, conf.CEILING_PREFIX), 2), summary, why, evidence, causes, attach)


# --- advice ----------------------------------------------------------------------------------------

def recommend(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """Prefix caching off while its hit rate is low, and a concurrency cap where the live KV cache was full."""
    from .concurrency import kv_sized_cap    # only a verdict of this class needs it

    out: list[Recommendation] = []
    hit = next((c for c in reversed(incident.stats_before_failure)
                if c.fields.get("prefix_hit_rate") is not None), None)
    seen = (f"the hit rate was {hit.fields['prefix_hit_rate']:.1%} ({hit.where}), " if hit else
            "the log shows no hit rate; ")
    out.append(Recommendation("enable_prefix_caching", True, False,
                              f"the prefix cache holds blocks that are rarely reused: {seen}turn it off while the hit "
                              "rate is below 30% (it pays off for shared system prompts, >60% hit rate)",
                              "incident" if hit else "rule_of_thumb"))
    cur = as_whole(current(incident, "max_num_seqs"))
    # A cap only where the live KV cache was full (otherwise turning the cache off is the fix), sized
    # from the busiest reading of the whole log: by the end, cached prefixes crowd live sequences out.
    cap = kv_sized_cap(incident.stats_before_failure, cur, kv_only=True, window=None)
    if cap:
        out.append(cap)
    elif cur and cur > HIGH_CONCURRENCY_CAP and not any(s.fields.get("running") for s in incident.ev.of(Kind.STATS)):
        out.append(Recommendation("max_num_seqs", cur, cur // 2, "halve the concurrency cap so live sequences keep "
                                  "their KV blocks (rule of thumb: the log shows no running count to size it from)",
                                  "rule_of_thumb"))
    return out
