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
from ..model import Cause, Evidence, OomClass
from ..thresholds import EVICTABLE_SHARE, LOW_HIT_RATE
from .base import Assessment, pct
from .causes import detect
from .context import Context
from .knowledge import has_hit_rate, prefix_caching_enabled, prefix_caching_opted_in
from .phase import PhaseAnswer

CLASS = OomClass.PREFIX_CACHE
RUNTIME_RANK = 0               # the most specific runtime class: wins ties


def pool_not_evicted(ctx: Context) -> Cause | None:
    for rec in ctx.ev.of(Kind.KV_POOL_OOM):
        f = rec.fields
        if f.get("engine") == "vllm" and prefix_caching_enabled(ctx):
            return Cause("prefix_cache_pressure",
                         "KV block pool exhausted with prefix caching on: no cached block left to evict", (rec,),
                         "the block manager found no free or evictable block for a running sequence")
        avail, free, evictable = f.get("available_tokens"), f.get("free_tokens"), f.get("evictable_tokens")
        if avail and evictable is not None and free is not None and evictable >= EVICTABLE_SHARE * avail:
            return Cause("prefix_cache_pressure",
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


def stall(ctx: Context) -> Assessment | None:
    """Thrashing without an OOM: prefix caching on, hit rate low, KV usage pinned near 100% while
    running requests collapse and the queue grows (formats.md: KV pressure, not an allocator OOM)."""
    if not prefix_caching_enabled(ctx):
        return None
    readings = _load_readings(ctx)
    if not readings:
        return None
    kv, running, waiting, rec = readings[-1]
    low = low_hit_rate(ctx, None)
    if kv < 0.98 or low is None:
        return None
    peak_running = max(r for _, r, _, _ in readings)
    if len(readings) >= 3:
        collapsed = peak_running >= 4 and running <= 0.25 * peak_running and waiting >= max(1, running)
    else:   # a single snapshot: the queue must dwarf what runs
        collapsed = waiting >= 10 * max(1.0, running)
    if not collapsed:
        return None
    cause = Cause("prefix_cache_pressure",
                  f"Prefix cache crowding out live requests: KV cache {pct(kv)} full with {int(running)} running "
                  f"(peak {int(peak_running)}) and {int(waiting)} waiting; hit rate {pct(low[0])}",
                  (rec, low[1]), "cached prefix blocks hold the KV pool; sequences are preempted instead of served")
    causes = [cause] + detect(ctx, "known_engine_bug", oom_class=CLASS.value)
    conf = 0.7 if len(causes) > 1 or prefix_caching_opted_in(ctx) else 0.6
    return Assessment(CLASS, conf, "Prefix-cache thrashing (no OOM line yet): " + cause.title, cause.title,
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
        return Assessment(CLASS, 0.0, "", "it failed during start-up")
    oom = ctx.primary
    pool = pool_not_evicted(ctx)
    if pool is not None:
        causes = [pool] + detect(ctx, "known_engine_bug", oom_class=CLASS.value)
        return Assessment(CLASS, 0.8, f"Prefix-cache OOM: {pool.title}", pool.detail, [*pool.evidence], causes, [])
    enabled = prefix_caching_enabled(ctx)
    if not enabled or oom is None:
        return Assessment(CLASS, 0.0, "", "prefix caching is off or unknown" if not enabled else "no OOM")
    low = low_hit_rate(ctx, oom)
    bug = detect(ctx, "known_engine_bug", oom_class=CLASS.value)
    prefix_bug = [c for c in bug if "prefix" in c.title.lower()]
    if low is None and not prefix_bug:
        known = has_hit_rate(ctx)
        why = "prefix caching is on but its hit rate is not low" if known else \
              "prefix caching is on; the evidence has no hit rate to judge it by"
        attach = [] if known else ["stats lines or /metrics with the prefix-cache hit rate"]
        return Assessment(CLASS, 0.0, "", why, attach=attach)
    causes: list[Cause] = []
    evidence: list[Evidence] = [oom]
    confidence = 0.45
    if low is not None:
        causes.append(Cause("prefix_cache_pressure",
                            f"Prefix cache thrashing: hit rate {pct(low[0])} (below {LOW_HIT_RATE:.0%}) with caching on",
                            (low[1],), "cached prefixes are rarely reused but keep their KV blocks"))
        evidence.append(low[1])
        # vLLM V1 turns prefix caching on by default and evicts cached blocks under pressure: a low
        # hit rate there is common and weighs less than one the operator opted into (V0, explicit flag).
        opted_in = prefix_caching_opted_in(ctx) or ctx.engine_mode == "v0"
        confidence = 0.7 if opted_in else 0.5
    causes += bug
    if prefix_bug:
        confidence += 0.15
    if phase.phase == "unknown":
        confidence -= 0.1
    summary = "Prefix-cache OOM: " + "; ".join(c.title for c in causes[:2])
    attach = [] if low is not None else ["stats lines or /metrics with the prefix-cache hit rate"]
    why = "; ".join(c.title for c in causes[:2])
    return Assessment(CLASS, round(min(confidence, 0.92), 2), summary, why, evidence, causes, attach)
