"""What every evidence parser sees: an input file and a parse context.

A parser module exposes `NAME`, `sniff(head, name) -> int` (0 = not mine; higher wins) and
`parse(src, ctx) -> Iterator[Evidence]`. Parsers read, they never decide.
"""
from __future__ import annotations

import gzip
import io
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any, Callable, Iterator, Protocol

from ..errors import BadInput
from ..model import Evidence
from ..timeref import TimeReference

HEAD_BYTES = 64 * 1024
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
MAX_LINE_BYTES = 16 * 1024 * 1024       # a longer "line" is not a log line
MAX_JSON_BYTES = 256 * 1024 * 1024      # structured inputs are read whole; cap them
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class InputFile:
    """One input: a path on disk, or stdin spooled to a temporary file."""

    display: str                       # what evidence cites (relative path or "-")
    path: str | None                   # real path (None only for in-memory tests)
    data: bytes | None = None          # in-memory content (stdin, tests)
    explicit: bool = True              # named by the user (errors are fatal) vs found in a dir
    taken_at: datetime | None = None   # when a live reading was taken (a /metrics scrape)
    _head: bytes | None = field(default=None, repr=False)

    @property
    def compressed(self) -> bool:
        return self.raw_head(2) == GZIP_MAGIC

    def raw_head(self, n: int) -> bytes:
        if self.data is not None:
            return self.data[:n]
        with open(self.path, "rb") as fh:  # type: ignore[arg-type]
            return fh.read(n)

    def open(self) -> IO[bytes]:
        """Decompressed binary stream, UTF-8 (UTF-16 text, e.g. from PowerShell, is transcoded)."""
        raw: IO[bytes] = io.BytesIO(self.data) if self.data is not None else open(self.path, "rb")  # type: ignore[arg-type]
        if self.compressed:
            raw = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        first = raw.peek(2)[:2] if hasattr(raw, "peek") else self.raw_head(2)
        if first in UTF16_BOMS:
            return _Utf16Reader(raw)  # type: ignore[return-value]
        return raw

    def head(self) -> bytes:
        if self._head is None:
            try:
                with self.open() as fh:
                    self._head = fh.read(HEAD_BYTES)
            except (OSError, EOFError) as exc:
                raise BadInput(self.display, f"cannot read: {exc.__class__.__name__}: {exc}") from None
        return self._head

    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        return os.path.getsize(self.path)  # type: ignore[arg-type]

    def mtime(self) -> datetime | None:
        if self.path is None:
            return None
        return datetime.fromtimestamp(os.path.getmtime(self.path), tz=timezone.utc)

    @property
    def name(self) -> str:
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
            return json.loads(blob.decode("utf-8-sig", errors="replace"))
        except json.JSONDecodeError as exc:
            cut = exc.pos >= len(blob.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
            what = "truncated JSON" if cut else "invalid JSON"
            raise BadInput(self.display, f"{what} (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


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


def looks_binary(head: bytes) -> bool:
    """NUL bytes (outside UTF-16 text), or a share of control bytes or undecodable bytes that no
    text log has. A stray Latin-1 byte is still text: lines are decoded with replacement."""
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


def json_head(head: bytes) -> str | None:
    """'{' or '[' if the content is JSON (possibly cut by the head limit or truncated), else None.

    A leading bracket is not enough: dmesg ("[ 2448.6] ...") and CI logs ("[2025-03-10T...] ...")
    start with one too. The head must decode as JSON, or fail only where the bytes run out.
    """
    text = head.decode("utf-8-sig", errors="replace").lstrip()
    if text[:1] not in ("{", "["):
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        return text[0] if exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated string") else None
    rest = text[end:].lstrip()
    return text[0] if not rest or rest[:1] in ("{", "[") else None
