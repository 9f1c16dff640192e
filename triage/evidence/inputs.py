"""The paths given on the command line, turned into the inputs to read.

A directory is walked (an incident bundle when it holds incident.yaml), an archive is read in
place (its members are inputs of their own, see evidence.archive), a stream (stdin, `<(...)`, a
FIFO) is spooled to a temporary file. A path that cannot be read is an input with its `error`
set, so the others are still read.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from ..bundle import RELAUNCH_DIR
from ..errors import BadInput
from .base import InputFile, input_limit

# Sub-directories of a bundle written after the failure: what happened after the incident must
# not change its diagnosis.
NOT_EVIDENCE_DIRS = {RELAUNCH_DIR}


@dataclass(frozen=True)
class ArchiveBundle:
    """An incident bundle packed in an archive: where its incident.yaml is and what it holds."""

    display: str
    raw: bytes


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
                    if not (not rel_here and entry.name in NOT_EVIDENCE_DIRS):
                        subdirs.append((entry.path, rel, os.path.join(real_here, entry.name)))
                elif entry.is_file():   # no FIFOs or sockets inside a bundle; a symlink to a file is one
                    link = entry.is_symlink()
                    out.append((entry.path, rel, os.path.realpath(entry.path) if link else
                                os.path.join(real_here, entry.name)))
            except OSError:
                continue
        pending.extend(reversed(subdirs))
    return out


def _spool(stream: BinaryIO, spool: list[str] | None) -> str:
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
