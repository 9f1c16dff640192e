"""Opening files that someone else may have put in place: an incident bundle is writable by
whoever collected it, and /run/lock by every local user.

* A FIFO opened for reading blocks until a writer shows up, so a plain `open()` of a planted
  FIFO hangs the command with no output: files are opened with O_NONBLOCK and anything that is
  not a regular file (FIFO, socket, device, directory) is refused before a byte is read.
* A file written to (a note, a lock) is opened with O_NOFOLLOW, and one with more than one hard
  link is refused: either would let a planted name redirect the write into another file.
"""
from __future__ import annotations

import errno
import os
import stat

from .errors import BadInput

CHUNK = 1 << 20


class NotRegular(BadInput):
    """The path names a FIFO, a socket, a device, a directory, a symbolic link or a hard link."""


def describe(mode: int) -> str:
    """`a FIFO`, `a socket`, ... for a file mode from (l)stat."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(fd: int, path: str | os.PathLike[str], *, single_link: bool = False) -> os.stat_result:
    """fstat `fd`: NotRegular unless it is a regular file (with exactly one link when asked)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(str(path), f"{describe(st.st_mode)}, not a regular file")
    if single_link and st.st_nlink != 1:
        raise NotRegular(str(path), f"has {st.st_nlink} hard links: it may be another file under a second "
                                    "name, so it is not written to")
    return st


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The whole content of a regular file; NotRegular (at once, never blocking) for anything else.

    FileNotFoundError passes through; other OS errors become BadInput."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise BadInput(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        check_regular(fd, path)
        os.set_blocking(fd, True)
        chunks = []
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError as exc:
        raise BadInput(str(path), f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_limited(path: str | os.PathLike[str], limit: int, too_big: str) -> bytes:
    """read_regular for a small file a person wrote (incident.yaml, a model's config.json):
    BadInput naming `path` with `too_big` past `limit` bytes, or with why it cannot be read."""
    try:
        if os.stat(path).st_size > limit:
            raise BadInput(str(path), too_big)
        return read_regular(path)
    except OSError as exc:
        raise BadInput(str(path), f"cannot read: {exc.strerror or exc}") from None


def open_append(path: str | os.PathLike[str], mode: int = 0o644) -> tuple[int, bool]:
    """(fd, created) for appending to a regular file with one link, never through a symlink.

    NotRegular for a symlink, a FIFO (even one with a reader), a device or a hard-linked file."""
    existed = os.path.lexists(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        raise _open_error(path, exc, "append to") from None
    try:
        check_regular(fd, path, single_link=True)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, not existed


def _open_error(path: str | os.PathLike[str], exc: OSError, verb: str) -> BadInput:
    """One line for a failed open; the planted-file cases say what was found there."""
    if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
        try:
            found = describe(os.lstat(path).st_mode)
        except OSError:
            found = "not a regular file"
        if found == "a symbolic link":
            return NotRegular(str(path), f"a symbolic link: refusing to {verb} the file it points to")
        return NotRegular(str(path), f"{found}, not a regular file")
    return BadInput(str(path), f"cannot {verb}: {exc.strerror or exc}")


def kind_at(path: str | os.PathLike[str], follow: bool = True) -> str | None:
    """None for a regular file (or nothing there); else what is there (`a FIFO`, `a socket`...).

    For a reader that cannot open the file itself safely: it narrows, not closes, the window."""
    try:
        mode = os.stat(path, follow_symlinks=follow).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else describe(mode)


__all__ = ["NotRegular", "check_regular", "describe", "kind_at", "open_append", "read_regular"]
