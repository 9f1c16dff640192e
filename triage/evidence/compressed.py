"""Compressed inputs: gzip, bzip2, xz and zstd, told apart by their magic bytes, read through one
bounded reader.

Every codec gets the same bounds (see base.input_limit): at most `cap` bytes once expanded and,
unless a limit was given explicitly, no more than MAX_RATIO-fold past the first RATIO_AFTER
bytes. A damaged stream, from whichever read meets it, is one BadInput naming the file.

zstd comes from the standard library's `compression.zstd` (Python 3.14) or the `zstandard`
package (`pip install 'oom-triage[zstd]'`); without either, a .zst input is one line saying so.
The codec modules are imported only when a file of theirs is read.
"""
from __future__ import annotations

import io
import zlib
from typing import IO, Callable

from ..errors import BadInput
from ..units import format_bytes

MAX_INPUT_ENV = "TRIAGE_MAX_INPUT_BYTES"
# A "gzip bomb" (31 MB of repeated lines that expand to 10 GiB, 330-fold) is refused as soon as
# it shows that ratio, not after reading up to the cap (which, for lines the parser must look at,
# would take many minutes). Real logs compress 5-17x (the bundled samples, uvicorn health checks);
# past 100x after the first 16 MiB is repetition no server writes. A limit given explicitly
# (--max-input-bytes, $TRIAGE_MAX_INPUT_BYTES) turns this check off: the user vouches for the file.
MAX_RATIO = 100
RATIO_AFTER = 16 << 20

MAGIC_BYTES = 10          # enough of the head to tell every codec apart
ZSTD_HINT = "install oom-triage[zstd] (or the zstandard package) to read .zst files"


def codec_of(head: bytes) -> str | None:
    """'gzip', 'bzip2', 'xz' or 'zstd' when `head` starts like a stream of theirs; else None."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[3:4] != b"0" and \
            head[4:10] in (b"1AY&SY", b"\x17\x72\x45\x38\x50\x90"):
        return "bzip2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:4] == b"\x28\xb5\x2f\xfd" or (head[1:4] == b"\x2a\x4d\x18" and head[:1] and 0x50 <= head[0] <= 0x5f):
        return "zstd"     # a frame, or a skippable frame (0x184D2A50-5F)
    return None


def _opener(codec: str, display: str) -> Callable[[IO[bytes]], IO[bytes]]:
    if codec == "gzip":
        import gzip

        return lambda raw: gzip.GzipFile(fileobj=raw)
    if codec == "bzip2":
        import bz2

        return lambda raw: bz2.BZ2File(raw)
    if codec == "xz":
        import lzma

        return lambda raw: lzma.LZMAFile(raw)
    try:
        from compression import zstd  # type: ignore[import-not-found]   # Python 3.14+

        return lambda raw: zstd.ZstdFile(raw)
    except ImportError:
        pass
    try:
        import zstandard  # noqa: F401
    except ImportError:
        raise BadInput(display, f"zstd-compressed: {ZSTD_HINT}") from None
    return _ZstandardReader


def _errors() -> tuple[type[BaseException], ...]:
    """What the codecs raise for damaged data, whichever of them were imported."""
    import sys

    found: list[type[BaseException]] = [OSError, EOFError, zlib.error]
    if "lzma" in sys.modules:
        found.append(sys.modules["lzma"].LZMAError)
    if "zstandard" in sys.modules:
        found.append(sys.modules["zstandard"].ZstdError)
    zstd = sys.modules.get("compression.zstd")
    if zstd is not None and hasattr(zstd, "ZstdError"):
        found.append(zstd.ZstdError)
    return tuple(found)


class Inflated(io.RawIOBase):
    """A compressed stream that stops at a cap and names its file when it is damaged.

    The codec readers raise zlib.error, EOFError, OSError, LZMAError or ZstdError from any read,
    mid-parse; each parser would have to catch them all. Here they become one BadInput ("corrupt
    gzip data ..."), and so does expanding past `cap` bytes or (with `check_ratio`) more than
    MAX_RATIO-fold, with the way to raise the limit."""

    def __init__(self, raw: IO[bytes], display: str, cap: int, *, codec: str = "gzip", check_ratio: bool = True):
        self._raw = raw
        self._codec = codec
        self._display = display
        self._inner = _opener(codec, display)(raw)
        self._cap = cap
        self._check_ratio = check_ratio
        self._total = 0
        self._errors = _errors()

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        try:
            n = self._inner.readinto(buf)  # type: ignore[attr-defined]
        except BadInput:
            raise
        except self._errors as exc:
            raise BadInput(self._display, f"cannot read: corrupt {self._codec} data "
                                          f"({exc.__class__.__name__}: {exc})") from None
        self._total += n
        what = "a gzip bomb?" if self._codec == "gzip" else "a decompression bomb?"
        if self._total > self._cap:
            raise BadInput(self._display, f"decompresses to more than {format_bytes(self._cap)}, the limit on a "
                                          f"compressed input ({what}); to read it, raise the limit with "
                                          f"--max-input-bytes or {MAX_INPUT_ENV} (e.g. 16GiB)")
        if self._check_ratio and self._total > RATIO_AFTER:
            packed = max(1, self._raw.tell())       # compressed bytes read so far (and a little read-ahead)
            if self._total > MAX_RATIO * packed:
                raise BadInput(self._display, f"expands more than {MAX_RATIO}-fold ({format_bytes(self._total)} from "
                                              f"{format_bytes(packed)} so far), which no server log does ({what}); "
                                              f"to read it anyway, give a limit with --max-input-bytes or "
                                              f"{MAX_INPUT_ENV} (e.g. 16GiB)")
        return n

    def close(self) -> None:
        try:
            self._inner.close()
            self._raw.close()        # the codec readers leave a file object they were given open
        finally:
            super().close()


class _ZstandardReader(io.RawIOBase):
    """zstd frames (one after another) through the `zstandard` package, in bounded memory.

    Its stream_reader ends quietly at a cut frame; here a stream that ends inside a frame is an
    EOFError, as gzip, bz2 and lzma raise. Input is fed a little at a time: one 1 KiB piece of a
    crafted frame expands to at most ~45 MB, so memory stays bounded before the cap is checked."""

    FEED = 1024

    def __init__(self, raw: IO[bytes]):
        import zstandard

        self._zstd = zstandard
        self._raw = raw
        self._dobj = zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False            # fed bytes of a frame that has not ended yet
        self._packed = b""                # compressed bytes read from raw, not yet fed
        self._out = b""
        self._at_end = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        while not self._out and not self._at_end:
            self._step()
        n = min(len(buf), len(self._out))
        buf[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _step(self) -> None:
        if not self._packed:
            self._packed = self._raw.read(1 << 16)
            if not self._packed:
                self._at_end = True
                if self._in_frame:
                    raise EOFError("compressed file ended before the end of the zstd frame")
                return
        piece, self._packed = self._packed[:self.FEED], self._packed[self.FEED:]
        self._in_frame = True
        self._out = self._dobj.decompress(piece)
        if self._dobj.eof:                # a frame ended: what follows it is the next frame
            rest = self._dobj.unused_data
            self._dobj = self._zstd.ZstdDecompressor().decompressobj()
            self._in_frame = False
            self._packed = rest + self._packed

    def close(self) -> None:
        super().close()
