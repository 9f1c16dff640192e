"""An incident bundle packed as one file (`.tar`, `.tar.gz`/`.tgz`, `.tar.bz2`, `.tar.xz`,
`.tar.zst`, `.zip`), read in place: nothing is extracted to disk.

Each regular member becomes an input named `bundle.tgz!INC-1/logs/vllm.log`. Members are read
as streams: small ones are kept in memory when the archive is listed (one pass), a large one of a
compressed tar is read again from the start of the archive when it is parsed (a compressed
stream cannot be entered in the middle), a large one of a plain tar or a zip is read where it
lies. The archive's own compression has the bounds of any compressed input (the cap and the
ratio check of `compressed.Inflated`); a zip member is bounded by its declared size and ratio.

Members that could be harmful if extracted are refused with a line each, although nothing here
extracts them: absolute names, `..`, links, devices and FIFOs. An archive holding more than one
incident.yaml is several incidents: it is refused with the hint to extract it first.
"""
from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO

from ..bundle import INCIDENT_FILES, RELAUNCH_DIR
from ..errors import BadInput
from ..safedir import checked_parts, unsafe_name
from ..timeref import MAX_YEAR, MIN_YEAR
from .compressed import MAGIC_BYTES, MAX_RATIO, RATIO_AFTER, Inflated, codec_of

TAR_MAGIC_AT = 257
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
MAX_MEMBERS = 100_000
KEEP_SMALL = 1 << 20           # members up to this size are held in memory from the listing pass
KEEP_TOTAL = 64 << 20          # ... up to this much in all
MAX_REFUSED_NAMED = 5          # refused members named one per line; more are counted


def archive_kind(path: str, cap: int) -> str | None:
    """'zip' or 'tar' (plain or compressed), told by content; None for anything else."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(TAR_MAGIC_AT + 8)
    except OSError:
        return None
    if head[:4] in ZIP_MAGICS:
        return "zip"
    codec = codec_of(head[:MAGIC_BYTES])
    if codec is None:
        return "tar" if _is_tar(head) else None
    try:
        with open(path, "rb") as raw, Inflated(raw, path, cap, codec=codec) as fh:
            inner = _read_upto(fh, TAR_MAGIC_AT + 8)
    except (BadInput, OSError, EOFError):
        return None          # a damaged .gz is the log reader's to report
    return "tar" if _is_tar(inner) else None


def _is_tar(head: bytes) -> bool:
    return head[TAR_MAGIC_AT:TAR_MAGIC_AT + 5] == b"ustar"


def _read_upto(fh, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = fh.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


@dataclass
class Member:
    """One regular file inside an archive, opened as a stream of its bytes."""

    archive: str                  # the archive's path on disk
    kind: str                     # 'tar' | 'zip'
    name: str                     # the member's name, normalised (`INC//a` -> `INC/a`)
    size: int
    mtime: datetime | None
    offset: int = 0               # tar: where its data starts in the (decompressed) tar stream
    codec: str | None = None      # tar: the archive's compression
    cap: int = 0
    check_ratio: bool = True
    stored: str | None = None     # zip: the name as stored, to open it by (when normalising changed it)

    def open(self) -> IO[bytes]:
        raw = open(self.archive, "rb")
        try:
            if self.kind == "zip":
                import zipfile

                zf = zipfile.ZipFile(raw)
                return io.BufferedReader(_Slice(self.display, zf.open(self.stored or self.name), self.size, zf, raw), 1 << 16)
            if self.codec is None:
                raw.seek(self.offset)
                return io.BufferedReader(_Slice(self.display, raw, self.size), 1 << 16)
            stream = Inflated(raw, self.archive, self.cap, codec=self.codec, check_ratio=self.check_ratio)
            left = self.offset
            skip = bytearray(1 << 20)
            while left:
                n = stream.readinto(memoryview(skip)[:min(left, len(skip))])
                if not n:
                    raise BadInput(f"{self.archive}!{self.name}", "cannot read: the archive ends before this member")
                left -= n
            return io.BufferedReader(_Slice(self.display, stream, self.size), 1 << 16)
        except BadInput:
            raw.close()
            raise
        except Exception as exc:     # zipfile.BadZipFile, a codec's error: one line naming the member
            raw.close()
            raise BadInput(self.display, f"cannot read: {exc.__class__.__name__}: {exc}") from None

    @property
    def display(self) -> str:
        return f"{self.archive}!{self.name}"


class _Slice(io.RawIOBase):
    """At most `size` bytes of `inner`; closing it closes `inner` and `also`. A damaged member
    (a zip CRC error, a cut stream) is BadInput naming it, from whichever read meets it."""

    def __init__(self, display: str, inner, size: int, *also):
        self._display = display
        self._inner = inner
        self._left = size
        self._also = also

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        view = memoryview(buf)[:min(len(buf), self._left)]
        try:
            n = self._inner.readinto(view) or 0
        except BadInput:
            raise
        except Exception as exc:
            raise BadInput(self._display, f"cannot read: {exc.__class__.__name__}: {exc}") from None
        if not n:
            raise BadInput(self._display, f"cannot read: the archive ends {self._left:,} bytes before the end of "
                                          "this member")
        self._left -= n
        return n

    def close(self) -> None:
        try:
            for thing in (self._inner, *self._also):
                thing.close()
        finally:
            super().close()


@dataclass
class Listing:
    """What an archive holds: its members (with the bytes of the small ones), the incident.yaml
    found (name and bytes) and the members refused, with why."""

    members: list[tuple[Member, bytes | None]]
    incident: tuple[str, bytes] | None
    refused: list[tuple[str, str]]
    problem: str | None = None       # the archive as a whole cannot be used


def list_archive(path: str, kind: str, cap: int, explicit_cap: bool) -> Listing:
    """Every regular member of the archive at `path`; BadInput when it cannot be listed."""
    try:
        found = _zip_members(path, cap, explicit_cap) if kind == "zip" else _tar_members(path, cap, explicit_cap)
    except BadInput:
        raise
    except (OSError, EOFError, ValueError) as exc:
        raise BadInput(path, f"cannot read the archive: {exc.__class__.__name__}: {exc}") from None
    except Exception as exc:     # tarfile.TarError, zipfile.BadZipFile, a codec's own error
        raise BadInput(path, f"cannot read the archive: {exc.__class__.__name__}: {exc}") from None
    members, refused = found
    yamls = [(m, data) for m, data in members if os.path.basename(m.name) in INCIDENT_FILES
             and m.name.count("/") <= 1]
    if len(yamls) > 1:
        hint = f"unzip {path}" if kind == "zip" else f"tar xf {path}"
        return Listing([], None, refused, f"holds {len(yamls)} incident bundles ({', '.join(m.name for m, _ in yamls[:3])}"
                                           f"{', …' if len(yamls) > 3 else ''}): extract it first ({hint}) and "
                                           "classify the directory, one verdict per bundle")
    incident = None
    if yamls:
        member, data = yamls[0]
        if data is None:
            with member.open() as fh:
                data = fh.read(KEEP_SMALL + 1)
        incident = (member.name, data)
        root = os.path.dirname(member.name)
        after = f"{root}/{RELAUNCH_DIR}/" if root else f"{RELAUNCH_DIR}/"
        # written after the failure, like a bundle directory's recovery/: not evidence of it
        members = [(m, d) for m, d in members if not m.name.startswith(after)]
    return Listing(members, incident, refused)


def _safe_name(name: str) -> tuple[str, str | None]:
    """(the member's name normalised, why it is refused or None).

    Every name is normalised before anything looks at it: `INC//tmp/x` is `INC/tmp/x`, and
    `./INC/./a` is `INC/a`. A name that could leave the bundle once its top folder is cut off
    (absolute, `..`, a drive letter, a backslash, a NUL, nothing at all) is refused, not repaired."""
    why = unsafe_name(name)
    if why:
        return name, why
    return "/".join(checked_parts(name)), None


def _shown(name: str) -> str:
    """A refused name as a warning line can carry it: control characters escaped."""
    return name.encode("unicode_escape", "backslashreplace").decode("ascii")[:200] if not name.isprintable() else name


def _hidden(name: str) -> bool:
    return any(part.startswith(".") and part not in (".", "") for part in name.split("/"))


def _when(seconds: float) -> datetime | None:
    try:
        when = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return when if MIN_YEAR <= when.year <= MAX_YEAR else None


def _tar_members(path: str, cap: int, explicit_cap: bool):
    import tarfile

    with open(path, "rb") as fh:
        codec = codec_of(fh.read(MAGIC_BYTES))
    raw = open(path, "rb")
    stream = Inflated(raw, path, cap, codec=codec, check_ratio=not explicit_cap) if codec else raw
    members: list[tuple[Member, bytes | None]] = []
    refused: list[tuple[str, str]] = []
    kept = 0
    try:
        # "r|": one sequential pass (a compressed stream cannot seek); the codec is ours, bounded.
        with tarfile.open(fileobj=stream, mode="r|") as tar:   # type: ignore[call-overload]
            for n, info in enumerate(_until_damaged(tar, path, refused)):
                if n >= MAX_MEMBERS:
                    refused.append((f"{path}!…", f"more than {MAX_MEMBERS:,} members: the rest not read"))
                    break
                if info.isdir():
                    continue
                name, why = _safe_name(info.name)
                if why is None and (info.issym() or info.islnk()):
                    why = "a link"
                elif why is None and (info.ischr() or info.isblk() or info.isfifo()):
                    why = "a device or FIFO"
                elif why is None and not info.isreg():
                    continue                   # directories
                elif why is None and info.size > cap:
                    why = f"larger than the {cap >> 20} MiB limit on an input"
                if why:
                    refused.append((f"{path}!{_shown(name)}", f"{why}: not read"))
                    continue
                if _hidden(name):
                    continue
                member = Member(path, "tar", name, info.size, _when(info.mtime), offset=info.offset_data,
                                codec=codec, cap=cap, check_ratio=not explicit_cap)
                data = None
                if info.size <= KEEP_SMALL and kept + info.size <= KEEP_TOTAL:
                    try:
                        extracted = tar.extractfile(info)
                        data = extracted.read() if extracted is not None else b""
                    except BadInput as exc:
                        refused.append((f"{path}!{name}", f"{exc.problem}: the rest of the archive not read"))
                        break
                    except Exception as exc:   # tarfile.ReadError, EOFError: the archive is cut here
                        refused.append((f"{path}!{name}", f"cannot read: {exc.__class__.__name__}: {exc}; "
                                                          "the rest of the archive not read"))
                        break
                    if len(data) < info.size:
                        refused.append((f"{path}!{name}", "cut short: the archive ends inside it"))
                        break
                    kept += len(data)
                members.append((member, data))
    finally:
        stream.close()
        raw.close()
    return members, refused


def _until_damaged(tar, path: str, refused: list[tuple[str, str]]):
    """The members of a tar stream, up to where it is damaged (noted in `refused`): a cut
    .tar.gz still gives the members before the cut. Nothing listed at all is BadInput."""
    count = 0
    while True:
        try:
            info = tar.next()
        except BadInput as exc:
            if not count:
                raise
            refused.append((path, f"the archive is cut short or damaged ({exc.problem}): members after the "
                                  f"first {count:,} are not read"))
            return
        except Exception as exc:
            if not count:
                raise BadInput(path, f"cannot read the archive: {exc.__class__.__name__}: {exc}") from None
            refused.append((path, f"the archive is cut short or damaged ({exc.__class__.__name__}: {exc}): "
                                  f"members after the first {count:,} are not read"))
            return
        if info is None:
            return
        count += 1
        yield info


def _zip_members(path: str, cap: int, explicit_cap: bool):
    import zipfile

    members: list[tuple[Member, bytes | None]] = []
    refused: list[tuple[str, str]] = []
    with zipfile.ZipFile(path) as zf:
        for n, info in enumerate(zf.infolist()):
            if n >= MAX_MEMBERS:
                refused.append((f"{path}!…", f"more than {MAX_MEMBERS:,} members: the rest not read"))
                break
            if info.is_dir():
                continue
            name, why = _safe_name(info.filename)
            mode = info.external_attr >> 16
            if why is None and stat.S_ISLNK(mode):
                why = "a link"
            elif why is None and mode and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)):
                why = "a device or FIFO"
            elif why is None and info.is_dir():
                continue
            elif why is None and info.flag_bits & 0x1:
                why = "encrypted"
            elif why is None and info.file_size > cap:
                why = f"larger than the {cap >> 20} MiB limit on an input"
            elif why is None and not explicit_cap and info.file_size > RATIO_AFTER and \
                    info.file_size > MAX_RATIO * max(1, info.compress_size):
                why = (f"expands more than {MAX_RATIO}-fold (a zip bomb?); to read it anyway, give a limit with "
                       "--max-input-bytes")
            if why:
                refused.append((f"{path}!{_shown(name)}", f"{why}: not read"))
                continue
            if _hidden(name):
                continue
            when = None
            try:
                when = datetime(*info.date_time, tzinfo=timezone.utc)
            except ValueError:
                pass
            members.append((Member(path, "zip", name, info.file_size, when, cap=cap,
                                   stored=info.filename if info.filename != name else None), None))
    return members, refused
