"""Writing inside a directory another user may own: an incident bundle, serve's incident folders.

Recovery runs as root over a directory that the on-call user (or anyone who could write the
bundle) controls. A path string is resolved again at every use, so a name planted between two
uses — a symlink as `actions.jsonl`, a symlinked `recovery/`, the whole directory swapped for a
link — would steer root's write into a file of the planter's choosing. So:

* the directory is opened once (`HeldDir.open`) and held by its descriptor for the whole run;
  its real path is read from that descriptor once, and every later name is resolved beneath the
  descriptor, never from the path string again;
* a name beneath it is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where the
  kernel has it, else one component at a time with `O_NOFOLLOW`: no symlink on the way is
  followed, and `..`, absolute names and empty components are refused before any syscall;
* a file written to is refused unless it is a regular file with one link, owned by this process's
  user or by the directory's owner (a hard link to a root-only file has two links; a FIFO or a
  device is not a regular file);
* files are created with `O_EXCL` where a fresh file is meant, and replaced by writing a
  temporary file and renaming it within the held directory.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import Iterable

from .errors import BadInput
from .safefile import NotRegular, check_regular, describe

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# openat2(2): resolve `how` (linux/openat2.h); the syscall number is the same on every 64-bit arch.
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_openat2_state: dict[str, object] = {"usable": None}


class UnsafeName(BadInput):
    """A name that could leave the directory: absolute, `..`, empty, a NUL, a backslash."""


def checked_parts(name: str | os.PathLike[str]) -> list[str]:
    """The components of a relative name, or UnsafeName. `.` components and doubled slashes are
    dropped; anything that could point outside the directory is refused, not repaired."""
    text = os.fspath(name)
    problem = unsafe_name(text)
    if problem:
        raise UnsafeName(text, problem)
    return [p for p in text.split("/") if p not in ("", ".")]


def unsafe_name(text: str) -> str | None:
    """Why `text` cannot name a file beneath a directory, or None."""
    if all(part in ("", ".") for part in text.split("/")):
        return "an empty name"
    if "\0" in text:
        return "a name with a NUL byte"
    if "\\" in text:
        return "a name with a backslash (a Windows path?)"
    if text.startswith("/"):
        return "an absolute path"
    if any(len(part) > 1 and part[1] == ":" and part[0].isalpha() for part in text.split("/")):
        return "a drive-letter path"       # `C:x` once a top folder is cut off
    if ".." in text.split("/"):
        return "a path with '..'"
    return None


@dataclass
class HeldDir:
    """A directory held open by descriptor; names beneath it never follow a link."""
    fd: int
    path: str                      # as given, for messages
    real: str                      # its real path when it was opened (never re-resolved)
    owner: int

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = False, mode: int = 0o755,
             follow: bool = False) -> "HeldDir":
        """Hold the directory at `path`. Its last component may not be a symlink (unless `follow`:
        for a reader only); the components above it are resolved once, here."""
        text = os.fspath(path)
        if create:
            try:
                os.mkdir(text, mode)
            except FileExistsError:
                pass
            except OSError as exc:
                raise BadInput(text, f"cannot create the directory: {exc.strerror or exc}") from None
        try:
            fd = os.open(text, _DIR_FLAGS | (0 if follow else os.O_NOFOLLOW))
        except OSError as exc:
            raise _dir_error(text, exc) from None
        return cls._held(fd, text)

    @classmethod
    def _held(cls, fd: int, path: str) -> "HeldDir":
        try:
            st = os.fstat(fd)
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            real = os.path.realpath(path)
            st = os.fstat(fd)
        return cls(fd, path, real, st.st_uid)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "HeldDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def display(self, name: str | os.PathLike[str] = "") -> str:
        return os.path.join(self.path, os.fspath(name)) if os.fspath(name) else self.path

    def still_there(self) -> bool:
        """True while the path given still names the held directory (it was not swapped)."""
        try:
            a, b = os.stat(self.path, follow_symlinks=False), os.fstat(self.fd)
        except OSError:
            return False
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) and stat.S_ISDIR(a.st_mode)

    # -- directories beneath -------------------------------------------------------------------
    def subdir(self, name: str, *, create: bool = False, mode: int = 0o755) -> "HeldDir":
        """The directory `name` beneath this one, held too (the caller closes it: `with`)."""
        parts = checked_parts(name)
        fd = os.dup(self.fd)
        try:
            for part in parts:
                if create:
                    try:
                        os.mkdir(part, mode, dir_fd=fd)
                    except FileExistsError:
                        pass
                nxt = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError as exc:
            os.close(fd)
            raise _dir_error(self.display(name), exc, self._lstat(name)) from None
        return HeldDir._held(fd, self.display(name))

    # -- files beneath -------------------------------------------------------------------------
    def open_file(self, name: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor for `name` beneath this directory, no link followed on the way."""
        parts = checked_parts(name)
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        fd = _openat2(self.fd, "/".join(parts), flags, mode)
        if fd is not None:
            return fd
        return _walk_open(self.fd, parts, flags, mode)

    def open_append(self, name: str, mode: int = 0o644, owners: Iterable[int] | None = None) -> tuple[int, bool]:
        """(fd, created) for appending to `name`: a regular file with one link and an expected owner."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
        created = False
        try:
            fd = self.open_file(name, flags | os.O_CREAT | os.O_EXCL, mode)
            created = True
        except FileExistsError:
            fd = self._open_existing(name, flags)
        except OSError as exc:
            raise self._error(name, exc, "append to") from None
        return self._vetted(fd, name, owners), created

    def create_new(self, name: str, mode: int = 0o644, *, readable: bool = False) -> int:
        """A new, empty file `name` (O_EXCL: nothing planted there is opened)."""
        flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_CREAT | os.O_EXCL
        try:
            fd = self.open_file(name, flags, mode)
        except OSError as exc:
            raise self._error(name, exc, "create") from None
        return self._vetted(fd, name, None)

    def read_fd(self, name: str) -> int | None:
        """A read descriptor for a regular file `name`, None when there is none; never blocks."""
        try:
            fd = self.open_file(name, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(name, exc, "read") from None
        try:
            check_regular(fd, self.display(name))
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_bytes(self, name: str, limit: int | None = None) -> bytes | None:
        """The content of `name` (at most `limit` bytes), None when there is none."""
        fd = self.read_fd(name)
        if fd is None:
            return None
        try:
            chunks, got = [], 0
            while limit is None or got < limit:
                chunk = os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """Replace `name` with `data`: a temporary file beside it, then a rename within the held
        directory (a link planted as `name` is replaced, never written through)."""
        parts = checked_parts(name)
        if len(parts) > 1:
            with self.subdir("/".join(parts[:-1])) as parent:
                parent.write_atomic(parts[-1], data, mode)
            return
        tmp = f".{parts[-1]}.{os.getpid()}.tmp"
        self.unlink(tmp)
        fd = self.create_new(tmp, mode)
        try:
            os.fchmod(fd, mode)                  # exactly `mode`, whatever the umask
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.rename(tmp, parts[-1], src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            self.unlink(tmp)
            raise self._error(name, exc, "write") from None

    def unlink(self, name: str) -> None:
        """Remove the file `name` (a link is removed itself, never what it points to); quiet when absent."""
        parts = checked_parts(name)
        if len(parts) > 1:
            with self.subdir("/".join(parts[:-1])) as parent:
                parent.unlink(parts[-1])
            return
        try:
            os.unlink(parts[-1], dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._error(name, exc, "remove") from None

    def exists(self, name: str) -> bool:
        return self._lstat(name) is not None

    def fsync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError:
            pass

    # -- helpers -------------------------------------------------------------------------------
    def _open_existing(self, name: str, flags: int) -> int:
        try:
            return self.open_file(name, flags)
        except OSError as exc:
            raise self._error(name, exc, "append to") from None

    def _vetted(self, fd: int, name: str, owners: Iterable[int] | None) -> int:
        try:
            st = check_regular(fd, self.display(name), single_link=True)
            allowed = set(owners) if owners is not None else {os.geteuid(), self.owner}
            if st.st_uid not in allowed:
                raise NotRegular(self.display(name), f"belongs to uid {st.st_uid}, neither this user nor the "
                                                     "directory's owner: not written to")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _lstat(self, name: str | os.PathLike[str]) -> os.stat_result | None:
        parts = checked_parts(name)
        try:
            if len(parts) > 1:
                with self.subdir("/".join(parts[:-1])) as parent:
                    return os.stat(parts[-1], dir_fd=parent.fd, follow_symlinks=False)
            return os.stat(parts[-1], dir_fd=self.fd, follow_symlinks=False)
        except (OSError, BadInput):
            return None

    def _error(self, name: str, exc: OSError, verb: str) -> BadInput:
        return _file_error(self.display(name), exc, verb, self._lstat(name))


def _walk_open(dirfd: int, parts: list[str], flags: int, mode: int) -> int:
    """openat2's guarantee by hand: each directory on the way opened with O_NOFOLLOW."""
    cur = dirfd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=cur)
            if cur != dirfd:
                os.close(cur)
            cur = nxt
        return os.open(parts[-1], flags, mode, dir_fd=cur)
    finally:
        if cur != dirfd:
            os.close(cur)


def _openat2(dirfd: int, name: str, flags: int, mode: int) -> int | None:
    """The fd, or None where the kernel (or a seccomp filter) has no openat2: the caller walks."""
    if _openat2_state["usable"] is False:
        return None
    call = _openat2_state.get("call")
    if call is None:
        call = _load_openat2()
        if call is None:
            _openat2_state["usable"] = False
            return None
    import ctypes

    how = _openat2_state["how_type"](flags, mode if flags & (os.O_CREAT | getattr(os, "O_TMPFILE", 0)) else 0,
                                     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    fd = call(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), name.encode("utf-8", "surrogateescape"),
              ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        _openat2_state["usable"] = True
        return int(fd)
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM) and _openat2_state["usable"] is None:
        _openat2_state["usable"] = False
        return None
    raise OSError(err, os.strerror(err), name)


def _load_openat2():
    if os.uname().sysname != "Linux" or os.environ.get("TRIAGE_NO_OPENAT2"):
        return None
    try:
        import ctypes

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
        call.restype = ctypes.c_long
    except (OSError, AttributeError, ImportError):
        return None
    _openat2_state.update(call=call, how_type=OpenHow)
    return call


def openat2_in_use() -> bool:
    """Whether names are resolved by openat2 here (after the first open), else by the walk."""
    return _openat2_state["usable"] is True


def _dir_error(path: str, exc: OSError, st: os.stat_result | None = None) -> BadInput:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        if st is None:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            return NotRegular(path, "a symbolic link where a directory was expected: refusing to follow it "
                                    "(give the real directory)")
        if st is not None and not stat.S_ISDIR(st.st_mode):
            return NotRegular(path, f"{describe(st.st_mode)}, not a directory")
        return NotRegular(path, "a symbolic link on the way: refusing to follow it")
    if exc.errno == errno.ENOENT:
        return BadInput(path, "no such directory")
    return BadInput(path, f"cannot open the directory: {exc.strerror or exc}")


def _file_error(path: str, exc: OSError, verb: str, st: os.stat_result | None) -> BadInput:
    if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR, errno.EXDEV):
        found = describe(st.st_mode) if st is not None else "a symbolic link on the way"
        if found in ("a symbolic link", "a symbolic link on the way"):
            return NotRegular(path, f"{found}: refusing to {verb} the file it points to")
        return NotRegular(path, f"{found}, not a regular file")
    return BadInput(path, f"cannot {verb}: {exc.strerror or exc}")


__all__ = ["HeldDir", "UnsafeName", "checked_parts", "openat2_in_use", "unsafe_name"]
