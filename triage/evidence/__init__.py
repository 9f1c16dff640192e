"""Evidence parsers, registered in one place, and `load_evidence` which routes inputs to them.

Content decides, not the file name: each parser sniffs the first 64 KiB and the best score
wins; any other text is read as a log. Unreadable, binary, empty or over-long inputs named by
the user are errors (one line, exit 1); inside a directory they are skipped with a warning.
"""
from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Iterable, Sequence

from ..bundle import RELAUNCH_DIR, read_incident, zone
from ..errors import BadInput
from ..model import EvidenceSet, SourceInfo
from ..safefile import NotRegular
from ..timeref import MAX_YEAR, MIN_YEAR, TimeReference, default_reference, future_warning, in_future, parse_iso
from ..units import noting_dropped
from .base import InputFile, ParseContext, input_limit, is_json_log, json_head, looks_binary

# Parser modules, tried in this order (ties go to the earlier one). "logs" is the fallback.
PARSER_MODULES: tuple[str, ...] = (
    "prometheus", "memory_stats", "nvidia_smi", "kubernetes", "alertmanager", "logs",
)

# Files in a bundle that are not evidence, and extensions no evidence comes in.
_NOT_EVIDENCE = {"incident.yaml", "incident.yml", "expected.yaml", "expected.yml", "readme.md", "notes.jsonl",
                 "actions.jsonl"}
_NOT_EVIDENCE_EXT = {".md", ".py", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".html", ".css", ".js",
                     ".zip", ".tar", ".tgz", ".whl", ".so", ".pyc", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".lock",
                     ".pickle", ".pkl", ".pt", ".bin", ".safetensors"}


def parsers() -> list[ModuleType]:
    mods = []
    for name in PARSER_MODULES:
        try:
            mods.append(import_module(f".{name}", __name__))
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(name):
                continue  # a parser module not present in this build
            raise
    return mods


def pick_parser(src: InputFile, mods: Sequence[ModuleType]) -> ModuleType:
    head = src.head()
    best, best_score = None, 0
    for mod in mods:
        try:
            score = mod.sniff(head, src.name)
        except Exception:  # a sniffer must never sink the run
            score = 0
        if score > best_score:
            best, best_score = mod, score
    assert best is not None
    return best


def expand(paths: Sequence[str], stdin_data: bytes | None = None,
           spool: list[str] | None = None) -> tuple[list[InputFile], Path | None]:
    """Turn CLI paths into input files. Returns (inputs, bundle root if one was given).

    Streams that are not regular files (stdin, `<(kubectl logs ...)`, a FIFO) are copied to a
    temporary file first, in bounded memory; `spool` collects those paths for the caller to remove.
    """
    inputs: list[InputFile] = []
    bundle: Path | None = None
    seen: set[str] = set()
    for given in paths:
        if given == "-":
            if stdin_data is not None:
                inputs.append(InputFile(display="-", path=None, data=stdin_data))
            else:
                inputs.append(InputFile(display="-", path=_spool(sys.stdin.buffer, spool)))
            continue
        p = Path(given)
        if not p.exists():
            raise BadInput(given, "no such file or directory")
        if p.is_dir():
            if (p / "incident.yaml").exists() or (p / "incident.yml").exists():
                bundle = bundle or p
            found = _walk(p)
            if not found:
                raise BadInput(given, "directory holds no files")
            for f, rel, real in found:
                if real in seen:
                    continue   # a symlink to a file already read
                seen.add(real)
                display = rel if len(paths) == 1 else os.path.join(given, rel)
                inputs.append(InputFile(display=display, path=f, explicit=False))
        else:
            if not os.access(p, os.R_OK):
                raise BadInput(given, "not readable (permission denied)")
            if not p.is_file():   # a pipe from process substitution, a FIFO, a device
                try:
                    with open(p, "rb") as stream:
                        inputs.append(InputFile(display=given, path=_spool(stream, spool)))
                except OSError as exc:
                    raise BadInput(given, f"cannot read: {exc.strerror or exc}") from None
                continue
            real = os.path.realpath(p)
            if real in seen:
                continue   # named again, or inside a directory already given: read once
            seen.add(real)
            inputs.append(InputFile(display=given, path=str(p)))
    return inputs, bundle


# Sub-directories of a bundle written after the failure: what happened after the incident must
# not change its diagnosis.
_NOT_EVIDENCE_DIRS = {RELAUNCH_DIR}


def _derived(name: str) -> bool:
    """Files triage itself writes into a bundle (postmortem.md and its chart, timeline exports)."""
    lower = name.lower()
    return lower.startswith(("postmortem", "timeline")) and lower.endswith((".md", ".svg", ".csv", ".json"))


def _walk(root: Path) -> list[tuple[str, str, str]]:
    """(path, path relative to root, real path) of every regular file under root, in name order.

    Hidden entries and the directories triage writes (recovery/) are left out; so are FIFOs and
    sockets, and symlinked directories are not followed. One scandir per directory: the file
    type comes with the entry, and the real path is computed only for symlinks (a directory of
    100,000 files costs no stat per file)."""
    out: list[tuple[str, str, str]] = []
    real_root = os.path.realpath(root)
    pending = [(str(root), "", real_root)]
    while pending:
        here, rel_here, real_here = pending.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue              # a sub-directory that cannot be listed holds no evidence we can read
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = os.path.join(rel_here, entry.name) if rel_here else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not (not rel_here and entry.name in _NOT_EVIDENCE_DIRS):
                        subdirs.append((entry.path, rel, os.path.join(real_here, entry.name)))
                elif entry.is_file():   # no FIFOs or sockets inside a bundle; a symlink to a file is one
                    link = entry.is_symlink()
                    out.append((entry.path, rel, os.path.realpath(entry.path) if link else
                                os.path.join(real_here, entry.name)))
            except OSError:
                continue
        pending.extend(reversed(subdirs))
    return out


def _spool(stream, spool: list[str] | None) -> str:
    """Copy a stream to a temporary file (1 MiB at a time) and return its path."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="triage-stdin-")
    if spool is not None:
        spool.append(path)
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            out.write(chunk)
    return path


def time_reference(bundle: Path | None, year: int | None, tz_name: str | None,
                   problems: list[str] | None = None) -> TimeReference:
    """`problems` collects what in incident.yaml could not be used (it is then ignored)."""
    tz = tz_source = None
    if tz_name:
        tz, tz_source = zone(tz_name, "--tz"), f"{tz_name} (--tz)"
    if bundle is not None:
        meta, meta_path = read_incident(bundle)
        created = parse_iso(str(meta.get("created", ""))) if meta.get("created") else None
        if meta.get("created") and created is None and problems is not None:
            problems.append(f"{meta_path}: created: {str(meta['created'])[:60]!r} is not a time from {MIN_YEAR} to "
                            f"{MAX_YEAR} (use e.g. 2026-03-12T14:17:05Z); ignored")
        if tz is None and meta.get("timezone"):
            try:
                tz, tz_source = zone(str(meta["timezone"]), meta_path or bundle), f"{meta['timezone']} (incident.yaml)"
            except BadInput:
                tz = None
        if created is not None and year is None:
            ref = default_reference(None, tz, tz_source)
            return TimeReference(created, "incident.yaml", ref.tz, ref.tz_source, None)
    return default_reference(year, tz, tz_source)


def scrape(url: str, timeout: float = 10.0) -> InputFile:
    """A live /metrics scrape as an input (dated now, in UTC)."""
    from datetime import datetime, timezone

    import requests   # only this option needs HTTP: keep it off the cold path

    try:
        resp = requests.get(url, timeout=timeout)
        resp.raise_for_status()
    except requests.RequestException as exc:
        raise BadInput(url, f"cannot scrape: {exc.__class__.__name__}: {exc}") from None
    return InputFile(display=url, path=None, data=resp.content, taken_at=datetime.now(timezone.utc))


def load_evidence(paths: Sequence[str], *, year: int | None = None, tz: str | None = None,
                  stdin_data: bytes | None = None, progress=None, extra: Sequence[InputFile] = (),
                  require: bool = True, max_bytes: int | None = None) -> EvidenceSet:
    """Parse every input into one EvidenceSet (records in order of appearance).

    `require=False` returns an empty set instead of failing when no input holds evidence (a
    timeline can still be built from an incident's notes and recovery log). `max_bytes` caps
    what a compressed input may expand to (default: base.input_limit())."""
    input_limit(max_bytes)      # an unreadable $TRIAGE_MAX_INPUT_BYTES: one line before anything is read
    spooled: list[str] = []
    try:
        return _load(paths, year, tz, stdin_data, progress, spooled, extra, require, max_bytes)
    finally:
        for path in spooled:   # nothing is left behind
            try:
                os.unlink(path)
            except OSError:
                pass


def _load(paths, year, tz, stdin_data, progress, spooled: list[str], extra: Sequence[InputFile],
          require: bool = True, max_bytes: int | None = None) -> EvidenceSet:
    inputs, bundle = expand(paths, stdin_data, spooled)
    inputs += list(extra)
    for src in inputs:
        src.max_bytes = max_bytes
    result = EvidenceSet()
    skipped: list[tuple[str, str]] = []     # (file found in a directory, why it was not read)
    try:
        times = time_reference(bundle, year, tz, result.warnings)
    except NotRegular as exc:      # a FIFO as incident.yaml: read the evidence without it
        result.warnings.append(f"{exc}; skipped")
        times = time_reference(None, year, tz)
    ctx = ParseContext(times=times, progress=progress)
    mods = parsers()
    used = 0
    # (log, parser, index in result.sources, its records) for logs whose year is a guess
    weak_logs: list[tuple[InputFile, ModuleType, int, list]] = []
    log_records: set[int] = set()   # id() of every record a log parser made
    live_records: set[int] = set()  # id() of every record read live (a --metrics-url scrape): dated now
    for src in inputs:
        if not src.explicit and (src.name.lower() in _NOT_EVIDENCE or _derived(src.name)):
            continue   # a bundle's own metadata (incident.yaml, README.md, ...): not worth a warning
        reason = _skip_reason(src)
        if reason:
            if src.explicit:
                raise BadInput(src.display, reason)
            skipped.append((src.display, reason))
            continue
        mod = pick_parser(src, mods)
        if mod.NAME == "log" and json_head(src.head()) and not is_json_log(src.head()):
            # JSON that no structured parser claimed: say why instead of reading it as a log.
            try:
                problem = _unclaimed_json(src)
            except BadInput as exc:
                if src.explicit:
                    raise
                problem = exc.problem
            if src.explicit:
                raise BadInput(src.display, problem)
            skipped.append((src.display, problem))
            continue
        used += 1
        src_times = times
        if times.year_source == "today" and src.path is not None and src.display != "-":
            mtime = src.mtime()
            if mtime is not None:
                src_times = times.with_reference(mtime, "file mtime")
        ctx.times = src_times
        before = len(result.items)
        with noting_dropped() as dropped:
            try:
                result.extend(mod.parse(src, ctx))
            except BadInput as exc:
                if src.explicit:
                    raise
                # A damaged file inside a bundle (a cut .gz, say): keep what was read, say so.
                result.warnings.append(f"{src.display}: {exc.problem} (kept the {len(result.items) - before} records read)")
        if dropped.count:
            result.warnings.append(f"{src.display}: {dropped.note()}")
        count = len(result.items) - before
        if src.taken_at is not None:
            live_records.update(id(e) for e in result.items[before:])
        note = src_times.note() if mod.NAME == "log" else None
        if mod.NAME == "log":
            log_records.update(id(e) for e in result.items[before:])
            if src_times.year_source in WEAK_YEAR_SOURCES and count:
                weak_logs.append((src, mod, len(result.sources), result.items[before:]))
        result.sources.append(SourceInfo(src.display, mod.NAME, count, note))
    result.items.sort(key=lambda e: e.seq)   # held-back stats lines rejoin their place in time
    # A scrape taken now says when triage ran, not when the incident happened: it dates no log.
    undated = log_records | live_records
    dated = [e for e in result.items if e.time is not None and id(e) not in undated]
    for src, mod, at, own in weak_logs:
        _align_year(result, src, mod, at, own, dated, ctx, times)
    result.warnings += _summarise_quiet(result, skipped, {i.display for i in inputs if not i.explicit})
    result.warnings += _future_logs(result, times.tz_source)
    if used == 0 and require:
        where = ", ".join(paths) or ", ".join(i.display for i in inputs)
        raise BadInput(where, "no evidence files found (expected server logs, /metrics scrapes, nvidia-smi output, "
                              "memory_stats JSON, dmesg, kubectl pod JSON or Alertmanager payloads)")
    return result


# A year taken from these is a guess: a bundle copied or re-read months later has new mtimes.
WEAK_YEAR_SOURCES = ("file mtime", "today")
FAR_APART_DAYS = 180


def _align_year(result: EvidenceSet, src: InputFile, mod: ModuleType, at: int, own: list, dated: list,
                ctx: ParseContext, times: TimeReference) -> None:
    """Re-read a year-less log in the year of the bundle's dated evidence when its guessed year
    puts it far from that evidence.

    vLLM's `MM-DD HH:MM:SS` has no year, so it comes from the file's mtime; nvidia-smi CSV,
    Kubernetes, Alertmanager and scrape timestamps carry theirs. When those dates and the log's
    guessed ones are half a year or more apart, the log belongs to their year (an incident
    analysed after the files were copied), and a timeline or trend across the two would
    otherwise be meaningless. `own` is the log's records, `dated` the timed records no log
    parser made."""
    mine = [e.time for e in own if e.time is not None]
    theirs = [e.time for e in dated]
    if not theirs or not mine or _gap_days(mine, theirs) < FAR_APART_DAYS:
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
    if not new_times or _gap_days(new_times, theirs) >= _gap_days(mine, theirs):
        return
    gone = {id(e) for e in own}
    result.items = [e for e in result.items if id(e) not in gone] + again
    result.items.sort(key=lambda e: e.seq)            # stable: the re-read takes its old place
    info = result.sources[at]
    years = "/".join(str(y) for y in sorted({t.year for t in new_times}))
    note = f"year-less times read as {years} (nearest the dates in {latest.source}); zone {times.tz_source}"
    result.sources[at] = SourceInfo(info.path, info.kind, len(again), note)


def _future_logs(result: EvidenceSet, tz_source: str) -> list[str]:
    """A warning per log whose times lie ahead of now: read in the wrong zone, most likely."""
    logs = {s.path for s in result.sources if s.kind == "log"}
    latest: dict[str, datetime] = {}
    for e in result.items:
        if e.time is not None and e.source in logs and (e.source not in latest or e.time > latest[e.source]):
            latest[e.source] = e.time
    return [future_warning(src, t, tz_source) for src, t in sorted(latest.items()) if in_future(t)]


# Up to this many files of one kind of skip are named one per line; more are summarised in one
# line with a count and a few names (a directory of 100,000 unrelated files is one line, not 100,000).
LIST_SKIPPED = 5
# Files of a directory that were read as logs but held nothing: listed as inputs up to this many;
# beyond it they leave the list of inputs and are counted in one line.
LIST_EMPTY = 20
SKIP_EXAMPLES = 3


def _summarise_quiet(result: EvidenceSet, skipped: list[tuple[str, str]], found: set[str]) -> list[str]:
    """The warnings for files of a directory that gave nothing: skipped ones by reason, and (when
    there are many) the ones read as logs without a single record, which then leave result.sources."""
    by_reason: dict[str, list[str]] = {}
    for display, reason in skipped:
        by_reason.setdefault(reason, []).append(display)
    empty = [s.path for s in result.sources if s.records == 0 and s.kind == "log" and s.path in found]
    if len(empty) > LIST_EMPTY:
        gone = set(empty)
        result.sources = [s for s in result.sources if s.path not in gone]
        by_reason["nothing recognised in them"] = empty
    lines = []
    for reason, names in by_reason.items():
        if len(names) <= LIST_SKIPPED:
            lines += [f"{name}: skipped ({reason})" for name in names]
        else:
            shown = ", ".join(names[:SKIP_EXAMPLES])
            lines.append(f"{len(names):,} files (e.g. {shown}, …): skipped ({reason})")
    return lines


def _gap_days(ours: list, theirs: list) -> float:
    """Days between two time ranges (0 when they overlap)."""
    lo, hi = min(ours), max(ours)
    their_lo, their_hi = min(theirs), max(theirs)
    if hi < their_lo:
        return (their_lo - hi).total_seconds() / 86400
    if lo > their_hi:
        return (lo - their_hi).total_seconds() / 86400
    return 0.0


def _unclaimed_json(src: InputFile) -> str:
    src.read_json()   # raises BadInput for truncated / invalid JSON
    return ("JSON of an unrecognised kind (expected torch memory_stats, kubectl pod/events, "
            "an Alertmanager payload, or NVML readings)")


def _skip_reason(src: InputFile) -> str | None:
    name = src.name.lower()
    if not src.explicit:
        if name in _NOT_EVIDENCE or Path(name).suffix in _NOT_EVIDENCE_EXT:
            return "not an evidence file"
    elif Path(name).suffix in _NOT_EVIDENCE_EXT - {".yaml", ".yml"}:
        return f"a {Path(name).suffix} file is not evidence (give a log, a scrape, or a bundle directory)"
    try:
        size = src.size()
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if size == 0:
        return "empty file"
    try:
        head = src.head()
    except BadInput as exc:
        return exc.problem
    except PermissionError:
        return "not readable (permission denied)"
    if not head.strip():
        return "empty file (only whitespace)"
    if looks_binary(head):
        return "binary data, not a text log or JSON"
    return None

