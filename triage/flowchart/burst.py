"""Runtime burst OOM: a healthy server overwhelmed by a spike (long prompts, many prefills).

**Signature**: an OOM while serving, with KV-cache usage near 100%, a waiting queue growing,
preemptions, and an allocator message whose "reserved but unallocated" is small (the memory was
really in use, not fragmented).
**Not to be confused with**: chronic fragmentation (large reserved-but-unallocated after long
uptime) and prefix-cache OOM (low hit rate, cached blocks crowding out live KV).
**Recovery**: runbooks/burst.yaml
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..model import Cause, Evidence, OomClass
from ..units import format_bytes
from .base import Assessment, pct
from .causes import detect
from .knowledge import has_hit_rate, prefix_caching_enabled, prefix_caching_opted_in
from .context import Context
from .phase import PhaseAnswer
from .prefix_cache import low_hit_rate

CLASS = OomClass.BURST
KV_HIGH = 0.90
KV_BUSY = 0.80               # with requests queued behind it, the cache was the bottleneck
SMALL_UNALLOCATED = 512 << 20
OVERSIZED_SHARE = 0.10       # a single failed allocation this share of the card


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
    stats = [s for s in ctx.last_before(Kind.STATS.value, anchor) if s.fields.get("kv_usage") is not None]
    if not stats:
        return None
    last = stats[-1].fields
    if last["kv_usage"] < 0.5 and not last.get("waiting"):
        return f"KV usage {pct(last['kv_usage'])}, nothing waiting"
    return None


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    oom = ctx.primary
    if oom is None or phase.phase == "startup":
        return Assessment(CLASS, 0.0, "", "it did not fail while serving")
    notes, used = load_signals(ctx, oom)
    tried, capacity = oom.fields.get("tried_bytes"), oom.fields.get("capacity_bytes")
    if phase.phase == "runtime" and tried and capacity and tried >= OVERSIZED_SHARE * capacity:
        # One allocation this large is one oversized request (a huge prompt or image), not load.
        notes.append(f"one allocation of {format_bytes(tried)} ({tried / capacity:.0%} of the card): an oversized request")
        used.append(oom)
    causes: list[Cause] = []
    unalloc = oom.fields.get("reserved_unallocated_bytes")
    tried = oom.fields.get("tried_bytes")
    confidence = 0.0
    if notes:
        causes.append(Cause("long_prompt_burst", "Load spike or oversized request: " + "; ".join(notes), tuple(used)))
        confidence = 0.6 + 0.1 * len(notes)
    small = unalloc is not None and (unalloc < SMALL_UNALLOCATED or (tried and unalloc < 0.5 * tried))
    quiet = quiet_before(ctx, oom)
    if phase.phase == "unknown" and not causes:
        # Without a phase, only load signals point at a burst; small unallocated memory merely
        # rules out fragmentation.
        return Assessment(CLASS, 0.0, "", "nothing shows it was serving under load",
                          attach=["the log lines before the OOM (start-up lines, or requests/stats showing load)"])
    if small:
        notes.append(f"only {format_bytes(unalloc)} reserved-but-unallocated: the memory was in use, not fragmented")
        confidence = max(confidence, 0.6) + (0.05 if causes else 0)
    ambiguous = unalloc is not None and not small
    if not notes:
        # A runtime OOM with nothing else is most often a spike; but allocator numbers that
        # neither show fragmentation nor rule it out leave it open.
        confidence = 0.35 if ambiguous else 0.5
    if not causes and prefix_caching_opted_in(ctx) and not has_hit_rate(ctx):
        confidence -= 0.25    # a cache the operator turned on explains full memory as well as a spike does
        notes.append("prefix caching is on and its hit rate is not in the evidence")
    if phase.phase == "unknown":
        confidence -= 0.1
    if quiet is not None and not causes:
        # The last reading before the OOM shows a quiet server: a spike is not what the evidence says.
        confidence -= 0.25
        notes.append(f"but the last stats before it show little load ({quiet})")
    causes += detect(ctx, "concurrency_misjudged", "accounting_discrepancy", "known_engine_bug", oom_class=CLASS.value)
    confidence = min(0.95, confidence)
    attach = [] if len(notes) >= 2 and confidence >= 0.6 else [
        "/metrics scrapes or the stats lines from the minutes before the OOM (KV usage, running/waiting, preemptions)"]
    if "prefix caching is on and its hit rate is not in the evidence" in notes:
        attach.append("the prefix-cache hit rate (stats lines or vllm:prefix_cache_hits/queries)")
    if ambiguous and not causes:
        attach.append("torch.cuda.memory_stats() or memory_summary() at the OOM (fragmentation or not)")
    summary = "Runtime burst OOM while serving" + (f": {'; '.join(notes)}" if notes else
                                                   " (no load or allocator signals to confirm it)")
    extra = [c for c in causes if c.id != "long_prompt_burst"]
    if extra:
        summary += ". Also: " + "; ".join(c.title for c in extra)
    return Assessment(CLASS, round(confidence, 2), summary, "; ".join(notes) or phase.why, [oom] + used, causes, attach)
