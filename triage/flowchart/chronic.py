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


from ..evidence.kinds import Kind
from ..model import Cause, Evidence, OomClass
from ..thresholds import FRAG_MIN_BYTES, FRAG_SHARE, LEAK_MIN_RISE, LEAK_MIN_SPAN_S, LONG_UPTIME_S
from ..units import format_bytes
from . import allocator
from .base import Assessment
from .causes import detect
from .context import Context
from .phase import PhaseAnswer

CLASS = OomClass.CHRONIC
RUNTIME_RANK = 1


def fragmentation(ctx: Context, oom: Evidence | None) -> Cause | None:
    alloc = allocator.reading(oom) if oom is not None and oom.kind == Kind.TORCH_OOM.value else None
    if alloc is not None and alloc.fragmented:
        return Cause("allocator_fragmentation", "Allocator fragmentation: " + alloc.describe(), (oom,),
                     _why_fragmented(alloc))
    for rec in ctx.ev.of(Kind.MEMORY_STATS):
        f = rec.fields
        reserved = f.get("reserved_bytes") or 0
        if reserved < FRAG_MIN_BYTES:
            continue
        inactive = f.get("inactive_split_bytes")
        if inactive is not None and inactive / reserved >= FRAG_SHARE:
            return Cause("allocator_fragmentation",
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
        if alloc.ratio < 0.25:
            out += ", small only because the reserved pool is large"
    return out


def engine_leak_check(ctx: Context) -> Cause | None:
    """The engine's own accounting check found KV-pool memory that nothing holds (SGLang checks
    between batches that every slot is free or cached): drift that only grows, a leak by the
    engine's own measure. Restart or upgrade; flags do not fix it."""
    rec = ctx.ev.first(Kind.POOL_LEAK)
    if rec is None:
        return None
    return Cause("memory_leak", "Memory leak: the engine's own KV-pool leak check failed", (rec,),
                 "the pool's free + cached slots no longer add up to its size while idle")


def leak(ctx: Context, oom: Evidence | None) -> Cause | None:
    """GPU memory rising over time while load stays flat (trend, not level)."""
    series = _memory_series(ctx)
    if not series:
        return None
    first, last = series[0], series[-1]
    rise = last[0] - first[0]
    total = ctx.gpu_total_bytes or max(v for v, _ in series)
    monotone = sum(1 for a, b in zip(series, series[1:]) if b[0] >= a[0]) >= 0.8 * (len(series) - 1)
    if rise <= 0 or not monotone or rise / total < LEAK_MIN_RISE:
        return None
    from_sleep = first[1].kind == Kind.SLEEP_MEMORY.value
    if not from_sleep:
        # nvidia-smi / DCGM readings: the start-up ramp (weights, KV pool) is not a leak; ask for
        # an hour of readings and positive evidence that the load stayed flat.
        if first[1].time is None or last[1].time is None or (last[1].time - first[1].time).total_seconds() < LEAK_MIN_SPAN_S:
            return None
        load = [s.fields.get("running") for s in ctx.ev.of(Kind.STATS) if s.fields.get("running") is not None]
        if len(load) < 3 or not _steady(load):
            return None
    span = ""
    if first[1].time and last[1].time:
        hours = (last[1].time - first[1].time).total_seconds() / 3600
        span = f" over {hours:.1f} h" if hours >= 0.1 else ""
    return Cause("memory_leak", f"Memory leak: GPU memory in use rose {format_bytes(rise)}{span} with steady load",
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
        return Assessment(CLASS, 0.0, "", "it failed during start-up, not after long running")
    causes = [c for c in (engine_leak_check(ctx), fragmentation(ctx, oom), leak(ctx, oom)) if c]
    uptime = phase.uptime_s
    long_run = uptime is not None and uptime >= LONG_UPTIME_S
    if not causes:
        if long_run and oom is not None and oom.fields.get("reserved_unallocated_bytes") is None:
            return Assessment(CLASS, 0.35, f"OOM after {uptime / 3600:.1f} h of uptime; no allocator numbers",
                              phase.why, [oom], [], ["torch.cuda.memory_stats() or the full OOM message"])
        return Assessment(CLASS, 0.0, "", "no fragmentation or leak signal")
    confidence = 0.75 if oom is not None else 0.6
    if len(causes) > 1:
        confidence += 0.1
    if long_run:
        confidence += 0.05
    if phase.phase == "unknown" and oom is not None:
        confidence -= 0.05
    causes += detect(ctx, "known_engine_bug", oom_class=CLASS.value)
    uptime_note = f" after {uptime / 3600:.1f} h of uptime" if long_run else ""
    summary = f"Chronic OOM{uptime_note}: " + "; ".join(c.title for c in causes[:2])
    if oom is None:
        summary = "Chronic memory growth (no OOM line in the evidence yet): " + causes[0].title
    evidence = ([oom] if oom else []) + [e for c in causes for e in c.evidence]
    return Assessment(CLASS, round(min(confidence, 0.95), 2), summary, "; ".join(c.title for c in causes[:2]),
                      evidence, causes, [])


def _steady(load: list[float]) -> bool:
    """A stable request rate: coefficient of variation under 0.5 (statistics loads only here)."""
    from statistics import mean, pstdev

    return mean(load) > 0 and pstdev(load) / mean(load) < 0.5
