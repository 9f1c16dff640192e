"""Prefix-cache OOM: the failure is tied to the prefix cache itself.

**Signature**: evidence that ties the failure to the cache: the block pool exhausted or the
engine's own cache accounting failing with caching on (vLLM's `No usable cache memory left`, V1's
`Cannot get N free blocks from the pool`, SGLang's radix-cache leak check); KV blocks held beyond
what the running requests can use; the failing frames in the cache's code; or a prefix-cache bug
of this version confirmed upstream. Cached blocks live inside the pre-sized pool and are evicted
first, so a low hit rate costs prefill time, not memory: it is reported, never the reason.
**Not to be confused with**: illegal memory accesses that only happen with prefix caching on
(those are faults: not_gpu_oom), and a burst at a full KV cache with a low hit rate (saturation).
**Recovery**: runbooks/prefix_cache.yaml
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..flowchart import causes as shared
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.failure_site import failure_site
from ..flowchart.incident import Incident
from ..flowchart.knowledge import prefix_caching_enabled
from ..flowchart.phase import PhaseAnswer
from ..model import Cause, Evidence, OomClass, Recommendation, Verdict
from ..thresholds import EVICTABLE_SHARE, KV_PINNED, LOW_HIT_RATE
from .base import Assessment, Branch, CauseSpec, ClassSpec, pct
from .settings import as_whole

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
    """Seen coming, without an OOM: with prefix caching on, KV blocks held beyond what the running
    requests can use; or, for a version with a confirmed prefix-cache bug, the pool pinned full at a
    low hit rate while running requests collapse and the queue grows."""
    if not prefix_caching_enabled(ctx):
        return None
    held = blocks_outlive_requests(ctx, None)
    bugs = [c for c in shared.detect(ctx, shared.KNOWN_ENGINE_BUG, oom_class=SPEC.id.value) if confirmed_bug(c)]
    if held is None and not bugs:
        # Cached blocks are evicted first: a full cache with a queue is saturation, whatever the hit
        # rate, unless blocks are held that no running request needs or a confirmed bug keeps them.
        return None
    if held is not None:
        return Assessment(SPEC.id, conf.MEDIUM_HIGH, "Prefix-cache blocks held (no OOM line yet): " + held.title,
                          held.title, list(held.evidence), [held] + bugs, [])
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
    causes = [cause] + bugs
    level = conf.MEDIUM_HIGH
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


def cache_accounting_error(ctx: Context) -> Cause | None:
    """The engine's own check found cache slots that nothing holds while its prefix cache is on
    (SGLang's `token_to_kv_pool_allocator memory leak detected` counts free + radix-cached slots):
    the cache's bookkeeping broke."""
    rec = ctx.ev.first(Kind.POOL_LEAK)
    if rec is None or not prefix_caching_enabled(ctx):
        return None
    return Cause(PRESSURE.id, "The engine's cache accounting failed with its prefix cache on", (rec,),
                 "free and prefix-cached slots no longer add up to the pool: the cache kept slots it does not track")


def blocks_outlive_requests(ctx: Context, anchor: Evidence | None) -> Cause | None:
    """KV blocks held that the running requests cannot account for, with the prefix cache on: the
    pool pinned full while the running requests, even at max_model_len each, need less than that.
    The engine reports evictable cached blocks as free, so what is held and not live is cached
    blocks the cache never released."""
    if not prefix_caching_enabled(ctx):
        return None
    capacity = shared.kv_tokens(ctx)
    blocks, size = as_whole(ctx.args.get("num_gpu_blocks")), as_whole(ctx.args.get("block_size"))
    tokens, cap_ev = capacity if capacity else ((blocks * size, None) if blocks and size else (None, None))
    max_len = as_whole(ctx.arg("max_model_len", "max_seq_len"))
    if not tokens or not max_len:
        return None
    for kv, running, _, rec in reversed(_load_readings(ctx)):
        if anchor is not None and rec.time is not None and anchor.time is not None and rec.time > anchor.time:
            continue
        held, live_max = kv * tokens, int(running) * max_len
        if kv >= KV_PINNED and live_max < held:
            evidence = (rec,) + ((cap_ev[0],) if cap_ev else ())
            return Cause(PRESSURE.id,
                         f"KV blocks held beyond the running requests: {pct(kv)} of {tokens} tokens in use with "
                         f"{int(running)} running (at most {int(running)} x {max_len} = {live_max} tokens)",
                         evidence, "with the prefix cache on, blocks no running request holds stayed allocated: "
                                   "cached blocks were not released")
        break          # the last reading decides
    return None


def failing_in_cache_code(ctx: Context, oom: Evidence) -> Cause | None:
    site = failure_site(ctx.frames_near(oom))
    if site is None or site.name != "prefix_cache":
        return None
    return Cause(PRESSURE.id, f"The allocation failed in the prefix cache's own code ({site.where()})", (oom,),
                 site.site.why)


def hit_rate_note(ctx: Context, anchor: Evidence | None) -> str:
    """What the evidence says of the prefix cache, for the flowchart's answer."""
    enabled = prefix_caching_enabled(ctx)
    rates = [s for s in ctx.last_before(Kind.STATS.value, anchor) if s.fields.get("prefix_hit_rate") is not None]
    if enabled is False:
        return "prefix caching is off"
    if rates:
        return f"prefix caching is on (hit rate {pct(rates[-1].fields['prefix_hit_rate'])}, {rates[-1].where})"
    return "prefix caching is on" if enabled else "whether prefix caching was on is not in the evidence"


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    """Named only on evidence that ties the failure to the cache: the engine's own cache-accounting
    error, an exhausted block pool with nothing evictable, a failure inside the cache's code, or a
    confirmed prefix-cache bug of this version. In vLLM and SGLang cached blocks live inside the
    pre-sized pool and are evicted first, so a low hit rate costs throughput, not memory."""
    if phase.phase == "startup":
        return Assessment(SPEC.id, conf.NONE, "", "it failed during start-up")
    oom = ctx.primary
    tied = [c for c in (pool_not_evicted(ctx), cache_accounting_error(ctx), blocks_outlive_requests(ctx, oom))
            if c is not None]
    if oom is not None and not tied:
        in_code = failing_in_cache_code(ctx, oom)
        tied += [in_code] if in_code is not None else []
    named = shared.detect(ctx, shared.KNOWN_ENGINE_BUG, oom_class=SPEC.id.value)
    bugs = [c for c in named if confirmed_bug(c)]
    if not tied and not bugs:
        note = hit_rate_note(ctx, oom)
        why = (f"{note}, but nothing ties the failure to the cache (no frame in its code, no cache-accounting "
               "error, no confirmed prefix-cache bug of this version)")
        return Assessment(SPEC.id, conf.NONE, "", why)
    causes = tied + named          # a write-up's report is named beside the evidence, never as it
    if tied:
        confidence = conf.HIGH
    else:
        # A confirmed bug of this version with the cache on, and nothing else: likely, not certain.
        confidence = conf.MEDIUM_HIGH if phase.phase == "runtime" else conf.MEDIUM
    if phase.phase == "unknown":
        confidence -= conf.BIG_STEP
    summary = "Prefix-cache OOM: " + "; ".join(c.title for c in causes[:2])
    evidence = [e for c in causes for e in c.evidence]
    return Assessment(SPEC.id, round(min(confidence, conf.CEILING_PREFIX), 2), summary,
                      "; ".join(c.title for c in causes[:2]), ([oom] if oom is not None else []) + evidence, causes, [])


def confirmed_bug(cause: Cause) -> bool:
    """A known-bug cause whose entry an upstream issue, PR or release confirms."""
    return "unconfirmed" not in cause.title


# --- advice ----------------------------------------------------------------------------------------

def recommend(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """Prefix caching off: the failure is tied to the cache, and running without it costs prefill
    time on repeated prefixes, never correctness. An upgrade, where a confirmed bug names a fixed
    release, comes from the known-bug cause."""
    tie = next((c for c in verdict.causes if c.id == PRESSURE.id), None) or \
        next((c for c in verdict.causes if c.id == shared.KNOWN_ENGINE_BUG.id), None)
    if tie is None:
        return []
    where = f" ({tie.evidence[0].where})" if tie.evidence else ""
    return [Recommendation("enable_prefix_caching", True, False,
                           f"{tie.title}{where}: run without the prefix cache until the cause is fixed; repeated "
                           "prefixes are then computed again (prefill time), nothing else changes", "incident")]
