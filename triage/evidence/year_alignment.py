"""Year-less logs whose guessed year is wrong: re-read in the year of the bundle's dated evidence,
and a warning for a log whose times lie ahead of now."""
from __future__ import annotations

from datetime import datetime, timedelta
from types import ModuleType

from ..errors import BadInput
from ..model import Evidence, EvidenceSet, SourceInfo
from ..timeref import TimeReference, future_warning, in_future
from .base import InputFile, ParseContext

# A year taken from these is a guess: a bundle copied or re-read months later has new mtimes.
WEAK_YEAR_SOURCES = ("file mtime", "today")
FAR_APART_DAYS = 180


def align_year(result: EvidenceSet, src: InputFile, mod: ModuleType, at: int, own: list[Evidence],
               dated: list[Evidence], ctx: ParseContext, times: TimeReference) -> None:
    """Re-read a year-less log in the year of the bundle's dated evidence when its guessed year
    puts it far from that evidence.

    vLLM's `MM-DD HH:MM:SS` has no year, so it comes from the file's mtime; nvidia-smi CSV,
    Kubernetes, Alertmanager and scrape timestamps carry theirs. When those dates and the log's
    guessed ones are half a year or more apart, the log belongs to their year (an incident
    analysed after the files were copied), and a timeline or trend across the two would
    otherwise be meaningless. `own` is the log's records, `dated` the timed records no log
    parser made; `at` is the log's index in result.sources."""
    mine = [e.time for e in own if e.time is not None]
    theirs = [e.time for e in dated]
    if not theirs or not mine or gap_days(mine, theirs) < FAR_APART_DAYS:
        return
    latest = max(dated, key=lambda e: e.time)
    # Each year-less date lands in the half-year either side of the latest dated record: a log
    # that runs on for days after the last reading stays in that reading's year.
    aligned = times.with_reference(latest.time + timedelta(days=FAR_APART_DAYS), f"dates in {latest.source}")
    try:
        with ctx.rereading(aligned, first_seq=min(e.seq for e in own)):
            again = sorted(mod.parse(src, ctx), key=lambda e: e.seq)
    except BadInput:
        return
    new_times = [e.time for e in again if e.time is not None]
    if not new_times or gap_days(new_times, theirs) >= gap_days(mine, theirs):
        return
    gone = {id(e) for e in own}
    result.items = [e for e in result.items if id(e) not in gone] + again
    result.items.sort(key=lambda e: e.seq)            # stable: the re-read takes its old place
    info = result.sources[at]
    years = "/".join(str(y) for y in sorted({t.year for t in new_times}))
    note = f"year-less times read as {years} (nearest the dates in {latest.source}); zone {times.tz_source}"
    result.sources[at] = SourceInfo(info.path, info.kind, len(again), note)


def future_logs(result: EvidenceSet, tz_source: str) -> list[str]:
    """A warning per log whose times lie ahead of now: read in the wrong zone, most likely."""
    logs = {s.path for s in result.sources if s.kind == "log"}
    latest: dict[str, datetime] = {}
    for e in result.items:
        if e.time is not None and e.source in logs and (e.source not in latest or e.time > latest[e.source]):
            latest[e.source] = e.time
    return [future_warning(src, t, tz_source) for src, t in sorted(latest.items()) if in_future(t)]


def gap_days(ours: list[datetime], theirs: list[datetime]) -> float:
    """Days between two time ranges (0 when they overlap)."""
    lo, hi = min(ours), max(ours)
    their_lo, their_hi = min(theirs), max(theirs)
    if hi < their_lo:
        return (their_lo - hi).total_seconds() / 86400
    if lo > their_hi:
        return (lo - their_hi).total_seconds() / 86400
    return 0.0
