"""Raw events -> timeline rows (pandas): duplicates merged, repeats collapsed, per node.

Three passes, all on one identity (kind, node, key):
1. the same second in the same file is one occurrence (four tensor-parallel workers logging
   the same line, a traceback's OOM and its re-raise); a preemption warning is one per
   sequence group, so there every line is counted;
2. the same event in other files within MERGE_WINDOW is that occurrence seen elsewhere (the
   engine dying in the log and the container ending in kubectl): one row, every source listed;
   (an occurrence with no node joins the one named node that saw the same event);
3. occurrences that repeat with nothing in between but signals (no failure or recovery on that
   node) are one row with a count and a span: a thousand preemption warnings are one row.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .model import Event
from .raw import Raw

MERGE_WINDOW = timedelta(seconds=60)
# A server start-up writes several start lines over a few seconds (version, "Starting to load
# model" per worker, the shard progress bar): within the window they are one start, even in one file.
_ONE_PER_WINDOW = frozenset({"server_start", "restart", "startup_complete"})
# One crash writes its failure lines within seconds (every tensor-parallel worker, the kernel's
# multi-line OOM-killer report): in one file, that close together, they are one failure.
CRASH_WINDOW = timedelta(seconds=10)
_BREAKERS = frozenset({"failure", "recovery"})     # a repeat run does not continue across these
# Kinds where every line is an occurrence of its own, even several in one second: the scheduler
# preempts many sequence groups in one step and warns once for each. Their count is of lines.
_EACH_LINE = frozenset({"preemption"})


def merge(raws: list[Raw]) -> list[Event]:
    if not raws:
        return []
    import pandas as pd

    # Built column by column (a dict per row would cost ~1 KB each: a log with 10^5 preemption
    # warnings would hold 100 MB of them); string cells are shared with the raws, not copied.
    df = pd.DataFrame({
        "time": [r.time for r in raws], "kind": [r.kind for r in raws],
        "category": [r.category for r in raws], "text": [r.text for r in raws], "file": [r.file for r in raws],
        "node": [r.node or "" for r in raws], "key": [r.key for r in raws], "order": [r.order for r in raws],
        "until": [r.until for r in raws], "weight": [r.weight for r in raws],
        "sources": [(r.source, *r.extra_sources) if r.extra_sources else (r.source,) for r in raws],
    })
    df["time"] = pd.to_datetime(df["time"], utc=True)
    df["until"] = pd.to_datetime(df["until"], utc=True)      # None -> NaT, which max() skips
    df["second"] = df["time"].dt.floor("s")
    df = df.sort_values(["time", "order"], kind="stable")
    ident = ["kind", "node", "key"]
    # Pass 1: one occurrence per identity, file and second.
    occ = (df.groupby(ident + ["file", "second"], sort=False, dropna=False)
             .agg(time=("time", "min"), order=("order", "min"), category=("category", "first"),
                  text=("text", "first"), until=("until", "max"), sources=("sources", _concat),
                  lines=("weight", "sum"))
             .reset_index()
             .sort_values(["time", "order"], kind="stable"))
    # Pass 2: across files within the window.
    clusters: list[dict[str, Any]] = []
    for _, group in occ.groupby(ident, sort=False, dropna=False):
        current: dict[str, Any] | None = None
        for row in group.itertuples(index=False):
            gap = row.time - current["time"] if current is not None else None
            if gap is not None and gap <= MERGE_WINDOW and (
                    row.file not in current["files"] or row.kind in _ONE_PER_WINDOW
                    or (row.category == "failure" and gap <= CRASH_WINDOW)):
                current["files"].add(row.file)
                current["sources"] += row.sources
                current["until"] = _later(current["until"], row.until)
                current["lines"] += int(row.lines)
                continue
            current = {"kind": row.kind, "node": row.node, "key": row.key, "time": row.time, "order": row.order,
                       "category": row.category, "text": row.text, "until": _opt(row.until),
                       "files": {row.file}, "sources": list(row.sources), "lines": int(row.lines)}
            clusters.append(current)
    clusters = _adopt_unplaced(clusters)
    # Pass 3: repeats with no failure or recovery of another identity on the node in between.
    breakers: dict[str, list[tuple[datetime, tuple]]] = {}
    for c in clusters:
        if c["category"] in _BREAKERS:
            breakers.setdefault(c["node"], []).append((c["time"], (c["kind"], c["node"], c["key"])))
    runs: dict[tuple, list[list[dict[str, Any]]]] = {}
    for c in sorted(clusters, key=lambda c: (c["time"], c["order"])):
        identity = (c["kind"], c["node"], c["key"])
        chain = runs.setdefault(identity, [])
        if chain and not _broken(breakers.get(c["node"], ()), identity, chain[-1][-1]["time"], c["time"]):
            chain[-1].append(c)
        else:
            chain.append([c])
    rows = [_event(run) for chain in runs.values() for run in chain]
    rows.sort(key=lambda pair: (pair[0].time, pair[1]))
    return [event for event, _ in rows]


def _adopt_unplaced(clusters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An occurrence with no node (a single server's `logs/vllm.log`, dmesg) joins the same event
    on a named node (kubectl's pod) when exactly one such node saw it, from other files, within
    the window: dmesg's OOM kill and the pod's OOMKilled are one row."""
    placed: dict[tuple, list[dict[str, Any]]] = {}
    for c in clusters:
        if c["node"]:
            placed.setdefault((c["kind"], c["key"]), []).append(c)
    out = []
    for c in clusters:
        if not c["node"]:
            near = [p for p in placed.get((c["kind"], c["key"]), ())
                    if abs(p["time"] - c["time"]) <= MERGE_WINDOW and not (p["files"] & c["files"])]
            if len({p["node"] for p in near}) == 1 and len(near) == 1:
                target = near[0]
                target["sources"] = c["sources"] + target["sources"] if c["time"] <= target["time"] \
                    else target["sources"] + c["sources"]
                if c["time"] < target["time"]:
                    target.update(time=c["time"], order=c["order"], text=c["text"])
                target["files"] |= c["files"]
                target["until"] = _later(target["until"], c["until"])
                target["lines"] += c["lines"]
                continue
        out.append(c)
    return out


def _broken(breakers, identity: tuple, after, before) -> bool:
    return any(after < t < before and other != identity for t, other in breakers)


def _event(run: list[dict[str, Any]]) -> tuple[Event, int]:
    first, last = run[0], run[-1]
    if len(run) == 1:
        sources = _unique(first["sources"])
        until = first["until"]
    else:
        # Every file once (its first line), then the first and last occurrence in full.
        sources = _unique(first["sources"] + [c["sources"][0] for c in run[1:-1]
                                              if c["files"] - first["files"]] + last["sources"])
        until = max(c["until"] or c["time"] for c in run)
    count = sum(c["lines"] for c in run) if first["kind"] in _EACH_LINE else len(run)
    if count > 1 and until is None:          # several in one second: the span is that second
        until = max(c["time"] for c in run)
    event = Event(time=_py(first["time"]), kind=first["kind"], category=first["category"], text=first["text"],
                  sources=tuple(sources), node=first["node"] or None, count=count,
                  until=_py(until) if until is not None else None)
    return event, first["order"]


def _concat(values) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(v)
    return out


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _opt(value):
    import pandas as pd

    return None if value is None or (not isinstance(value, list) and pd.isna(value)) else value


def _later(a, b):
    a, b = _opt(a), _opt(b)
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _py(value) -> datetime:
    """pandas Timestamp -> datetime (UTC, aware)."""
    return value.to_pydatetime() if hasattr(value, "to_pydatetime") else value
