"""Facts a postmortem states about impact, trigger and early warning, read from the evidence.

Each function returns claims that cite the records they rest on; none guesses a number the
evidence does not hold (an absent number is left out, and the template says what is missing).
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Sequence

from ..budget import engine_budget as _engine_budget
from ..evidence.kinds import GPU_OOM_KINDS, Kind
from ..model import Evidence, EvidenceSet, Verdict
from ..thresholds import DISCREPANCY, KV_HIGH, LOW_HIT_RATE
from ..units import count_noun
from ..redact import redact_output
from .chart import Series, collect_series, node_of
from .views import Claim, EarlierSignal, hms, span

DISCREPANCY_POINTS = 100 * DISCREPANCY   # nvidia-smi used vs the engine's budget, in points of the card
# A "would have fired" claim applies the shipped rule's threshold *and* its `for:` to the evidence's
# own readings: the condition must hold over that long a stretch of them (one reading never does).
# The durations are deploy/prometheus/triage-alerts.yaml's (tests/test_postmortem_signals.py
# checks they agree).
KV_HOLD = timedelta(minutes=5)    # TriageKvCacheHigh: KV-cache usage above KV_HIGH, for: 5m
DISCREPANCY_HOLD = timedelta(minutes=2)      # TriageNvmlEngineDiscrepancy, for: 2m
PREFIX_LOW_HOLD = timedelta(minutes=15)      # TriagePrefixCacheLowHitRate, for: 15m
TREND_WINDOW = timedelta(hours=1)  # memory-delta alert: rise over the last hour ...
TREND_MIN_SPAN = timedelta(minutes=30)
TREND_POINTS = 1.0                # ... of at least this many points of the card
PREFIX_LOW = LOW_HIT_RATE          # prefix-cache hit rate below this with caching on
STATS_NEAR = timedelta(minutes=2)  # a stats line this close before a failure describes it
# "13 of 16 nodes down", "3/8 pods crashed" in a note.
NODES_DOWN = re.compile(r"\b(\d+)\s*(?:of|/)\s*(\d+)\s+(nodes|pods|servers|replicas|GPUs)\s+"
                        r"(down|crashed|failed|failing|unhealthy|affected|crash-looping)\b", re.I)
_PERCENT_OF = re.compile(r"(?<!\d)(\d+(?:\.\d+)?)\s?% of\b")
# "error rate 82%", "error rate is 40 %", "error rate back to 0%" (not "error rate above 20%": a threshold).
_ERROR_RATE = re.compile(r"error rate\s*(?:is\s+|was\s+|at\s+|of\s+|now\s+|(?:back |down |up )?to\s+|[:=]\s*)?"
                         r"(\d+(?:\.\d+)?)\s?%", re.I)


def failures(evidence: EvidenceSet) -> list[Evidence]:
    """GPU OOM records with a time, first per (source, time): one per logged failure."""
    seen: set[tuple[str, datetime]] = set()
    out = []
    for rec in sorted((e for e in evidence if e.kind in GPU_OOM_KINDS and e.time), key=lambda e: (e.time, e.seq)):
        if (rec.source, rec.time) not in seen:
            seen.add((rec.source, rec.time))
            out.append(rec)
    return out


def who(rec: Evidence) -> str:
    return node_of(rec) or "the server"


def first_failure_per_node(evidence: EvidenceSet) -> list[Evidence]:
    first: dict[str, Evidence] = {}
    for rec in failures(evidence):
        first.setdefault(node_of(rec) or rec.source, rec)
    return sorted(first.values(), key=lambda e: e.time)


def load_before(evidence: EvidenceSet, failure: Evidence) -> Evidence | None:
    """The last stats line with request counts, from the failing server's own log, just before it failed."""
    best = None
    for rec in evidence.of(Kind.STATS):
        if (rec.source == failure.source and rec.time and rec.time <= failure.time
                and failure.time - rec.time <= STATS_NEAR and isinstance(rec.fields.get("running"), (int, float))):
            best = rec
    return best


# -- impact -----------------------------------------------------------------------------------

def impact_claims(evidence: EvidenceSet, notes: Sequence[tuple[str, str, tuple[str, ...]]] = ()) -> list[Claim]:
    """`notes`: (time, text, sources) of timeline notes, read for error rates people wrote down."""
    out: list[Claim] = []
    firsts = first_failure_per_node(evidence)
    if firsts:
        fails = failures(evidence)
        if len(fails) == 1:
            text = f"1 GPU out-of-memory failure, at {hms(fails[0].time)} on {who(fails[0])}"
        else:
            servers = (f"{len(firsts)} servers ({', '.join(who(f) for f in firsts)})" if len(firsts) > 1
                       else who(firsts[0]))
            text = (f"{len(fails)} GPU out-of-memory failures on {servers} between {hms(fails[0].time)} and "
                    f"{hms(fails[-1].time)}")
        out.append(Claim(text, tuple(f.where for f in firsts)))
    dropped, parts, cites = 0, [], []
    for f in firsts:
        load = load_before(evidence, f)
        if load is None:
            continue
        n = int(sum(load.fields.get(k) or 0 for k in ("running", "waiting", "swapped")))
        dropped += n
        parts.append(f"{who(f)}: {int(load.fields['running'])} running + "
                     f"{int(load.fields.get('waiting') or 0)} waiting")
        cites.append(load.where)
    if parts:
        was = "was" if dropped == 1 else "were"
        out.append(Claim(f"{count_noun(dropped, 'request')} {was} in flight when "
                         f"{'the engines' if len(parts) > 1 else 'the engine'} died, and {was} dropped "
                         f"({'; '.join(parts)})", tuple(cites)))
    failed = evidence.of(Kind.REQUEST_FAILED)
    if failed:
        count = sum(int(e.fields.get("repeats") or 1) for e in failed)     # a bucket stands for its lines
        out.append(Claim(f"{count_noun(count, 'request')} failed mid-generation in the attached logs",
                         tuple(e.where for e in failed[:3])))
    errors = [e for e in evidence.of(Kind.REQUEST_SERVED) if _int(e.fields.get("status")) >= 500]
    if errors:
        count = sum(int(e.fields.get("repeats") or 1) for e in errors)     # one record counts a log's lines
        out.append(Claim(f"{count_noun(count, 'request')} answered with a 5xx status after the failure, in the "
                         "attached logs' access lines",
                         tuple(e.where for e in errors[:3])))
    out += _error_rates(evidence, notes)
    out += _pod_restarts(evidence)
    return out


def _error_rates(evidence: EvidenceSet, notes: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[Claim]:
    out = []
    for alert in evidence.of(Kind.ALERT):
        f = alert.fields
        if f.get("status") != "firing" or "error" not in str(f.get("alertname", "")).lower():
            continue
        ann = f.get("annotations") or {}
        m = _PERCENT_OF.search(str(ann.get("description") or "")) or _PERCENT_OF.search(str(ann.get("summary") or ""))
        if m:
            out.append(Claim(f"error rate {m.group(1)}% when alert {f.get('alertname')} fired at {hms(alert.time)}",
                             (alert.where,)))
    readings = [(t, m.group(1), src) for t, text, src in notes for m in [_ERROR_RATE.search(text)] if m]
    for t, text, src in notes:
        m = NODES_DOWN.search(text)
        if m:
            out.append(Claim(f"{m.group(1)} of {m.group(2)} {m.group(3)} {m.group(4)}, as noted at {t}", src))
    if readings:
        out.append(Claim("error rate as noted during the incident: " +
                         ", ".join(f"{v}% at {t}" for t, v, _ in readings), tuple(s for *_, src in readings for s in src)))
    return out


def _pod_restarts(evidence: EvidenceSet) -> list[Claim]:
    out = []
    for rec in evidence.of(Kind.POD_STATUS):
        f = rec.fields
        if f.get("which") != "last" or f.get("state") != "terminated":
            continue
        why = f.get("reason") or "terminated"
        code = f" (exit code {f['exit_code']})" if f.get("exit_code") is not None else ""
        out.append(Claim(f"pod {f.get('pod')} on {f.get('node') or '?'} restarted {f.get('restart_count') or 0} "
                         f"time(s); last termination {why}{code} at {hms(rec.time)}", (rec.where,)))
    return out


# -- trigger ----------------------------------------------------------------------------------

def trigger_claims(evidence: EvidenceSet, verdict: Verdict) -> list[Claim]:
    fails = failures(evidence)
    if not fails:
        return []
    first = fails[0]
    out = [Claim(f"First failure at {hms(first.time)} on {who(first)}: {excerpt(first.text)}",
                 (first.where,))]
    uptime = first.fields.get("uptime_s")
    if isinstance(uptime, (int, float)):
        phase = first.fields.get("phase")
        out.append(Claim(f"It came {span(timedelta(seconds=uptime))} after that server started"
                         f"{' (while serving)' if phase == 'serving' else ' (ready, before much traffic)' if phase == 'ready' else ''}",
                         (first.where,)))
    load = load_before(evidence, first)
    if load is not None:
        f = load.fields
        kv = f" at {100 * f['kv_usage']:.1f}% KV-cache usage" if isinstance(f.get("kv_usage"), (int, float)) else ""
        out.append(Claim(f"Load just before it: {count_noun(int(f['running']), 'request')} running, "
                         f"{int(f.get('waiting') or 0)} waiting{kv}", (load.where,)))
    later = first_failure_per_node(evidence)[1:]
    if later:
        out.append(Claim(f"The same failure followed on {len(later)} more server{'s' if len(later) > 1 else ''} by "
                         f"{hms(later[-1].time)}: " +
                         ", ".join(f"{who(e)} {hms(e.time)}" for e in later),
                         tuple(e.where for e in later)))
    return out


# -- what would have detected it sooner --------------------------------------------------------

def earlier_signals(evidence: EvidenceSet, verdict: Verdict, before: datetime | None,
                    before_what: str = "detection") -> list[EarlierSignal]:
    """Signals in the evidence that an alert rule could have turned into a page before `before`
    (the detection time, else the impact start: `before_what` names which)."""
    series = collect_series(evidence)
    found = [s for s in (
        _discrepancy(evidence, verdict, series),
        _trend(series),
        _kv_high(evidence),
        _preemption(evidence),
        _prefix_low(evidence, verdict),
    ) if s is not None]
    out = []
    for signal, alert, at, sources in sorted(found, key=lambda s: s[2]):
        if before is not None and at >= before:
            continue
        lead = f"{span(before - at)} before {before_what}" if before is not None else None
        out.append(EarlierSignal(signal, alert, hms(at) or "", lead, sources))
    return out


_Found = tuple[str, str, datetime, tuple[str, ...]]


def engine_budget(evidence: EvidenceSet, verdict: Verdict) -> float | None:
    """The engine's gpu_memory_utilization (triage.budget: the same reading as the classifier's)."""
    found = _engine_budget(evidence)
    return found[0] if found else None


def _discrepancy(evidence: EvidenceSet, verdict: Verdict, series: list[Series]) -> _Found | None:
    budget = engine_budget(evidence, verdict)
    if budget is None:
        return None
    best: _Found | None = None
    for s in series:
        if s.kind != "gpu_memory":
            continue
        held = held_for([(p.time, p.value > 100 * budget + DISCREPANCY_POINTS, p.where) for p in s.points],
                        DISCREPANCY_HOLD)
        if held is not None and (best is None or held[2] < best[2]):
            (since, since_where), (fired, fired_where) = held[:2], held[2:]
            value = max(p.value for p in s.points if since <= p.time <= fired)
            best = (f"GPU memory up to {value:.1f}% of the card while the engine budgets {100 * budget:g}%, "
                    f"from {hms(since)}",
                    f"memory discrepancy: nvidia-smi/DCGM used minus the engine's budget > {DISCREPANCY_POINTS:g} "
                    f"points for {span(DISCREPANCY_HOLD)}", fired, (since_where, fired_where))
    return best


def held_for(readings: Sequence[tuple[datetime, bool, str]], hold: timedelta) \
        -> tuple[datetime, str, datetime, str] | None:
    """Where a condition first held on consecutive readings for `hold`: (since, its source, the time
    the rule would fire, its source); None when the readings never show it held that long."""
    since: tuple[datetime, str] | None = None
    for t, ok, where in sorted(readings, key=lambda r: r[0]):
        if not ok:
            since = None
            continue
        since = since or (t, where)
        if t - since[0] >= hold:
            return since[0], since[1], t, where
    return None


def _trend(series: list[Series]) -> _Found | None:
    best: _Found | None = None
    for s in series:
        if s.kind != "gpu_memory":
            continue
        for i, p in enumerate(s.points):
            window = [q for q in s.points[: i + 1] if p.time - q.time <= TREND_WINDOW]
            if len(window) < 4 or p.time - window[0].time < TREND_MIN_SPAN:
                continue
            low = min(window, key=lambda q: q.value)
            if p.value - low.value >= TREND_POINTS and low.time < p.time:
                found = (f"GPU memory rose {p.value - low.value:.1f} points of the card in "
                         f"{span(p.time - low.time)}{' on ' + s.node if s.node else ''}",
                         f"memory delta: GPU memory up >= {TREND_POINTS:g} point(s) of the card within "
                         f"an hour (pair with a flat request rate to tell a leak from load)",
                         p.time, (low.where, p.where))
                if best is None or found[2] < best[2]:
                    best = found
                break
    return best


def _kv_high(evidence: EvidenceSet) -> _Found | None:
    by_source: dict[str, list[tuple[datetime, float, str]]] = {}
    names = set()
    for rec in evidence:
        if rec.time is None:
            continue
        if rec.kind == Kind.STATS and isinstance(rec.fields.get("kv_usage"), (int, float)):
            by_source.setdefault(rec.source, []).append((rec.time, rec.fields["kv_usage"], rec.where))
        elif rec.kind == Kind.METRIC and rec.fields.get("name") == "kv_cache_usage":
            names.add(str(rec.fields.get("metric")))
            by_source.setdefault("metrics", []).append((rec.time, float(rec.fields["value"]), rec.where))
    best = None
    for readings in by_source.values():
        readings.sort()
        since = None
        for t, v, where in readings:
            if v < KV_HIGH:
                since = None
                continue
            since = since or (t, where)
            if t - since[0] >= KV_HOLD:
                if best is None or t < best[2]:
                    best = (f"KV-cache usage at or above {KV_HIGH:.0%} since {hms(since[0])}", "", t, (since[1], where))
                break
    if best is None:
        return None
    metric = " / ".join(sorted(names)) or "vllm:gpu_cache_usage_perc (V0) or vllm:kv_cache_usage_perc (V1)"
    return best[0], f"KV cache: {metric} >= {KV_HIGH:g} for 5 min", best[2], best[3]


def _preemption(evidence: EvidenceSet) -> _Found | None:
    first = next((e for e in sorted(evidence.of(Kind.PREEMPTION), key=lambda e: (e.time is None, e.time))
                  if e.time), None)
    metric = next((e for e in evidence.of(Kind.METRIC) if e.fields.get("name") == "preemptions_total"
                   and (e.fields.get("value") or 0) > 0 and e.time), None)
    pick = min((e for e in (first, metric) if e is not None), key=lambda e: e.time, default=None)
    if pick is None:
        return None
    return ("requests preempted for lack of KV-cache space", "preemptions: increase(vllm:num_preemptions_total[5m]) > 0",
            pick.time, (pick.where,))


def _prefix_low(evidence: EvidenceSet, verdict: Verdict) -> _Found | None:
    """A low hit rate costs prefill time, not memory: an alert on it precedes only an OOM the
    verdict ties to the prefix cache."""
    if not verdict.facts.get("prefix_caching") or verdict.oom_class.value != "prefix_cache":
        return None
    readings = []
    for rec in (e for e in evidence if e.time):
        rate = rec.fields.get("prefix_hit_rate") if rec.kind == Kind.STATS else (
            rec.fields.get("value") if rec.kind == Kind.METRIC and rec.fields.get("name") == "prefix_cache_hit_rate"
            and not rec.fields.get("disabled") else None)
        if isinstance(rate, (int, float)) and rate >= 0:
            readings.append((rec.time, rate < PREFIX_LOW, rec.where))
    held = held_for(readings, PREFIX_LOW_HOLD)
    if held is None:
        return None
    since, since_where, fired, fired_where = held
    return (f"prefix-cache hit rate below {PREFIX_LOW:.0%} with prefix caching on, from {hms(since)}",
            f"prefix cache: hit rate < {PREFIX_LOW:.0%} while prefix caching is on, for {span(PREFIX_LOW_HOLD)}",
            fired, (since_where, fired_where))


# -- helpers ----------------------------------------------------------------------------------

def excerpt(text: str, limit: int = 180) -> str:
    """One line, at most `limit` characters, masked before it is cut (half a secret would no
    longer be recognisable as one)."""
    text = " ".join(redact_output(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
