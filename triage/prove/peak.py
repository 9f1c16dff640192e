"""The incident's own peak load, read from its evidence records (never from raw text: the
parsers already did that).

- concurrency: the most requests the server held at once, running + waiting, over every stats
  line (the scheduler-stats dump at a crash included);
- prompt length: at the stats line with the fullest KV cache, the KV tokens in use per running
  request (KV usage x the cache's capacity in tokens / running) — the sequences the incident was
  holding when memory peaked, prompt and what had been generated so far;
- output length: vLLM logs none, so a default (or the flag), said as such.

Each figure cites the line it came from; a figure the evidence lacks is left to the caller's
flag or the default, and the profile then says it is not the incident's peak.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

from ..evidence.kinds import Kind
from ..model import Evidence
from .profile import DEFAULT_OUTPUT_TOKENS, EVIDENCE, Figure, LoadProfile, defaults


def peak_profile(records: Iterable[Evidence], facts: Mapping[str, Any] | None = None) -> LoadProfile:
    facts = facts or {}
    items = list(records)
    stats = [r for r in items if r.kind == Kind.STATS.value and _num(r.fields.get("running")) is not None]
    launch = facts.get("launch_args") if isinstance(facts.get("launch_args"), dict) else {}
    model = launch.get("model") if isinstance(launch.get("model"), str) else None
    profile = defaults(model)
    notes: list[str] = []
    if stats:
        top = max(stats, key=lambda r: (_load(r), _num(r.fields.get("kv_usage")) or 0.0))
        running, waiting = int(_num(top.fields.get("running")) or 0), int(_num(top.fields.get("waiting")) or 0)
        if running + waiting >= 1:
            profile = replace(profile, concurrency=Figure(running + waiting, f"{top.where} (running {running} + "
                                                                              f"waiting {waiting})", EVIDENCE))
    else:
        notes.append("no stats lines in the evidence: the incident's concurrency is unknown")
    capacity = _kv_tokens(items, facts)
    per_seq = _tokens_per_sequence(stats, capacity)
    if per_seq is not None:
        tokens, rec = per_seq
        usage = _num(rec.fields.get("kv_usage")) or 0.0
        profile = replace(profile, prompt_tokens=Figure(
            tokens, f"{rec.where} (KV {usage:.1%} of {capacity} tokens / {int(_num(rec.fields.get('running')) or 0)} "
                    "running)", EVIDENCE))
    elif stats:
        notes.append("no KV-cache capacity or usage in the evidence: the incident's prompt length is unknown")
    notes.append(f"output length: vLLM's log does not record it; {DEFAULT_OUTPUT_TOKENS} tokens unless "
                 "--output-tokens says otherwise")
    return replace(profile, notes=tuple(notes))


def _load(rec: Evidence) -> float:
    return (_num(rec.fields.get("running")) or 0.0) + (_num(rec.fields.get("waiting")) or 0.0)


def _kv_tokens(items: list[Evidence], facts: Mapping[str, Any]) -> int | None:
    known = _num(facts.get("kv_cache_tokens"))
    if known:
        return int(known)
    found = [r for r in items if r.kind == Kind.KV_CAPACITY.value and _num(r.fields.get("kv_tokens"))]
    return int(_num(found[-1].fields["kv_tokens"]) or 0) or None if found else None


def _tokens_per_sequence(stats: list[Evidence], capacity: int | None) -> tuple[int, Evidence] | None:
    if not capacity:
        return None
    usable = [r for r in stats if (_num(r.fields.get("running")) or 0) >= 1 and _num(r.fields.get("kv_usage"))]
    if not usable:
        return None
    rec = max(usable, key=lambda r: (_num(r.fields.get("kv_usage")) or 0.0, _load(r)))
    tokens = (_num(rec.fields.get("kv_usage")) or 0.0) * capacity / (_num(rec.fields.get("running")) or 1.0)
    return max(1, int(round(tokens))), rec


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
