"""What every evidence parser sees: an input file and a parse context.

A parser module exposes `NAME`, `sniff(head, name) -> int` (0 = not mine; higher wins) and
`parse(src, ctx) -> Iterator[Evidence]`. Parsers read, they never decide.
"""
from __future__ import annotations

import io
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from typing import IO, Any, Callable, Iterator, Protocol

from .. import safejson
from ..errors import BadInput
from ..model import Evidence
from ..timeref import MAX_YEAR, MIN_YEAR, TimeReference
from ..units import parse_size
from .compressed import MAGIC_BYTES, MAX_INPUT_ENV, MAX_RATIO, RATIO_AFTER, Inflated, codec_of  # noqa: F401

HEAD_BYTES = 64 * 1024
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
MAX_LINE_BYTES = 16 * 1024 * 1024       # a longer "line" is not a log line
MAX_JSON_BYTES = 256 * 1024 * 1024      # structured inputs are read whole; cap them
# What a compressed input may expand to. A server log compresses 10-20x, so 4 GiB is a log of
# 200-400 MiB on disk, a month of a busy server.
DEFAULT_MAX_INPUT_BYTES = 4 << 30


def input_limit(given: int | None = None) -> tuple[int, bool]:
    """(the cap on a compressed input's decompressed size, whether it was given explicitly):
    `given` (--max-input-bytes), else $TRIAGE_MAX_INPUT_BYTES (`8GiB`, `500MiB`, bytes), else
    DEFAULT_MAX_INPUT_BYTES. BadInput for an unreadable $TRIAGE_MAX_INPUT_BYTES."""
    if given is not None:
        return given, True
    raw = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_INPUT_BYTES, False
    value = parse_size(raw)
    if value is None or value <= 0:
        raise BadInput(MAX_INPUT_ENV, f"{raw!r} is not a size (use bytes or e.g. 8GiB)")
    return value, True


@dataclass
class InputFile:
    """One input: a path on disk, stdin spooled to a temporary file, a member of an archive, or
    one that could not be had at all (`error`: a refused scrape, a path that is not there)."""

    display: str                       # what evidence cites (relative path or "-")
    path: str | None                   # real path (None only for in-memory tests)
    data: bytes | None = None          # in-memory content (stdin, tests)
    explicit: bool = True              # named by the user (errors are fatal) vs found in a dir
    taken_at: datetime | None = None   # when a live reading was taken (a /metrics scrape)
    max_bytes: int | None = None       # cap on the decompressed size (None: input_limit())
    error: str | None = None           # why this input could not be read at all (nothing to open)
    member: Any = None                 # an archive member (evidence.archive.Member) instead of a path
    notes: list[str] = field(default_factory=list)   # what reading it left out (a line over the limit)
    _head: bytes | None = field(default=None, repr=False)
    _small: bytes | None = field(default=None, repr=False)   # a small file's whole raw content
    _size: int | None = field(default=None, repr=False)
    _magic: bytes | None = field(default=None, repr=False)   # the first raw bytes (which codec)

    @property
    def _content(self) -> bytes | None:
        return self.data if self.data is not None else self._small

    @property
    def compressed(self) -> bool:
        return codec_of(self.raw_head(MAGIC_BYTES)) is not None

    def _open_raw(self) -> IO[bytes]:
        if self.member is not None:
            return self.member.open()
        return open(self.path, "rb")  # type: ignore[arg-type]

    def raw_head(self, n: int) -> bytes:
        content = self._content
        if content is not None:
            return content[:n]
        if n <= MAGIC_BYTES and self._magic is not None:
            return self._magic[:n]
        with self._open_raw() as fh:
            data = fh.read(max(n, MAGIC_BYTES))
        if n <= MAGIC_BYTES:     # asked again by every reader: an archive member costs a pass to reach
            self._magic = data
        return data[:n]

    def open(self) -> IO[bytes]:
        """Decompressed binary stream, UTF-8 (UTF-16 text, e.g. from PowerShell, is transcoded).

        A compressed input (gzip, bzip2, xz, zstd: told by its first bytes, whatever its name)
        reads through `compressed.Inflated`: a damaged stream or one that expands past the cap
        raises BadInput naming the file, from whichever read meets the problem."""
        content = self._content
        raw: IO[bytes]
        if content is not None:
            raw, magic = io.BytesIO(content), content[:MAGIC_BYTES]
        else:
            raw = self._open_raw()
            if not isinstance(raw, io.BufferedReader):
                raw = io.BufferedReader(raw, 1 << 16)  # type: ignore[arg-type]
            magic = raw.peek(MAGIC_BYTES)[:MAGIC_BYTES]  # type: ignore[attr-defined]
        codec = codec_of(magic)
        if codec is not None:
            cap, explicit = input_limit(self.max_bytes)
            try:
                inflated = Inflated(raw, self.display, cap, codec=codec, check_ratio=not explicit)
            except BaseException:
                raw.close()
                raise
            raw = io.BufferedReader(inflated, 1 << 16)
        first = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else magic[:2]
        if first in UTF16_BOMS:
            return _Utf16Reader(raw)  # type: ignore[return-value]
        return raw

    def head(self) -> bytes:
        if self._head is None:
            try:
                self._keep_if_small()
                with self.open() as fh:
                    self._head = fh.read(HEAD_BYTES)
            except (OSError, EOFError) as exc:
                raise BadInput(self.display, f"cannot read: {exc.__class__.__name__}: {exc}") from None
        return self._head

    def _keep_if_small(self) -> None:
        """Read a file that fits in the head once, whole: a directory of many small files then
        costs one open per file instead of four (sniff, gzip check, parse, re-check)."""
        if self._content is None and (self.path is not None or self.member is not None) and self.size() <= HEAD_BYTES:
            with self._open_raw() as fh:
                data = fh.read(HEAD_BYTES + 1)
            if len(data) <= HEAD_BYTES:     # not grown meanwhile (a log still being written)
                self._small = data

    def size(self) -> int:
        content = self._content
        if content is not None:
            return len(content)
        if self._size is None:
            self._size = self.member.size if self.member is not None else os.path.getsize(self.path)  # type: ignore[arg-type]
        return self._size

    def mtime(self) -> datetime | None:
        """The file's modification time; None when it has none a date can hold (`touch -d @1e15`)."""
        if self.member is not None:
            return self.member.mtime
        if self.path is None:
            return None
        try:
            when = datetime.fromtimestamp(os.path.getmtime(self.path), tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
        return when if MIN_YEAR <= when.year <= MAX_YEAR else None

    @cached_property
    def name(self) -> str:
        if self.member is not None:
            return os.path.basename(self.member.name)     # `x.tgz!INC/logs/vllm.log` is named vllm.log
        return os.path.basename(self.display)

    def key_lines(self, key: bytes, count: int) -> list[int | None]:
        """Line of the n-th occurrence of `key` in the raw text, for citing records of a JSON
        document; all None unless the key marks each of the `count` records exactly once."""
        if count == 0:
            return []
        found: list[int] = []
        with self.open() as fh:
            for n, raw in enumerate(fh, 1):
                found.extend([n] * raw.count(key))
        return list(found) if len(found) == count else [None] * count

    def read_json(self) -> Any:
        """The whole file as JSON, or one clear error naming the problem."""
        try:
            with self.open() as fh:
                blob = fh.read(MAX_JSON_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise BadInput(self.display, f"cannot read: {exc}") from None
        if len(blob) > MAX_JSON_BYTES:
            raise BadInput(self.display, f"JSON larger than {MAX_JSON_BYTES >> 20} MiB")
        try:
            # utf-8-sig: tools on Windows write a BOM that json.loads rejects.
            return safejson.loads(blob.decode("utf-8-sig", errors="replace"))
        except json.JSONDecodeError as exc:
            cut = exc.pos >= len(blob.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
            what = "truncated JSON" if cut else "invalid JSON"
            raise BadInput(self.display, f"{what} (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
        except ValueError as exc:     # safejson.TooDeep / HugeNumber
            raise BadInput(self.display, f"unusable JSON: {exc}") from None


class _Utf16Reader(io.RawIOBase):
    """Reads UTF-16 text as UTF-8 bytes, incrementally (bounded memory)."""

    def __init__(self, raw: IO[bytes]):
        import codecs

        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._pending = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._pending) < n:
            chunk = self._raw.read(1 << 20 if n < 0 else max(n, 1 << 16))
            final = not chunk
            self._pending += self._decoder.decode(chunk, final=final).encode("utf-8")
            if final:
                break
        if n < 0:
            out, self._pending = self._pending, b""
        else:
            out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def close(self) -> None:
        self._raw.close()
        super().close()


@dataclass
class ParseContext:
    """Shared across all inputs of one run: the time reference and a global sequence number."""

    times: TimeReference
    progress: Callable[[int], None] | None = None     # bytes consumed, for large inputs
    _seq: int = 0

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @contextmanager
    def rereading(self, times: TimeReference, first_seq: int) -> Iterator[None]:
        """Parse an input again under other times, its records taking the sequence numbers its
        first reading had (so they keep their place), without reporting its bytes twice."""
        saved_times, saved_seq, saved_progress = self.times, self._seq, self.progress
        self.times, self._seq, self.progress = times, first_seq - 1, None
        try:
            yield
        finally:
            self.times, self.progress = saved_times, saved_progress
            self._seq = max(saved_seq, self._seq)

    def evidence(self, src: InputFile, line: int | None, kind: str, text: str,
                 time: datetime | None = None, **fields: Any) -> Evidence:
        return Evidence(source=src.display, line=line, kind=str(kind.value if hasattr(kind, "value") else kind),
                        text=clip(text), time=time, fields=fields, seq=self.next_seq())


class Parser(Protocol):
    NAME: str

    def sniff(self, head: bytes, name: str) -> int: ...

    def parse(self, src: InputFile, ctx: ParseContext) -> Iterator[Evidence]: ...


def clip(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Last:
    """The answer for the head asked about last: every sniffer asks the same questions about the
    same head object, once per file (a directory of 100,000 files asks 500,000 times)."""

    def __init__(self, fn: Callable[[bytes], Any]):
        self.fn = fn
        self.head: bytes | None = None
        self.answer: Any = None

    def __call__(self, head: bytes) -> Any:
        if head is not self.head:
            self.answer, self.head = self.fn(head), head
        return self.answer


def looks_binary(head: bytes) -> bool:
    """NUL bytes (outside UTF-16 text), or a share of control bytes or undecodable bytes that no
    text log has. A stray Latin-1 byte is still text: lines are decoded with replacement."""
    return _looks_binary(head)


def _binary(head: bytes) -> bool:
    if not head or head.startswith(UTF16_BOMS):
        return False
    if b"\x00" in head:
        return True
    sample = head[:8192]
    bad = sum(1 for b in sample if b < 9 or (13 < b < 32 and b != 27))
    if bad / len(sample) > 0.05:
        return True
    undecodable = sample.decode("utf-8", errors="replace").count("\ufffd")
    return undecodable / len(sample) > 0.05


def is_json_log(head: bytes) -> bool:
    """One JSON object per line with a message field: a structured log, read by the log parser."""
    from .logline import json_line

    first = head.decode("utf-8-sig", errors="replace").lstrip().split("\n", 1)[0]
    return json_line(first) is not None


# A server's answer to a request that failed, as a client prints it: {"error": ...} (Ollama, LocalAI,
# TGI, the OpenAI shape), {"object": "error", ...} (vLLM), {"detail": ...} (FastAPI). Pasted as the
# log of an incident, it is text the log readers know (the error it carries), not a data format.
_API_ERROR_ANSWER = re.compile(rb'\A\s*\{\s*"(?:error|detail)"\s*:|\A\s*\{[^{}]{0,200}?"object"\s*:\s*"error"')


def is_api_error_answer(head: bytes) -> bool:
    """JSON that is an API's error answer: read as a log (its words are what the readers match)."""
    return bool(_API_ERROR_ANSWER.match(head.removeprefix(b"\xef\xbb\xbf")))


def json_head(head: bytes) -> str | None:
    """'{' or '[' if the content is JSON (possibly cut by the head limit or truncated), else None.

    A leading bracket is not enough: dmesg ("[ 2448.6] ...") and CI logs ("[2025-03-10T...] ...")
    start with one too. The head must decode as JSON, or fail only where the bytes run out.
    """
    return _json_head(head)


# Documents read one after another before a head counts as JSON (JSON Lines, concatenated JSON): a
# log line can begin with a bracketed value that parses ("[1784273406.684686] [host:pid] UCX ..."),
# the next bracket is no document.
_JSON_DOCUMENTS_CHECKED = 3


def _json(head: bytes) -> str | None:
    text = head.decode("utf-8-sig", errors="replace").lstrip()
    if text[:1] not in ("{", "["):
        return None
    rest = text
    for _ in range(_JSON_DOCUMENTS_CHECKED):
        try:
            _, end = safejson.raw_decode(rest)
        except json.JSONDecodeError as exc:
            cut = exc.pos >= len(rest.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
            return text[0] if cut else None
        except ValueError:
            return text[0]     # nested too deep or a 4,300-digit number: JSON, refused by read_json with why
        rest = rest[end:].lstrip()
        if not rest:
            return text[0]
        if rest[:1] not in ("{", "["):
            return None
    return text[0]


_looks_binary = _Last(_binary)
_json_head = _Last(_json)
