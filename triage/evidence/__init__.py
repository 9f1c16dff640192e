"""Evidence parsers, registered in one place, and `load_evidence` which routes inputs to them.

Content decides, not the file name: each parser sniffs the first 64 KiB and the best score
wins; any other text is read as a log. Unreadable, binary, empty or over-long inputs named by
the user are errors (one line, exit 1); inside a directory they are skipped with a warning.
"""
from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta, timezone
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Iterable, Sequence

from ..bundle import RELAUNCH_DIR, read_incident, zone
from ..errors import BadInput
from ..model import EvidenceSet, SourceInfo
from ..timeref import MAX_YEAR, MIN_YEAR, TimeReference, default_reference, future_warning, in_future, parse_iso
from ..units import noting_dropped
from .base import InputFile, ParseContext, input_limit, is_json_log, json_head, looks_binary

# Parser modules, tried in this order (ties go to the earlier one). "logs" is the fallback.
PARSER_MODULES: tuple[str, ...] = (
    "prometheus", "memory_stats", "nvidia_smi", "kubernetes", "alertmanager", "logs",
)

# Files in a bundle that are not evidence, and extensions no evidence comes in.
_NOT_EVIDENCE = {"incident.yaml", "incident.yml", "expected.yaml", "expected.yml", "readme.md", "notes.jsonl",
                 "actions.jsonl",
                 "manifest.json", "nvml.json",                      # written by `triage collect`
                 # a model's own files (`triage plan` reads them; samples/models/ holds some)
                 "config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
                 "preprocessor_config.json", "model.safetensors.index.json"}
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


class ArchiveBundle:
    """An incident bundle packed in an archive: where its incident.yaml is and what it holds."""

    def __init__(self, display: str, raw: bytes):
        self.display = display
        self.raw = raw


def expand(paths: Sequence[str], stdin_data: bytes | None = None,
           spool: list[str] | None = None,
           max_bytes: int | None = None) -> tuple[list[InputFile], Path | ArchiveBundle | None]:
    """Turn CLI paths into input files. Returns (inputs, bundle root if one was given).

    Streams that are not regular files (stdin, `<(kubectl logs ...)`, a FIFO) are copied to a
    temporary file first, in bounded memory; `spool` collects those paths for the caller to remove.
    A path that cannot be read (not there, permission denied, an empty directory) is an input
    with its `error` set: the others are still read. An archive (.tar.gz, .zip, ...) is read in
    place: its members are inputs of their own (see evidence.archive).
    """
    inputs: list[InputFile] = []
    bundle: Path | ArchiveBundle | None = None
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
            inputs.append(InputFile(display=given, path=None, error="no such file or directory"))
            continue
        if p.is_dir():
            if (p / "incident.yaml").exists() or (p / "incident.yml").exists():
                bundle = bundle or p
            found = _walk(p)
            if not found:
                inputs.append(InputFile(display=given, path=None, error="directory holds no files"))
                continue
            for f, rel, real in found:
                if real in seen:
                    continue   # a symlink to a file already read
                seen.add(real)
                display = rel if len(paths) == 1 else os.path.join(given, rel)
                inputs.append(InputFile(display=display, path=f, explicit=False))
        else:
            if not os.access(p, os.R_OK):
                inputs.append(InputFile(display=given, path=None, error="not readable (permission denied)"))
                continue
            if not p.is_file():   # a pipe from process substitution, a FIFO, a device
                try:
                    with open(p, "rb") as stream:
                        inputs.append(InputFile(display=given, path=_spool(stream, spool)))
                except OSError as exc:
                    inputs.append(InputFile(display=given, path=None, error=f"cannot read: {exc.strerror or exc}"))
                continue
            real = os.path.realpath(p)
            if real in seen:
                continue   # named again, or inside a directory already given: read once
            seen.add(real)
            packed = _archive(given, max_bytes)
            if packed is None:
                inputs.append(InputFile(display=given, path=str(p)))
                continue
            members, meta = packed
            inputs += members
            if meta is not None:
                bundle = bundle or meta
    return inputs, bundle


def _archive(given: str, max_bytes: int | None) -> tuple[list[InputFile], ArchiveBundle | None] | None:
    """The members of the archive at `given` as inputs (None when it is no archive)."""
    from .archive import MAX_REFUSED_NAMED, archive_kind, list_archive

    cap, explicit_cap = input_limit(max_bytes)
    kind = archive_kind(given, cap)
    if kind is None:
        return None
    try:
        listing = list_archive(given, kind, cap, explicit_cap)
    except BadInput as exc:
        return [InputFile(display=given, path=None, error=exc.problem)], None
    if listing.problem:
        return [InputFile(display=given, path=None, error=listing.problem)], None
    out = []
    refused = sorted(listing.refused, key=lambda r: r[0] != given)      # the archive's own damage first
    for name, why in refused[:MAX_REFUSED_NAMED]:
        # the archive's own damage is said as of a file named (a member refused is skipped, as in a directory)
        out.append(InputFile(display=name, path=None, error=why, explicit=name == given))
    if len(refused) > MAX_REFUSED_NAMED:
        rest = len(refused) - MAX_REFUSED_NAMED
        out.append(InputFile(display=given, path=None, explicit=False,
                             error=f"{rest:,} more members refused (links, devices, unsafe names): not read"))
    for member, data in listing.members:
        out.append(InputFile(display=f"{given}!{member.name}", path=None, data=data, member=member, explicit=False))
    if not listing.members and not listing.refused:
        return [InputFile(display=given, path=None, error="the archive holds no files")], None
    meta = ArchiveBundle(f"{given}!{listing.incident[0]}", listing.incident[1]) if listing.incident else None
    return out, meta


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


def read_bundle_meta(bundle: Path | ArchiveBundle | None) -> tuple[dict, Path | str | None]:
    """incident.yaml of a bundle directory or of a bundle packed in an archive; BadInput when it
    cannot be used (NotRegular for a FIFO or device planted there)."""
    if bundle is None:
        return {}, None
    if isinstance(bundle, ArchiveBundle):
        from ..bundle import parse_incident

        return parse_incident(bundle.raw, bundle.display), bundle.display
    return read_incident(bundle)


def time_reference(bundle: Path | ArchiveBundle | None, year: int | None, tz_name: str | None,
                   problems: list[str] | None = None, meta: tuple[dict, Path | str | None] | None = None
                   ) -> TimeReference:
    """`problems` collects what in incident.yaml could not be used (it is then ignored). `meta`:
    incident.yaml already read (read_bundle_meta), else it is read here."""
    tz = tz_source = None
    if tz_name:
        tz, tz_source = zone(tz_name, "--tz"), f"{tz_name} (--tz)"
    if bundle is not None:
        meta_doc, meta_path = meta if meta is not None else read_bundle_meta(bundle)
        created = parse_iso(str(meta_doc.get("created", ""))) if meta_doc.get("created") else None
        if meta_doc.get("created") and created is None and problems is not None:
            problems.append(f"{meta_path}: created: {str(meta_doc['created'])[:60]!r} is not a time from {MIN_YEAR} "
                            f"to {MAX_YEAR} (use e.g. 2026-03-12T14:17:05Z); ignored")
        if tz is None and meta_doc.get("timezone"):
            try:
                tz = zone(str(meta_doc["timezone"]), meta_path or str(bundle))
                tz_source = f"{meta_doc['timezone']} (incident.yaml)"
            except BadInput:
                tz = None
        if created is not None and year is None:
            ref = default_reference(None, tz, tz_source)
            return TimeReference(created, "incident.yaml", ref.tz, ref.tz_source, None)
    return default_reference(year, tz, tz_source)


# A server wedged after an OOM accepts connections and never answers: that is when --metrics-url
# is used, so a scrape gets this long, all told (connect, headers, body), then the files decide.
SCRAPE_TIMEOUT_S = 5.0
SCRAPE_TIMEOUT_ENV = "TRIAGE_SCRAPE_TIMEOUT"
MAX_SCRAPE_BYTES = 64 << 20      # a /metrics page is kilobytes; a DCGM exporter's a few MiB


def scrape_timeout() -> float:
    """$TRIAGE_SCRAPE_TIMEOUT (seconds) or SCRAPE_TIMEOUT_S; BadInput for an unreadable value."""
    raw = os.environ.get(SCRAPE_TIMEOUT_ENV, "").strip()
    if not raw:
        return SCRAPE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise BadInput(SCRAPE_TIMEOUT_ENV, f"{raw!r} is not a number of seconds (e.g. 5)")
    return value


def scrape(url: str, timeout: float | None = None) -> InputFile:
    """A live /metrics scrape as an input (dated now, in UTC).

    Never raises for the server's sake: a refused connection, an error status or no answer
    within `timeout` seconds in all (default scrape_timeout()) gives an input whose `error` says
    so, and the files are read without it. The request runs in a daemon thread so that a server
    that trickles bytes cannot hold the run past the deadline either."""
    import threading
    import time

    timeout = scrape_timeout() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    outcome: dict[str, object] = {}

    def fetch() -> None:
        import requests   # only this option needs HTTP: keep it off the cold path

        try:
            left = max(0.1, deadline - time.monotonic())
            with requests.get(url, timeout=(left, left), stream=True) as resp:
                resp.raise_for_status()
                chunks, size = [], 0
                for chunk in resp.iter_content(1 << 16):
                    size += len(chunk)
                    if size > MAX_SCRAPE_BYTES:
                        outcome["error"] = f"cannot scrape: more than {MAX_SCRAPE_BYTES >> 20} MiB (not a /metrics page?)"
                        return
                    if time.monotonic() > deadline:
                        return
                    chunks.append(chunk)
            outcome["data"] = b"".join(chunks)
        except requests.Timeout:
            pass                    # said below, in the same words as a server that trickles
        except requests.HTTPError as exc:
            outcome["error"] = f"cannot scrape: HTTP {exc.response.status_code if exc.response is not None else '?'}"
        except Exception as exc:   # refused, DNS, TLS, an odd URL: one line, never a traceback
            outcome["error"] = f"cannot scrape: {_why(exc)}"

    worker = threading.Thread(target=fetch, name="triage-scrape", daemon=True)
    worker.start()
    worker.join(timeout)
    taken = datetime.now(timezone.utc)
    if "data" in outcome:
        return InputFile(display=url, path=None, data=outcome["data"], taken_at=taken)  # type: ignore[arg-type]
    error = outcome.get("error") or (f"cannot scrape: no answer within {timeout:g} s (a wedged server?); "
                                     f"to wait longer, set {SCRAPE_TIMEOUT_ENV}=30")
    return InputFile(display=url, path=None, error=str(error), taken_at=taken)


def _why(exc: BaseException) -> str:
    """The root of a requests error in a few words (`connection refused (ConnectionError)`),
    not urllib3's nested retry message."""
    import re

    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    if found:
        return f"{found.group(1).strip().rstrip('.').lower()} ({exc.__class__.__name__})"
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


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
    inputs, bundle = expand(paths, stdin_data, spooled, max_bytes)
    inputs += list(extra)
    for src in inputs:
        src.max_bytes = max_bytes
    result = EvidenceSet()
    skipped: list[tuple[str, str]] = []     # (file found in a directory, why it was not read)
    failed: list[BadInput] = []             # inputs named by the user that could not be used
    # No single input costs the verdict: one that cannot be read is a warning naming it and an
    # entry with an `error` in result.sources (facts.inputs[]); only when nothing usable is left
    # is it an error (failed_all).
    meta = None
    try:
        meta = read_bundle_meta(bundle)
    except BadInput as exc:        # a syntax error, a FIFO as incident.yaml: read the evidence without it
        result.warnings.append(f"{exc}; skipped")
        result.sources.append(SourceInfo(exc.path, "incident", 0, error=exc.problem))
        meta = ({}, None)
    times = time_reference(bundle, year, tz, result.warnings, meta)
    ctx = ParseContext(times=times, progress=progress)
    mods = parsers()
    used = 0
    errors_listed = 0
    # (log, parser, index in result.sources, its records) for logs whose year is a guess
    weak_logs: list[tuple[InputFile, ModuleType, int, list]] = []
    log_records: set[int] = set()   # id() of every record a log parser made
    live_records: set[int] = set()  # id() of every record read live (a --metrics-url scrape): dated now

    def error_entry(src: InputFile, kind: str, problem: str, records: int = 0) -> None:
        nonlocal errors_listed
        if src.explicit or errors_listed < LIST_ERRORS:
            result.sources.append(SourceInfo(src.display, kind, records, error=problem))
            errors_listed += not src.explicit

    def refuse(src: InputFile, kind: str, problem: str, damaged: bool) -> None:
        """A file not read: an error of the run when named on the command line, else a skip
        (listed in facts.inputs when the file is damaged, not merely of another kind)."""
        if src.explicit:
            failed.append(BadInput(src.display, problem))
            result.warnings.append(f"{src.display}: {problem}")
        else:
            skipped.append((src.display, problem))
        if src.explicit or damaged:
            error_entry(src, kind, problem)

    for src in inputs:
        if src.error is not None:
            refuse(src, "prometheus" if src.taken_at is not None else "none", src.error, damaged=True)
            continue
        if not src.explicit and (src.name.lower() in _NOT_EVIDENCE or _derived(src.name)):
            continue   # a bundle's own metadata (incident.yaml, README.md, ...): not worth a warning
        reason, damaged = _skip_reason(src)
        if reason:
            refuse(src, "none", reason, damaged)
            continue
        mod = pick_parser(src, mods)
        if mod.NAME == "log" and json_head(src.head()) and not is_json_log(src.head()):
            # JSON that no structured parser claimed: say why instead of reading it as a log.
            try:
                problem, damaged = _unclaimed_json(src), False
            except BadInput as exc:
                problem, damaged = exc.problem, True
            refuse(src, "json", problem, damaged)
            continue
        src_times = times
        if times.year_source == "today" and (src.path is not None or src.member is not None) and src.display != "-":
            mtime = src.mtime()
            if mtime is not None:
                src_times = times.with_reference(mtime, "file mtime")
        ctx.times = src_times
        before = len(result.items)
        error = None
        src.notes.clear()
        with noting_dropped() as dropped:
            try:
                result.extend(mod.parse(src, ctx))
            except BadInput as exc:
                # A damaged file (a cut .gz, say): keep what was read, say so.
                error = exc.problem
                result.warnings.append(f"{src.display}: {exc.problem} (kept the {len(result.items) - before} "
                                       "records read)")
        result.warnings += [f"{src.display}: {note}" for note in src.notes]
        if dropped.count:
            result.warnings.append(f"{src.display}: {dropped.note()}")
        count = len(result.items) - before
        if error is not None and src.explicit:
            failed.append(BadInput(src.display, error))
        else:
            used += 1      # found in a directory, a damaged file's records are used; named, it failed
        if src.taken_at is not None:
            live_records.update(id(e) for e in result.items[before:])
        note = src_times.note() if mod.NAME == "log" else None
        if mod.NAME == "log":
            log_records.update(id(e) for e in result.items[before:])
            if src_times.year_source in WEAK_YEAR_SOURCES and count:
                weak_logs.append((src, mod, len(result.sources), result.items[before:]))
        result.sources.append(SourceInfo(src.display, mod.NAME, count, note, error=error))
    result.items.sort(key=lambda e: e.seq)   # held-back stats lines rejoin their place in time
    # A scrape taken now says when triage ran, not when the incident happened: it dates no log.
    undated = log_records | live_records
    dated = [e for e in result.items if e.time is not None and id(e) not in undated]
    for src, mod, at, own in weak_logs:
        _align_year(result, src, mod, at, own, dated, ctx, times)
    result.warnings += _summarise_quiet(result, skipped, {i.display for i in inputs if not i.explicit})
    result.warnings += _future_logs(result, times.tz_source)
    if used == 0 and require:
        if failed:
            raise failed_all(failed)
        where = ", ".join(paths) or ", ".join(i.display for i in inputs)
        raise BadInput(where, "no evidence files found (expected server logs, /metrics scrapes, nvidia-smi output, "
                              "memory_stats JSON, dmesg, kubectl pod JSON or Alertmanager payloads)")
    return result


# Damaged files of a directory get an entry with their error in facts.inputs[] up to this many
# (their warnings are summarised like other skipped files).
LIST_ERRORS = 20


class NothingUsable(BadInput):
    """Every input named failed: one line per input, each naming it."""

    def __init__(self, failed: Sequence[BadInput]):
        super().__init__(failed[0].path, failed[0].problem)
        self.failed = list(failed)
        self.args = ("\n".join(str(f) for f in failed),)

    def __str__(self) -> str:
        return "\n".join(str(f) for f in self.failed)


def failed_all(failed: Sequence[BadInput]) -> BadInput:
    """The error when no input could be used: the one failure itself, or all of them."""
    return failed[0] if len(failed) == 1 else NothingUsable(failed)


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


def _skip_reason(src: InputFile) -> tuple[str | None, bool]:
    """(why the input is not read, whether that is damage rather than a file that is no evidence)."""
    name = src.name.lower()
    if not src.explicit:
        if name in _NOT_EVIDENCE or Path(name).suffix in _NOT_EVIDENCE_EXT:
            return "not an evidence file", False
    elif Path(name).suffix in _NOT_EVIDENCE_EXT - {".yaml", ".yml", ".zip", ".tar", ".tgz"}:
        return f"a {Path(name).suffix} file is not evidence (give a log, a scrape, or a bundle directory)", False
    try:
        size = src.size()
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}", True
    if size == 0:
        return "empty file", False
    try:
        head = src.head()
    except BadInput as exc:
        return exc.problem, True
    except PermissionError:
        return "not readable (permission denied)", True
    if not head.strip():
        return "empty file (only whitespace)", False
    if looks_binary(head):
        return "binary data, not a text log or JSON", False
    return None, False
