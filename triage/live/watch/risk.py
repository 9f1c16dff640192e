"""The OOM risk of one server: a pure function of one reading and the thresholds table.

Which of the four OOM classes a running server is heading for, and why, with the numbers. The
rules are the flowchart's early signs, judged against the same thresholds the classifier uses
(triage/thresholds.py, read through `Limits`), so watch warns of what `triage classify` would
later call the failure:

  prefix_cache  caching on and the KV pool holds more than the running requests could
                (running x max_model_len tokens): cached prefixes crowd out live ones;
                a hit rate below prefix_hit_low says nobody reuses them
  burst         KV usage at kv_high / kv_critical, or at kv_busy with waiting_high requests
                queued or requests being preempted
  chronic       inactive_split / reserved at inactive_split_share (the newest hooks dump of
                a process still running), or GPU memory rising over at least leak_min_span_s
                while running requests stay flat (a leak), by leak_min_rise of the card or by
                leak_headroom_share of what is still free; a leak alone says when, at its
                slope, the card is full (`fills_card_in_s`, what `watch --act` weighs)
  startup       NVML used above the engine's budget by more than `discrepancy`: memory
                outside the engine's accounting, so a restart with this budget will not find
                it free; or a budget of util_no_headroom or more

The more specific class wins when both explain the same pressure (the classifier's rule): a pool
held by cached prefixes is reported as prefix_cache, not also as burst.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ...classes import registry
from ...thresholds import TABLE, Threshold
from ...units import format_bytes
from .readings import GpuView, Risk, ServerView

# Most specific first (the class specs' order): the order the verdict prefers on a tie, and the
# order risks are listed.
_SPECIFICITY = registry().by_specificity()


@dataclass(frozen=True)
class Limits:
    kv_high: float
    kv_critical: float
    kv_busy: float
    waiting_high: float
    prefix_hit_low: float
    discrepancy: float
    inactive_split_share: float
    fragmentation_min_bytes: float
    leak_min_rise: float
    leak_min_span_s: float
    leak_headroom_share: float
    util_no_headroom: float
    free_margin: float

    @classmethod
    def from_table(cls, table: Mapping[str, Threshold] = TABLE) -> "Limits":
        return cls(**{name: table[name].value for name in cls.__dataclass_fields__})


LIMITS = Limits.from_table()


def assess(server: ServerView, gpus: Sequence[GpuView], limits: Limits = LIMITS) -> tuple[Risk, ...]:
    """The risks of `server`, most pressing first (critical before warning, then most specific)."""
    by_index = {g.index: g for g in gpus}
    own = [by_index[i] for i in server.gpus if i in by_index]
    found: list[Risk] = []
    prefix = _prefix_cache(server, limits)
    if prefix:
        found.append(prefix)
    else:
        found += _one(_burst(server, limits))
    found += _one(_chronic(server, own, limits))
    found += _one(_startup(server, own, limits))
    return tuple(sorted(found, key=lambda r: (r.level != "critical", _SPECIFICITY.index(r.oom_class))))


def _one(risk: Risk | None) -> list[Risk]:
    return [risk] if risk else []


def _prefix_cache(s: ServerView, lim: Limits) -> Risk | None:
    kv = s.kv_cache_usage
    if s.prefix_caching is not True or kv is None or kv < lim.kv_busy or s.running is None:
        return None
    if not s.kv_capacity_tokens or not s.max_model_len:
        return None
    held = kv * s.kv_capacity_tokens
    live_most = s.running * s.max_model_len
    if held <= live_most:
        return None            # the running requests alone could fill it: load, not the cache
    live = (f"{s.running:.0f} running request(s) can hold at most {live_most:,.0f} (max_model_len "
            f"{s.max_model_len:,})" if s.running else "no request is running")
    reasons = [f"KV cache {kv:.0%} full ({held:,.0f} of {s.kv_capacity_tokens:,} tokens) while {live}: "
               "cached prefixes hold the rest"]
    hit = s.prefix_hit_ratio_window
    if hit is not None and hit < lim.prefix_hit_low:
        reasons.append(f"prefix-cache hit rate {hit:.0%} {s.hit_window}, below "
                       f"prefix_hit_low {lim.prefix_hit_low:.0%}: the cache keeps prefixes nobody reuses")
    return Risk("prefix_cache", _kv_level(kv, lim), tuple(reasons))


def _burst(s: ServerView, lim: Limits) -> Risk | None:
    kv, waiting, preempt = s.kv_cache_usage, s.waiting or 0.0, s.preemptions_per_s or 0.0
    if kv is None:
        return None
    reasons = []
    if kv >= lim.kv_critical:
        reasons.append(f"KV cache {kv:.0%} full (kv_critical {lim.kv_critical:.0%})")
    elif kv >= lim.kv_high:
        reasons.append(f"KV cache {kv:.0%} full (kv_high {lim.kv_high:.0%})")
    elif kv >= lim.kv_busy and (waiting >= lim.waiting_high or preempt > 0):
        reasons.append(f"KV cache {kv:.0%} full (kv_busy {lim.kv_busy:.0%}) with requests held back")
    if not reasons:
        return None
    if waiting >= lim.waiting_high:
        reasons.append(f"{waiting:.0f} requests waiting behind {s.running or 0:.0f} running "
                       f"(waiting_high {lim.waiting_high:.0f})")
    if preempt > 0:
        reasons.append(f"{preempt:.2g} preemptions/s: running requests evicted for lack of KV space")
    return Risk("burst", _kv_level(kv, lim), tuple(reasons))


def _kv_level(kv: float, lim: Limits) -> str:
    return "critical" if kv >= lim.kv_critical else "warning"


def _chronic(s: ServerView, gpus: Iterable[GpuView], lim: Limits) -> Risk | None:
    reasons = []
    fills: list[float] = []
    f = s.fragmentation
    if f is not None and f.current and f.reserved_bytes >= lim.fragmentation_min_bytes \
            and f.ratio >= lim.inactive_split_share:
        age = f", {f.age_s / 60:.0f} min old" if f.age_s is not None else ""
        reasons.append(f"allocator fragmentation {f.ratio:.0%}: inactive_split {format_bytes(f.inactive_split_bytes)} of "
                       f"{format_bytes(f.reserved_bytes)} reserved (inactive_split_share "
                       f"{lim.inactive_split_share:.0%}; {f.file}{age})")
    for g in gpus:
        t = g.trend
        if t is None or not g.total_bytes or t.slope_bytes_per_hour <= 0 or t.span_s < lim.leak_min_span_s:
            continue
        headroom = max(0, g.total_bytes - g.used_bytes)
        big = t.rise_bytes >= lim.leak_min_rise * g.total_bytes
        eating = headroom > 0 and t.rise_bytes >= lim.leak_headroom_share * headroom
        if not (big or eating) or s.load is None or not s.load.steady:
            continue
        eta = g.fills_in_s
        fills += [eta] if eta is not None else []
        full = f"; at this rate the card is full in {eta / 3600:.1f} h" if eta is not None else ""
        measure = (f"{t.rise_bytes / g.total_bytes:.0%} of the card; leak_min_rise {lim.leak_min_rise:.0%}" if big else
                   f"{t.rise_bytes / headroom:.0%} of the {format_bytes(headroom)} still free; leak_headroom_share "
                   f"{lim.leak_headroom_share:.0%}")
        reasons.append(f"GPU {g.index} memory rising {format_bytes(t.slope_bytes_per_hour)}/h over "
                       f"{t.span_s / 3600:.1f} h (+{format_bytes(t.rise_bytes)}, {measure}) while running requests "
                       f"stayed flat (mean {s.load.mean_running:.1f}): a leak{full}")
    if not reasons:
        return None
    # A fragmentation reading is no leak with a deadline: only a leak alone carries one.
    leak_only = fills and len(fills) == len(reasons)
    return Risk("chronic", "warning", tuple(reasons), min(fills) if leak_only else None)


def outside_budget(s: ServerView, g: GpuView, lim: Limits = LIMITS) -> float | None:
    """Points of GPU `g` in use outside the engine's budget when over `discrepancy`, else None: the
    startup rule's memory-outside-the-accounting sign (also what `watch --act` counts as a precursor)."""
    gap = s.discrepancy(g)
    if gap is None or gap <= 100 * lim.discrepancy or g.used_share is None:
        return None
    return gap


def _startup(s: ServerView, gpus: Iterable[GpuView], lim: Limits) -> Risk | None:
    budget = s.gpu_memory_utilization
    if budget is None:
        return None
    reasons, level = [], "warning"
    for g in gpus:
        gap = outside_budget(s, g, lim)
        if gap is None:
            continue
        reasons.append(f"GPU {g.index}: NVML {g.used_share:.1%} used vs the engine's budget {budget:.0%}: "
                       f"{gap:.1f} points outside its accounting (discrepancy {100 * lim.discrepancy:.0f} points); "
                       f"a restart at gpu_memory_utilization={budget:g} will not find its budget free")
        if 1 - g.used_share < lim.free_margin:
            level = "critical"
            reasons.append(f"GPU {g.index}: {format_bytes(g.total_bytes - g.used_bytes)} free, under free_margin "
                           f"{lim.free_margin:.0%} of the card: no headroom for an activation spike")
    if budget >= lim.util_no_headroom:
        reasons.append(f"gpu_memory_utilization {budget:g} (util_no_headroom {lim.util_no_headroom:g}): under "
                       f"{1 - budget:.0%} of the card left for the CUDA context, NCCL and sidecars")
    return Risk("startup", level, tuple(reasons)) if reasons else None
