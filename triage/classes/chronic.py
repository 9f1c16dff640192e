"""Chronic OOM: fragmentation of the caching allocator or a slow leak, after long running.

**Signature**: the allocator's message reports a large "reserved by PyTorch but unallocated"
amount (at least what the failed request asked for: the memory was there, in unusable pieces);
memory_stats show inactive_split or reserved far above allocated and alloc retries; GPU memory
in use climbing over hours while load is flat. Fragmentation is defined here as
`reserved-but-unallocated / reserved` (from the OOM message) or `inactive_split / reserved`
(from memory_stats), and the output names which one it used.
**Not to be confused with**: a burst (small reserved-but-unallocated, load spike), and a host
RAM leak (RSS growth, OOMKilled) which is not a GPU OOM.
**Recovery**: runbooks/chronic.yaml
"""
from __future__ import annotations

from typing import Any

from ..evidence.kinds import Kind
from ..fit import gib
from ..flowchart import allocator
from ..flowchart import causes as shared
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.incident import Incident
from ..flowchart.knowledge import prefix_caching_enabled
from ..flowchart.phase import PhaseAnswer
from ..model import Cause, Evidence, OomClass, Recommendation, Verdict
from ..thresholds import (EARLY_WARNING_CONFIDENCE, FRAG_MIN_BYTES, FRAG_SHARE, LEAK_MIN_RISE, LEAK_MIN_SPAN_S,
                          LEAK_MONOTONE_SHARE, LONG_UPTIME_S, STEADY_LOAD_CV)
from ..units import format_bytes
from .base import Assessment, Branch, CauseSpec, ClassSpec

FRAGMENTATION = CauseSpec("allocator_fragmentation", "allocator fragmentation",
                          ("fragmentation_min_share", "fragmentation_min_bytes", "borderline_share",
                           "borderline_max_multiple", "borderline_card_share", "inactive_split_share"))
LEAK = CauseSpec("memory_leak", "GPU memory rising with steady load, or the engine's own leak check failing",
                 ("leak_min_rise", "leak_min_span_s", "leak_monotone_share", "steady_load_cv", "long_uptime_s"))
SPEC = ClassSpec(
    id=OomClass.CHRONIC, label="chronic OOM (fragmentation or leak)", short_label="chronic OOM", colour="magenta",
    branch=Branch.RUNTIME, causes=(FRAGMENTATION, LEAK, shared.KNOWN_ENGINE_BUG), runtime_rank=1, specificity=1,
    early_question="Is GPU memory growing over time?")
SMALL_RESERVED_SHARE = 0.25  # below this, a reserved-but-unallocated share is called small in the explanation
RESTART_AT = 0.5             # restart at this share of the hours a leak takes to fill the card


def fragmentation(ctx: Context, oom: Evidence | None) -> Cause | None:
    states_pieces = oom is not None and (oom.kind == Kind.TORCH_OOM.value
                                         or oom.fields.get("largest_free_block_bytes") is not None)
    alloc = allocator.reading(oom) if states_pieces else None
    if alloc is not None and alloc.fragmented:
        return Cause(FRAGMENTATION.id, "Allocator fragmentation: " + alloc.describe(), (oom,),
                     _why_fragmented(alloc))
    for rec in ctx.ev.of(Kind.MEMORY_STATS):
        f = rec.fields
        reserved = f.get("reserved_bytes") or 0
        if reserved < FRAG_MIN_BYTES:
            continue
        inactive = f.get("inactive_split_bytes")
        if inactive is not None and inactive / reserved >= FRAG_SHARE:
            return Cause(FRAGMENTATION.id,
                         f"Allocator fragmentation: {format_bytes(inactive)} of {format_bytes(reserved)} reserved is "
                         "inactive split blocks", (rec,),
                         f"measure: inactive_split / reserved (memory_stats) = {inactive / reserved:.0%}, "
                         f"{FRAG_SHARE:.0%} or more counts: cached blocks split by earlier allocations, free "
                         "in part but unusable for a request larger than the pieces"
                         + (f"; {f.get('num_alloc_retries')} cudaMalloc retries (the allocator emptied its cache "
                            "and tried again)" if f.get("num_alloc_retries") else ""))
    return None


def _why_fragmented(alloc: allocator.AllocatorReading) -> str:
    """Why the reserved-but-unallocated amount counts as fragmentation, with the measure named:
    its share of the reserved pool can be small (13% of a full 80 GiB card is still 10 GiB) and
    alone would read as no fragmentation at all; what decides is the amount against the failed
    request and the card."""
    parts = []
    if alloc.tried:
        times = alloc.unallocated / alloc.tried
        parts.append(f"{times:.0f}x the failed request" if times >= 10 else f"{times:.1f}x the failed request")
    if alloc.capacity:
        parts.append(f"{alloc.unallocated / alloc.capacity:.0%} of the {format_bytes(alloc.capacity)} card")
    out = (" and ".join(parts) + ": free" if parts else "free") + (
        ", yet the request did not fit, so it was split into smaller pieces (this amount against the "
        "request is the measure that decides)")
    if alloc.ratio is not None:
        reserved = alloc.unallocated + (alloc.allocated or 0)
        out += (f"; as reserved-but-unallocated / reserved it is {alloc.ratio:.0%} of the "
                f"{format_bytes(reserved)} reserved")
        if alloc.ratio < SMALL_RESERVED_SHARE:
            out += ", small only because the reserved pool is large"
    return out


def engine_leak_check(ctx: Context) -> Cause | None:
    """The engine's own accounting check found KV-pool memory that nothing holds (SGLang checks
    between batches that every slot is free or cached): drift that only grows, a leak by the
    engine's own measure. Restart or upgrade; flags do not fix it."""
    rec = ctx.ev.first(Kind.POOL_LEAK)
    if rec is None or prefix_caching_enabled(ctx):
        return None      # with the prefix cache on, its accounting is what broke (the prefix-cache class)
    return Cause(LEAK.id, "Memory leak: the engine's own KV-pool leak check failed", (rec,),
                 "the pool's free + cached slots no longer add up to its size while idle")


def leak(ctx: Context, oom: Evidence | None) -> Cause | None:
    """GPU memory rising over time while load stays flat (trend, not level)."""
    series = _memory_series(ctx)
    if not series:
        return None
    first, last = series[0], series[-1]
    rise = last[0] - first[0]
    total = ctx.gpu_total_bytes or max(v for v, _ in series)
    monotone = sum(1 for a, b in zip(series, series[1:]) if b[0] >= a[0]) >= LEAK_MONOTONE_SHARE * (len(series) - 1)
    if rise <= 0 or not monotone or rise / total < LEAK_MIN_RISE:
        return None
    from_sleep = first[1].kind == Kind.SLEEP_MEMORY.value
    if not from_sleep:
        # nvidia-smi / DCGM readings: the start-up ramp (weights, KV pool) is not a leak; ask for
        # an hour of readings and positive evidence that the load stayed flat.
        if first[1].time is None or last[1].time is None or (last[1].time - first[1].time).total_seconds() < LEAK_MIN_SPAN_S:
            return None
        load = [s.fields.get("running") for s in ctx.ev.of(Kind.STATS) if s.fields.get("running") is not None]
        if len(load) < 3 or not steady_load(load):
            return None
    span = ""
    if first[1].time and last[1].time:
        hours = (last[1].time - first[1].time).total_seconds() / 3600
        span = f" over {hours:.1f} h" if hours >= 0.1 else ""
    return Cause(LEAK.id, f"Memory leak: GPU memory in use rose {format_bytes(rise)}{span} with steady load",
                 (first[1], last[1]), f"{format_bytes(first[0])} -> {format_bytes(last[0])} in {len(series)} readings")


def _memory_series(ctx: Context) -> list[tuple[int, Evidence]]:
    sleep = [(r.fields["in_use_bytes"], r) for r in ctx.ev.of(Kind.SLEEP_MEMORY) if r.fields.get("in_use_bytes")]
    if len(sleep) >= 3:
        return sleep
    readings: dict[str, list[tuple[int, Evidence]]] = {}
    ready = [e.time for e in ctx.ev.of(Kind.STARTUP_COMPLETE) if e.time is not None]
    for r in ctx.ev.of(Kind.GPU_MEMORY):
        if r.fields.get("used_bytes") is None:
            continue
        if ready and r.time is not None and r.time < min(ready):
            continue   # the start-up ramp (weights, KV pool, graphs) is not growth
        key = f"{r.fields.get('host', '')}/{r.fields.get('gpu')}/{r.fields.get('uuid')}"
        readings.setdefault(key, []).append((r.fields["used_bytes"], r))
    best = max(readings.values(), key=len, default=[])
    if len(best) < 4:
        return []
    return sorted(best, key=lambda x: (x[1].time is None, x[1].time, x[1].seq))


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    oom = ctx.primary
    if phase.phase == "startup":
        return Assessment(SPEC.id, conf.NONE, "", "it failed during start-up, not after long running")
    causes = [c for c in (engine_leak_check(ctx), fragmentation(ctx, oom), leak(ctx, oom)) if c]
    uptime = phase.uptime_s
    long_run = uptime is not None and uptime >= LONG_UPTIME_S
    if not causes:
        if long_run and oom is not None and oom.fields.get("reserved_unallocated_bytes") is None:
            return Assessment(SPEC.id, conf.UNNAMED, f"OOM after {uptime / 3600:.1f} h of uptime; no allocator numbers",
                              phase.why, [oom], [], ["torch.cuda.memory_stats() or the full OOM message"])
        return Assessment(SPEC.id, conf.NONE, "", "no fragmentation or leak signal")
    confidence = conf.FAIRLY_HIGH if oom is not None else conf.MEDIUM
    if len(causes) > 1:
        confidence += conf.BIG_STEP
    if long_run:
        confidence += conf.STEP
    if phase.phase == "unknown" and oom is not None:
        confidence -= conf.STEP
    causes += shared.detect(ctx, shared.KNOWN_ENGINE_BUG, oom_class=SPEC.id.value)
    uptime_note = f" after {uptime / 3600:.1f} h of uptime" if long_run else ""
    summary = f"Chronic OOM{uptime_note}: " + "; ".join(c.title for c in causes[:2])
    if oom is None:
        summary = "Chronic memory growth (no OOM line in the evidence yet): " + causes[0].title
    evidence = ([oom] if oom else []) + [e for c in causes for e in c.evidence]
    return Assessment(SPEC.id, round(min(confidence, conf.CEILING), 2), summary, "; ".join(c.title for c in causes[:2]),
                      evidence, causes, [])


def steady_load(load: list[float]) -> bool:
    """A stable request rate: its coefficient of variation under steady_load_cv (watch asks the
    same question of its own readings)."""
    from statistics import mean, pstdev

    return mean(load) > 0 and pstdev(load) / mean(load) < STEADY_LOAD_CV


def early(ctx: Context) -> Assessment | None:
    """Memory climbing with no OOM yet is still a chronic finding worth reporting, when it is
    confident; the flowchart step names its first cause."""
    growth = assess(ctx, PhaseAnswer("unknown", "", conf.NONE))
    if not growth.supported or growth.confidence < EARLY_WARNING_CONFIDENCE:
        return None
    growth.why = growth.causes[0].title
    return growth


# --- advice ----------------------------------------------------------------------------------------

def recommend(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """The allocator setting against fragmentation; for a leak, a restart schedule sized from its rate."""
    causes = {c.id for c in verdict.causes}
    out = []
    if FRAGMENTATION.id in causes or LEAK.id not in causes:
        # The cause explains the fragmentation and its measure; the advice names it, once.
        seen = f", the fragmentation the {FRAGMENTATION.id} cause measured" if FRAGMENTATION.id in causes else ""
        out.append(Recommendation("PYTORCH_CUDA_ALLOC_CONF", None, "expandable_segments:True",
                                  "lets the caching allocator grow segments instead of leaving unusable split blocks"
                                  f"{seen} (optionally add garbage_collection_threshold:0.8)",
                                  "incident" if FRAGMENTATION.id in causes else "rule_of_thumb", env=True))
    leak = next((c for c in verdict.causes if c.id == LEAK.id), None)
    growth = _memory_growth(incident, leak) if leak else None
    if growth is not None:
        hours = growth["hours_to_full"]
        every = max(1, int(hours * RESTART_AT))
        verdict.facts["memory_growth"] = growth
        out.append(Recommendation("scheduled_restart_hours", None, every, (
            f"the leak fills the card about {hours:.0f} h after a restart: GPU memory rose "
            f"{gib(growth['bytes_per_hour'], 2)}/h with flat load (from {gib(growth['first_used_bytes'])} at "
            f"{growth['first']} to {gib(growth['last_used_bytes'])} at {growth['last']}, card "
            f"{gib(growth['total_bytes'])}); restart gracefully (drain first) at half that until the leak is fixed"),
            "incident", manual=True))
    return out


def _memory_growth(incident: Incident, leak: Cause | None) -> dict[str, Any] | None:
    """The leak's rate from its first and last GPU readings, and the hours until the card is full."""
    if leak is None or len(leak.evidence) < 2:
        return None
    first, last = leak.evidence[0], leak.evidence[-1]
    if first.time is None or last.time is None or last.time <= first.time:
        return None
    used0 = first.fields.get("used_bytes") or first.fields.get("in_use_bytes")
    used1 = last.fields.get("used_bytes") or last.fields.get("in_use_bytes")
    total = first.fields.get("total_bytes") or incident.gpu_total_bytes
    if not (used0 and used1 and total) or used1 <= used0:
        return None
    rate = (used1 - used0) / ((last.time - first.time).total_seconds() / 3600)
    return {"bytes_per_hour": int(rate), "hours_to_full": round((total - used0) / rate, 1),
            "first": first.where, "last": last.where, "first_used_bytes": int(used0), "last_used_bytes": int(used1),
            "total_bytes": int(total)}
