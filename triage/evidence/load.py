"""`load_evidence`: every input read by the parser that claims it, into one EvidenceSet.

No single input costs the verdict: one that cannot be read is a warning naming it and an entry
with an `error` in result.sources (facts.inputs[]); only when nothing usable is left is it an
error (failed_all). Unreadable, binary, empty or over-long inputs named by the user are errors
(one line, exit 1); inside a directory they are skipped with a warning.
"""
from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Callable, Sequence

from ..errors import BadInput
from ..model import Evidence, EvidenceSet, SourceInfo
from ..units import noting_dropped
from .base import InputFile, ParseContext, input_limit, is_api_error_answer, is_json_log, json_head
from .inputs import ArchiveBundle, expand
from .registry import parsers, pick_parser
from .screening import is_bundle_metadata, skip_reason, summarise_quiet, unclaimed_json
from .timebase import read_bundle_meta, time_reference
from .year_alignment import WEAK_YEAR_SOURCES, align_year, future_logs

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


def load_evidence(paths: Sequence[str], *, year: int | None = None, tz: str | None = None,
                  stdin_data: bytes | None = None, progress: Callable[[int], None] | None = None,
                  extra: Sequence[InputFile] = (), require: bool = True, max_bytes: int | None = None) -> EvidenceSet:
    """Parse every input into one EvidenceSet (records in order of appearance).

    `require=False` returns an empty set instead of failing when no input holds evidence (a
    timeline can still be built from an incident's notes and recovery log). `max_bytes` caps
    what a compressed input may expand to (default: base.input_limit())."""
    input_limit(max_bytes)      # an unreadable $TRIAGE_MAX_INPUT_BYTES: one line before anything is read
    spooled: list[str] = []
    try:
        inputs, bundle = expand(paths, stdin_data, spooled, max_bytes)
        inputs += list(extra)
        for src in inputs:
            src.max_bytes = max_bytes
        return _Loading(bundle, year, tz, progress).run(paths, inputs, require)
    finally:
        for path in spooled:   # nothing is left behind
            try:
                os.unlink(path)
            except OSError:
                pass


class _Loading:
    """One load: the set being filled, and what the inputs that gave nothing are said as."""

    def __init__(self, bundle: Path | ArchiveBundle | None, year: int | None, tz: str | None,
                 progress: Callable[[int], None] | None):
        self.result = EvidenceSet()
        self.skipped: list[tuple[str, str]] = []    # (file found in a directory, why it was not read)
        self.failed: list[BadInput] = []            # inputs named by the user that could not be used
        self.used = 0
        self.errors_listed = 0
        # (log, parser, index in result.sources, its records) for logs whose year is a guess
        self.weak_logs: list[tuple[InputFile, ModuleType, int, list[Evidence]]] = []
        self.log_records: set[int] = set()   # id() of every record a log parser made
        self.live_records: set[int] = set()  # id() of every record read live (a --metrics-url scrape): dated now
        self.times = time_reference(bundle, year, tz, self.result.warnings, self._bundle_meta(bundle))
        self.ctx = ParseContext(times=self.times, progress=progress)

    def _bundle_meta(self, bundle: Path | ArchiveBundle | None) -> tuple[dict, Path | str | None]:
        try:
            return read_bundle_meta(bundle)
        except BadInput as exc:    # a syntax error, a FIFO as incident.yaml: read the evidence without it
            self.result.warnings.append(f"{exc}; skipped")
            self.result.sources.append(SourceInfo(exc.path, "incident", 0, error=exc.problem))
            return {}, None

    def run(self, paths: Sequence[str], inputs: list[InputFile], require: bool) -> EvidenceSet:
        mods = parsers()
        for src in inputs:
            self._read(src, mods)
        result = self.result
        result.items.sort(key=lambda e: e.seq)   # held-back stats lines rejoin their place in time
        # A scrape taken now says when triage ran, not when the incident happened: it dates no log.
        undated = self.log_records | self.live_records
        dated = [e for e in result.items if e.time is not None and id(e) not in undated]
        for src, mod, at, own in self.weak_logs:
            align_year(result, src, mod, at, own, dated, self.ctx, self.times)
        result.warnings += summarise_quiet(result, self.skipped, {i.display for i in inputs if not i.explicit})
        result.warnings += future_logs(result, self.times.tz_source)
        if self.used == 0 and require:
            if self.failed:
                raise failed_all(self.failed)
            where = ", ".join(paths) or ", ".join(i.display for i in inputs)
            raise BadInput(where, "no evidence files found (expected server logs, /metrics scrapes, nvidia-smi "
                                  "output, memory_stats JSON, dmesg, kubectl pod JSON or Alertmanager payloads)")
        return result

    def _read(self, src: InputFile, mods: Sequence[ModuleType]) -> None:
        if src.error is not None:
            self._refuse(src, "prometheus" if src.taken_at is not None else "none", src.error, damaged=True)
            return
        if is_bundle_metadata(src):
            return   # a bundle's own metadata (incident.yaml, README.md, ...): not worth a warning
        reason, damaged = skip_reason(src)
        if reason:
            self._refuse(src, "none", reason, damaged)
            return
        mod = pick_parser(src, mods)
        if (mod.NAME == "log" and json_head(src.head()) and not is_json_log(src.head())
                and not is_api_error_answer(src.head())):
            # JSON that no structured parser claimed: say why instead of reading it as a log.
            try:
                problem, damaged = unclaimed_json(src), False
            except BadInput as exc:
                problem, damaged = exc.problem, True
            self._refuse(src, "json", problem, damaged)
            return
        self._parse(src, mod)

    def _parse(self, src: InputFile, mod: ModuleType) -> None:
        result, times = self.result, self.times
        src_times = times
        if times.year_source == "today" and (src.path is not None or src.member is not None) and src.display != "-":
            mtime = src.mtime()
            if mtime is not None:
                src_times = times.with_reference(mtime, "file mtime")
        self.ctx.times = src_times
        before = len(result.items)
        error = None
        src.notes.clear()
        with noting_dropped() as dropped:
            try:
                result.extend(mod.parse(src, self.ctx))
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
            self.failed.append(BadInput(src.display, error))
        else:
            self.used += 1      # found in a directory, a damaged file's records are used; named, it failed
        if src.taken_at is not None:
            self.live_records.update(id(e) for e in result.items[before:])
        note = src_times.note() if mod.NAME == "log" else None
        if mod.NAME == "log":
            self.log_records.update(id(e) for e in result.items[before:])
            if src_times.year_source in WEAK_YEAR_SOURCES and count:
                self.weak_logs.append((src, mod, len(result.sources), result.items[before:]))
        result.sources.append(SourceInfo(src.display, mod.NAME, count, note, error=error))

    def _refuse(self, src: InputFile, kind: str, problem: str, damaged: bool) -> None:
        """A file not read: an error of the run when named on the command line, else a skip
        (listed in facts.inputs when the file is damaged, not merely of another kind)."""
        if src.explicit:
            self.failed.append(BadInput(src.display, problem))
            self.result.warnings.append(f"{src.display}: {problem}")
        else:
            self.skipped.append((src.display, problem))
        if src.explicit or damaged:
            self._error_entry(src, kind, problem)

    def _error_entry(self, src: InputFile, kind: str, problem: str) -> None:
        if src.explicit or self.errors_listed < LIST_ERRORS:
            self.result.sources.append(SourceInfo(src.display, kind, 0, error=problem))
            self.errors_listed += not src.explicit
