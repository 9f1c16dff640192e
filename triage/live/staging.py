"""Writing an incident bundle so that nobody ever sees half of one.

Everything goes into a hidden directory beside the target (same file system, so the final
`rename` is atomic) and the directory is renamed into place at the end. The directory that holds
the target is opened once and held (`safedir.py`): the staging directories are made in it and
renamed within it through that descriptor, so swapping it (or a folder above it) for a link
while the sources run cannot move the bundle, or root's writes, anywhere else. Inside it each file is
written under a temporary name and renamed when complete, and a source cut off at its timeout
can no longer add files: what it wrote before stays, whole; what it was writing is dropped.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Callable

from ..errors import BadInput
from ..safedir import HeldDir
from ..timestamps import rfc3339

CHUNK = 1 << 20


@dataclass(frozen=True)
class FileRecord:
    path: str                  # relative to the bundle, "/"-separated
    sha256: str
    size: int
    source: str                # the command, URL or API it came from
    duration_s: float          # how long the reading took
    written: str               # UTC, ISO 8601


class SourceCut(Exception):
    """The source ran past its timeout: the collector no longer takes its files."""


def utc_now() -> str:
    return rfc3339(datetime.now(timezone.utc))


def check_target(target: Path) -> None:
    """BadInput unless `target` can become the bundle: absent or an empty directory, in a
    directory that exists."""
    parent = target.parent
    if not parent.is_dir():
        raise BadInput(str(target), f"cannot write the bundle: {parent} is not an existing directory")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise BadInput(str(target), "already exists and is not a directory: choose a new name")
    if target.is_dir() and any(target.iterdir()):
        raise BadInput(str(target), "already exists and is not empty: choose a new name")


class Staging:
    """The bundle being written: files are added by path; `finish` renames it into place."""

    def __init__(self, target: Path) -> None:
        check_target(target)
        self.target = target
        self._parent = HeldDir.open(target.parent.absolute(), follow=True)
        parent = held_path(self._parent)
        try:
            self.root = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".partial"))
        except OSError as exc:
            self._parent.close()
            raise BadInput(str(target.parent), f"cannot write the bundle here: {exc.strerror or exc}") from None
        # Files being written live apart from the bundle: a source still writing when the time is up
        # leaves nothing in it, even after the bundle is renamed into place.
        try:
            self.spool = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".spool"))
        except OSError as exc:
            shutil.rmtree(self.root, ignore_errors=True)
            self._parent.close()
            raise BadInput(str(target.parent), f"cannot write the bundle here: {exc.strerror or exc}") from None
        self.done = False
        self.records: list[FileRecord] = []
        self._umask = _umask()            # read once, before the sources' threads start: umask(2) is process-wide
        self._lock = threading.Lock()
        self._names: set[str] = set()

    def write(self, rel: str, data: bytes, source: str, started: float, is_open: Callable[[], bool]) -> FileRecord:
        return self.write_with(rel, lambda out: out.write(data), source, started, is_open)

    def write_with(self, rel: str, fill: Callable[[BinaryIO], object], source: str, started: float,
                   is_open: Callable[[], bool]) -> FileRecord:
        """Write `rel` with `fill(file)`; recorded with its SHA-256 once whole. SourceCut when the
        source was cut off meanwhile (the file is then dropped)."""
        rel = self._unique(rel)
        final = self.root / rel
        fd, tmp = tempfile.mkstemp(dir=self.spool, prefix="part-")
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
            digest, size = file_digest(tmp)
            with self._lock:
                if not is_open() or self.done:
                    raise SourceCut(rel)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(tmp, 0o666 & ~self._umask)
                os.replace(tmp, final)
                record = FileRecord(rel, digest, size, source, round(time.monotonic() - started, 3), utc_now())
                self.records.append(record)
            return record
        except BaseException:
            _unlink(tmp)
            with self._lock:
                self._names.discard(rel)
            raise

    def write_meta(self, rel: str, text: str) -> None:
        """incident.yaml and manifest.json: written by the collector itself, last."""
        path = self.root / rel
        path.write_text(text, encoding="utf-8")

    def finish(self) -> Path:
        """Rename the bundle into place (onto an empty directory too). BadInput when the target
        was filled or created meanwhile; the staging directory is then removed."""
        with self._lock:
            self.done = True                # from here on no source adds a file
        shutil.rmtree(self.spool, ignore_errors=True)
        mode = 0o777 & ~self._umask
        for here, dirs, _ in os.walk(self.root):
            for d in dirs:
                os.chmod(os.path.join(here, d), mode)
        os.chmod(self.root, mode)
        held, name = self._parent.fd, self.target.name
        try:
            try:                          # rename(2) replaces an empty directory, but not on every file system
                os.rmdir(name, dir_fd=held)
            except (FileNotFoundError, NotADirectoryError):
                pass
            os.rename(self.root.name, name, src_dir_fd=held, dst_dir_fd=held)
        except OSError as exc:
            self.discard()
            raise BadInput(str(self.target), f"cannot put the bundle in place: {exc.strerror or exc}") from None
        self._parent.close()
        return self.target

    def discard(self) -> None:
        with self._lock:
            self.done = True
        shutil.rmtree(self.spool, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        self._parent.close()

    def _unique(self, rel: str) -> str:
        """Two readings may want one name (two scrapes in one millisecond): the second gets -2."""
        with self._lock:
            stem, dot, ext = rel.rpartition(".") if "." in rel.rsplit("/", 1)[-1] else (rel, "", "")
            candidate, n = rel, 1
            while candidate in self._names:
                n += 1
                candidate = f"{stem}-{n}{dot}{ext}"
            self._names.add(candidate)
            return candidate


def held_path(held: HeldDir) -> str:
    """A path that names the held directory itself, whatever its name names by now (Linux's
    /proc/self/fd); the plain path where there is no /proc."""
    magic = f"/proc/self/fd/{held.fd}"
    return magic if os.path.isdir(magic) else held.real


def file_digest(path: str | Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
