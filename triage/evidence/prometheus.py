"""/metrics scrapes (vLLM V0/V1 names, DCGM exporter) through prometheus-client's own parser.

One file is one scrape; several scrape files (metrics/2026-03-12T14-16-00Z.prom, ...) make a
time series. Only the series triage reasons about become records, under one vocabulary across
versions (V0 `gpu_cache_usage_perc` and V1 `kv_cache_usage_perc` are both `kv_cache_usage`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timezone
from typing import IO, Any, Generator, Iterator

from ..errors import BadInput
from ..model import Evidence
from ..timeref import parse_iso
from ..units import byte_count, finite_float, whole
from . import exposition_text
from .base import MAX_LINE_BYTES, InputFile, ParseContext
from .kinds import Kind

NAME = "prometheus"

# exposed sample name -> concept
CONCEPTS = {
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:cpu_cache_usage_perc": "cpu_kv_cache_usage",
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "requests_waiting",
    "vllm:num_requests_swapped": "requests_swapped",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:gpu_prefix_cache_hit_rate": "prefix_cache_hit_rate",
    "vllm:gpu_prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:request_success_total": "request_success_total",
    "vllm:cache_config_info": "cache_config",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "fb_reserved_mib",
    "DCGM_FI_DEV_XID_ERRORS": "xid_last",
    "dcgm_fb_used": "fb_used_mib",
    "dcgm_fb_free": "fb_free_mib",
    "dcgm_xid_errors": "xid_last",
}
_SAMPLE_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|NaN|Inf)(?:\s+-?\d+)?\s*$")
_SAMPLE_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?=[{\s])")
_STAMP_IN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[-:](\d{2})[-:](\d{2})(Z)?")


def sniff(head: bytes, name: str) -> int:
    text = head.decode("utf-8", errors="replace")
    lines = [ln for ln in text.splitlines()[:200] if ln.strip()]
    if not lines:
        return 0
    typed = sum(1 for ln in lines if ln.startswith(("# HELP ", "# TYPE ")))
    samples = sum(1 for ln in lines if _SAMPLE_LINE.match(ln))
    content = [ln for ln in lines if not ln.startswith("#")]   # other comments (dates, notes) are neutral
    if typed and samples and (typed + samples) >= 0.8 * len(lines):
        return 80
    if samples >= 3 and samples >= 0.8 * len(content):
        return 60
    return 0


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    """Stream the scrape in bounded memory. Only lines of the series in CONCEPTS are parsed, by
    prometheus-client's parser (a batch of lines per call, each record citing its own line), and
    of each metric at most MAX_SERIES series (a scrape of one server has a few; the rest is noted).
    Every other line (other exporters, histogram buckets) is passed over on its first bytes, never
    decoded. Memory is bounded by the series kept, whatever the size of the scrape."""
    return _Scrape(src, ctx).records()


MAX_SERIES = 1000         # series of one metric per scrape file that become records
_BATCH_LINES = 512        # lines per call of prometheus-client's parser ...
_BATCH_BYTES = 1 << 20    # ... or this much text, whichever comes first
_CHECKED = 50             # other series parsed only to refuse a file that is not exposition
_FAMILY_COMMENTS = (b"# HELP", b"# TYPE", b"# EOF")
_SEPARATORS = (b"{", b" ", b"\t")
_WANTED = tuple(name.encode() + sep for name in CONCEPTS for sep in _SEPARATORS)
_NAME_BYTES = re.compile(rb"[a-zA-Z_:][a-zA-Z0-9_:]*")
_BLOCK_BYTES = 1 << 20
# After a newline: a metric triage reads (group 1), a comment other than HELP/TYPE/EOF (a date), or
# anything but a metric name (a blank, indented or stray line). Every other line is another
# series, passed over inside the regular expression engine.


@lru_cache(maxsize=1)
def _look_at() -> re.Pattern[bytes]:
    """Compiled on the first scrape read, not at import: every input is sniffed by this module."""
    return re.compile(rb"\n(?:(%s)(?![a-zA-Z0-9_:])|#(?! HELP| TYPE| EOF)|[^a-zA-Z_:#])"
                      % b"|".join(re.escape(n.encode()) for n in sorted(CONCEPTS, key=len, reverse=True)))


class _Scrape:
    """One pass over one scrape file (see parse)."""

    def __init__(self, src: InputFile, ctx: ParseContext):
        self.src, self.ctx = src, ctx
        self.when = scrape_time(src)
        self.samples = self.checked = 0
        self.error: Exception | None = None        # the first line's problem, said when none is usable
        self.error_line = 0
        self.series: dict[str, set[int]] = {}      # metric -> hashes of its series kept
        self.skipped: dict[str, int] = {}          # metric -> sample lines of series over MAX_SERIES
        self.pending: list[tuple[int, datetime | None, str]] = []
        self.pending_bytes = 0
        self.framebuffer: dict[tuple, dict[str, Any]] = {}
        self.long_lines = 0

    def records(self) -> Iterator[Evidence]:
        with self.src.open() as fh:
            # Line by line while lines of other series are still checked, ...
            lineno = 0
            while not (self.checked >= _CHECKED and self.samples):
                raw = self._readline(fh)
                if raw is None:
                    break
                lineno += 1
                if raw.startswith(_WANTED):
                    self._wanted(lineno, raw, _NAME_BYTES.match(raw).group(0))  # type: ignore[union-attr]
                elif not raw.startswith(_FAMILY_COMMENTS):
                    self._line(lineno, raw)
                if len(self.pending) >= _BATCH_LINES or self.pending_bytes >= _BATCH_BYTES:
                    yield from self._flush()
            else:
                # ... then a block at a time, where one regular expression finds the few lines
                # to look at: the other exporters' series and histogram buckets are never touched.
                yield from self._blocks(fh, lineno)
            yield from self._flush()
        if not self.samples:
            raise BadInput(self.src.display, f"not a valid Prometheus exposition ({self.error or 'no samples'})")
        if self.long_lines:
            self.src.notes.append(f"{_count(self.long_lines, 'line')} longer than the {MAX_LINE_BYTES >> 20} MiB "
                                  "line limit skipped; the rest of the file was read")
        if self.skipped:
            self.src.notes.append(_skipped_note(self.skipped))
        yield from _framebuffer(self.src, self.ctx, self.framebuffer)

    def _readline(self, fh: IO[bytes]) -> bytes | None:
        """The next line (None at the end); one over MAX_LINE_BYTES is read past, never held, and
        stands as an empty line (the line numbers after it stay right)."""
        raw = fh.readline(MAX_LINE_BYTES)
        if not raw:
            return None
        if len(raw) >= MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while True:
                rest = fh.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            self.long_lines += 1
            return b"\n"
        return raw

    def _blocks(self, fh: IO[bytes], lineno: int) -> Iterator[Evidence]:
        tail = b""            # the line the last block ended in the middle of
        long_line = False     # inside a line over MAX_LINE_BYTES, skipped to its end
        while True:
            block = fh.read(_BLOCK_BYTES)
            if not block:
                if tail and not long_line:
                    yield from self._scan(b"\n" + tail + b"\n", lineno)
                break
            if long_line:
                cut = block.find(b"\n")
                if cut < 0:
                    continue
                block, lineno, long_line = block[cut + 1:], lineno + 1, False
            buf = b"\n" + tail + block
            end = buf.rfind(b"\n")
            tail = buf[end + 1:]
            if end > 0:
                lineno = yield from self._scan(buf[:end + 1], lineno)
            elif len(tail) >= MAX_LINE_BYTES:
                tail, long_line = b"", True
                self.long_lines += 1

    def _scan(self, buf: bytes, lineno: int) -> Generator[Evidence, None, int]:
        """The lines of `buf` (a newline, then whole lines) that need a look; returns the number of
        the last line."""
        prev = 0
        for m in _look_at().finditer(buf):
            start = m.start() + 1
            lineno += buf.count(b"\n", prev, start)
            prev = start
            raw = buf[start:buf.index(b"\n", start) + 1]
            name = m.group(1)
            if name is not None and buf[m.end(1):m.end(1) + 1] in _SEPARATORS:
                self._wanted(lineno, raw, name)
            else:
                self._line(lineno, raw)
            if len(self.pending) >= _BATCH_LINES or self.pending_bytes >= _BATCH_BYTES:
                yield from self._flush()
        return lineno + buf.count(b"\n", prev) - 1

    def _wanted(self, lineno: int, raw: bytes, name_bytes: bytes) -> None:
        """A line of a series triage reads (by its first bytes): one of a metric that has its
        MAX_SERIES series already is only counted, never decoded or parsed."""
        name = name_bytes.decode()
        kept = self.series.get(name)
        if kept is not None and len(kept) >= MAX_SERIES and _series_of(raw) not in kept:
            self._skip(name)
        else:
            self._line(lineno, raw)

    def _line(self, lineno: int, raw: bytes) -> None:
        """Any line the byte tests above do not settle: a date comment, a blank or stray line, a
        series to check, a series triage reads written unusually (leading blanks)."""
        line = raw.decode("utf-8", errors="replace").strip()
        if line.startswith("#"):
            stamp = parse_iso(line.lstrip("# ").strip()) if not line.startswith(("# HELP", "# TYPE", "# EOF")) else None
            self.when = stamp or self.when   # "# 2025-06-02 09:00" above a pasted scrape dates it
            return
        if not line:
            return
        name = _SAMPLE_NAME.match(line)
        if name is None:
            return   # a stray line in a pasted excerpt
        if name.group(0) in CONCEPTS:
            if self._keep(name.group(0), _series_of(raw)):
                self._add(lineno, line)
            return
        # Other series are not needed; validate a few so that garbage is still refused.
        if self.checked < _CHECKED:
            self.checked += 1
            try:
                _parse_line(line)
            except (ValueError, TypeError, IndexError) as exc:
                self._fail(lineno, exc)
                return
        self.samples += 1

    def _keep(self, name: str, series: int) -> bool:
        """Whether a line of this series is read: one seen before, or a metric with room for it."""
        kept = self.series.setdefault(name, set())
        if series in kept:
            return True
        if len(kept) < MAX_SERIES:
            kept.add(series)
            return True
        self._skip(name)
        return False

    def _skip(self, name: str) -> None:
        self.skipped[name] = self.skipped.get(name, 0) + 1
        self.samples += 1      # a sample line all the same (only a file of none is refused)

    def _fail(self, lineno: int, exc: Exception) -> None:
        if self.error is None or lineno < self.error_line:
            self.error, self.error_line = exc, lineno

    def _add(self, lineno: int, line: str) -> None:
        self.pending.append((lineno, self.when, line))
        self.pending_bytes += len(line)

    def _flush(self) -> Iterator[Evidence]:
        batch, self.pending, self.pending_bytes = self.pending, [], 0
        if not batch:
            return
        for (lineno, when, _), parsed in zip(batch, _parse_lines([line for _, _, line in batch])):
            if isinstance(parsed, Exception):
                self._fail(lineno, parsed)
                continue
            self.samples += 1
            for sample_name, labels, value, stamp in parsed:
                yield from _records(self.src, self.ctx, sample_name, labels, value, stamp, when, lineno)
                concept = CONCEPTS.get(sample_name, "")
                if concept.startswith("fb_"):
                    key = (when, labels.get("Hostname") or labels.get("hostname"), labels.get("gpu"), labels.get("UUID"))
                    self.framebuffer.setdefault(key, {"labels": labels, "line": lineno})[concept] = value


def _series_of(raw: bytes) -> int:
    """A series, from its line: the hash of the text up to the end of its labels (a collision can
    only let one series more through, never drop one)."""
    body = raw.strip()
    close = body.rfind(b"}")
    return hash(body[:close + 1] if close > 0 else body.split(None, 1)[0] if body else body)


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'s' if n != 1 else ''}"


def _skipped_note(skipped: dict[str, int]) -> str:
    names = sorted(skipped, key=lambda n: (-skipped[n], n))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    total = sum(skipped.values())
    return (f"{total:,} series beyond the first {MAX_SERIES:,} of their metric "
            f"not read ({shown}): a scrape of many servers? Scraped alone, the one that failed is read whole")


def _parse_lines(lines: list[str]) -> list[Any]:
    """Each line's samples (as _parse_line gives them) or the error that refused it, with one call
    of prometheus-client's parser for the lot: the lines are sample lines without TYPE or HELP,
    so each is its own untyped family, yielded before the next line is read."""
    text_string_to_metric_families = exposition_text.text_string_to_metric_families()

    out: list[Any] = []
    try:
        for fam in text_string_to_metric_families("\n".join(lines) + "\n"):
            out.append([(s.name, dict(s.labels), s.value, s.timestamp) for s in fam.samples])
    except (ValueError, TypeError, IndexError) as exc:
        out.append(exc)      # the line after the last one yielded is the one refused
        out += [_parse_one(line) for line in lines[len(out):]]      # the rest one at a time
    if len(out) != len(lines):   # not one family per line after all: all of them one at a time
        out = [_parse_one(line) for line in lines]
    return out


def _parse_one(line: str) -> Any:
    try:
        return _parse_line(line)
    except (ValueError, TypeError, IndexError) as exc:
        return exc


def _parse_line(line: str) -> list[tuple[str, dict[str, str], float, Any]]:
    text_string_to_metric_families = exposition_text.text_string_to_metric_families()

    return [(s.name, dict(s.labels), s.value, s.timestamp)
            for fam in text_string_to_metric_families(line + "\n") for s in fam.samples]


def _framebuffer(src: InputFile, ctx: ParseContext, fb: dict[tuple, dict[str, Any]]) -> Iterator[Evidence]:
    """DCGM's used/free/reserved (MiB) per GPU and scrape -> one GPU_MEMORY reading with its total."""
    for (when, host, gpu, uuid), v in fb.items():
        used = v.get("fb_used_mib")
        if used is None:
            continue
        parts = [v.get(k) for k in ("fb_used_mib", "fb_free_mib", "fb_reserved_mib")]
        total = _mib(sum(p for p in parts if p is not None)) if v.get("fb_free_mib") is not None else None
        used_bytes = _mib(used)
        if used_bytes is None:
            continue
        yield ctx.evidence(src, v["line"], Kind.GPU_MEMORY,
                           f"DCGM framebuffer GPU {gpu}{' on ' + host if host else ''}: {used_bytes >> 20} MiB used",
                           time=when, source="dcgm", used_bytes=used_bytes, total_bytes=total,
                           free_bytes=_mib(v["fb_free_mib"]) if v.get("fb_free_mib") is not None else None,
                           gpu=gpu, uuid=uuid, host=host, name=v["labels"].get("modelName"))


def _mib(value: float) -> int | None:
    """MiB (DCGM's unit, a whole number) -> bytes."""
    count = byte_count(value)
    return count << 20 if count is not None else None


@dataclass(frozen=True)
class ConceptSample:
    """One sample of a series triage reads, under its concept (`kv_cache_usage`, ...)."""

    concept: str
    metric: str                    # the exposed name, e.g. vllm:gpu_cache_usage_perc
    labels: dict[str, str]
    value: float                   # as exposed: NaN and ±Inf included


@dataclass(frozen=True)
class ConceptSamples:
    """The samples of one concept read from an exposition, and the first line that did not parse."""
    samples: list[ConceptSample]
    error: Exception | None        # the first line that did not parse (None: all did)


_WANTED_TEXT = tuple(name + sep for name in CONCEPTS for sep in ("{", " "))


def concept_samples(text: str, *, every_line: bool = False) -> ConceptSamples:
    """The samples of the series in CONCEPTS in a live /metrics answer, and the first line that did
    not parse.

    Only the lines of those series are parsed (one batch through prometheus-client's parser), so
    an answer full of histogram buckets and other exporters' series costs little. `every_line`
    parses the whole text instead, stopping at the first line that is not exposition: a reader
    that acts on the values (recovery waits for `requests_running` to reach 0) must refuse a page
    that is no /metrics at all, such as an HTML error page, rather than read it as no load."""
    if every_line:
        return _every_line(text)
    lines = [ln for ln in text.splitlines() if ln.startswith(_WANTED_TEXT)]
    samples: list[ConceptSample] = []
    error: Exception | None = None
    for parsed in _parse_lines(lines) if lines else []:
        if isinstance(parsed, Exception):
            error = error or parsed
            continue
        for name, labels, value, _stamp in parsed:
            if name in CONCEPTS:
                samples.append(ConceptSample(CONCEPTS[name], name, labels, value))
    return ConceptSamples(samples, error)


def _every_line(text: str) -> ConceptSamples:
    text_string_to_metric_families = exposition_text.text_string_to_metric_families()

    samples: list[ConceptSample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in CONCEPTS:
                    samples.append(ConceptSample(CONCEPTS[s.name], s.name, dict(s.labels), s.value))
    except (ValueError, TypeError, IndexError) as exc:
        return ConceptSamples(samples, exc)
    return ConceptSamples(samples, None)


def sample_records(src: InputFile, ctx: ParseContext, line: str, lineno: int, when: datetime | None) -> list[Evidence]:
    """A single exposition line found inside a text paste (e.g. a corpus metrics.txt)."""
    try:
        parsed = _parse_line(line.strip())
    except (ValueError, TypeError, IndexError):
        return []
    return [rec for name, labels, value, stamp in parsed
            for rec in _records(src, ctx, name, labels, value, stamp, when, lineno)]


def _records(src: InputFile, ctx: ParseContext, name: str, labels: dict[str, str], value: float,
             stamp: Any, when: datetime | None, line: int | None) -> Iterator[Evidence]:
    concept = CONCEPTS.get(name)
    if concept is None:
        return
    if finite_float(value) is None:
        return          # NaN / ±Inf (valid exposition, but no reading); noted as dropped
    t = when
    if stamp is not None:
        try:
            t = datetime.fromtimestamp(float(stamp), tz=timezone.utc)
        except (OverflowError, ValueError, OSError, TypeError):
            t = when
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    text = f"{name}{{{label_text}}} {value}"
    fields: dict[str, Any] = {"name": concept, "metric": name, "value": value, "labels": labels}
    if concept == "prefix_cache_hit_rate" and value < 0:
        fields["disabled"] = True
    yield ctx.evidence(src, line, Kind.METRIC, text, time=t, **fields)
    code = whole(value) if concept == "xid_last" else None
    if code is not None and code > 0:
        yield ctx.evidence(src, line, Kind.XID, f"DCGM last Xid {code} on GPU {labels.get('gpu')}", time=t,
                           code=code, pci=labels.get("pci_bus_id"), detail="reported by dcgm-exporter")


def scrape_time(src: InputFile) -> datetime | None:
    """A scrape's time: from its name (metrics/2026-03-12T14-16-00Z.prom), else unknown."""
    if src.taken_at is not None:
        return src.taken_at
    m = _STAMP_IN_NAME.search(src.name)
    if not m:
        return None
    return parse_iso(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}Z")
