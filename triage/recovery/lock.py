"""A host-level lock so two `triage recover` runs cannot act on one host at the same time.

The lock is `fcntl.flock(LOCK_EX | LOCK_NB)` on a file descriptor kept open while the lock is
held; the kernel drops it when the holder dies, however it dies. The file's content (JSON) only
names the holder — pid, the process start time from /proc/<pid>/stat (field 22), user, host,
command line — so a refusal can say who holds it, and a leftover file from a dead holder (or a
pid since reused by another program) is recognised as stale and taken over with a warning.

The lock path may sit in a world-writable directory (/run/lock, /tmp), so any local user can
put something there first. It is opened with O_NOFOLLOW | O_NONBLOCK, through a directory
reached without following a symlink someone else owns, and refused unless it is a regular file
with one link owned by the running user: a FIFO there cannot hang the run, and a hard link or a
symlinked directory cannot turn the holder record (and the unlink on release) onto another file.

`BundleLock` locks the incident itself (INCIDENT/.recovery.lock): two recoveries of one
bundle given different TRIAGE_LOCK_FILEs (containers that do not share /run/lock) still
exclude each other.
"""
from __future__ import annotations

import fcntl
import json
import os
import stat
import socket
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import TriageError
from ..live.procs import PROC, boot_id, read_proc
from ..redact import redact
from ..safedir import HeldDir
from ..safefile import NotRegular, check_regular, describe, read_regular
from ..timestamps import rfc3339
from .audit import current_user

LOCK_NAME = "triage-recover.lock"
BUNDLE_LOCK_NAME = ".recovery.lock"
ROOT_LOCK_DIR = "/run/oom-triage"   # root only: 0700, so no other user can plant the lock file
MAX_SYMLINKS = 40                    # as the kernel's own path walk


class LockBusy(TriageError):
    """Another live `triage recover` holds the lock."""


# -- processes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcStart:
    """When a process started: clock ticks since boot (exact) and the same as UTC (readable)."""
    ticks: int
    boot_id: str | None
    utc: str


def proc_start(pid: int) -> ProcStart | None:
    """Start time of `pid` from /proc/<pid>/stat field 22, or None (gone, zombie, no /proc)."""
    info = read_proc(pid)
    if info is None:
        return None
    moment = info.start_utc
    return ProcStart(info.start_ticks, boot_id(), rfc3339(moment) if moment else "")


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                          # alive, owned by someone else
        return True
    return True


def _cmdline(pid: int) -> list[str]:
    info = read_proc(pid)
    return list(info.cmdline) if info is not None else list(sys.argv)


# -- holder -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Holder:
    """Who holds (or held) the lock, as written into the lock file."""
    pid: int
    start_time: str                    # UTC RFC3339, from /proc/<pid>/stat field 22
    user: str
    host: str
    cmdline: list[str] = field(default_factory=list)
    acquired_at: str = ""
    start_ticks: int | None = None     # exact start, for PID-reuse checks
    boot_id: str | None = None

    @classmethod
    def me(cls) -> Holder:
        pid = os.getpid()
        start = proc_start(pid)
        return cls(pid=pid, start_time=start.utc if start else "", user=current_user(),
                   host=socket.gethostname(), cmdline=redact(_cmdline(pid)),
                   acquired_at=rfc3339(datetime.now(timezone.utc)),
                   start_ticks=start.ticks if start else None,
                   boot_id=start.boot_id if start else None)

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        """The holder named by lock-file content, or None when it names nobody we can read."""
        try:
            obj = json.loads(data.decode("utf-8"))
            return cls(pid=int(obj["pid"]), start_time=str(obj.get("start_time") or ""),
                       user=str(obj.get("user") or "?"), host=str(obj.get("host") or "?"),
                       cmdline=[str(a) for a in obj.get("cmdline") or []],
                       acquired_at=str(obj.get("acquired_at") or ""),
                       start_ticks=_int_or_none(obj.get("start_ticks")),
                       boot_id=str(obj["boot_id"]) if obj.get("boot_id") else None)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def describe(self) -> str:
        where = "" if self.host == socket.gethostname() else f" on {self.host}"
        return f"pid {self.pid} (started {self.start_time or 'at an unknown time'} by {self.user}{where})"

    def why_dead(self) -> str | None:
        """Why this holder can no longer be running (None when it still is)."""
        if self.boot_id and boot_id() and self.boot_id != boot_id():
            return "the host has rebooted since"
        if not _pid_exists(self.pid):
            return "the process is gone"
        now = proc_start(self.pid)
        if now is None:
            return "the process is gone" if (PROC / "self" / "stat").exists() else None
        if self.start_ticks is not None and now.ticks != self.start_ticks:
            return f"pid {self.pid} now belongs to another process (started {now.utc})"
        if self.start_ticks is None and self.start_time and now.utc and now.utc != self.start_time:
            return f"pid {self.pid} now belongs to another process (started {now.utc})"
        return None


# -- the lock -----------------------------------------------------------------------------------

def default_lock_path() -> Path:
    """$TRIAGE_LOCK_FILE if set; for root /run/oom-triage (a directory only root can write, so no
    local user can plant a file that blocks or redirects root's recovery); otherwise
    $XDG_RUNTIME_DIR (the user's own 0700 directory), else /tmp (per user).

    Every recovery on one host must agree on the path; set TRIAGE_LOCK_FILE the same way for all
    of them when containers do not share /run. Recoveries of one bundle also hold its own lock."""
    override = os.environ.get("TRIAGE_LOCK_FILE")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        private = _private_dir(Path(ROOT_LOCK_DIR))
        if private is not None:
            return private / LOCK_NAME
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    if runtime and _private_dir(Path(runtime), create=False) is not None:
        return Path(runtime) / LOCK_NAME
    return Path(f"/tmp/triage-recover-{os.getuid()}.lock")


def _private_dir(directory: Path, create: bool = True) -> Path | None:
    """`directory` when it is a real directory of ours that no one else can write (made 0700 if
    missing), else None."""
    if create:
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        st = os.lstat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return None
    return directory


class HostLock:
    """`with HostLock() as lock:` — refused with LockBusy while another recovery runs.

    After acquiring, `lock.taken_over_from` names a stale holder that was replaced and
    `lock.warning` says so in one line (the caller shows it)."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path) if path is not None else default_lock_path()
        self.holder: Holder | None = None
        self.taken_over_from: Holder | None = None
        self.warning: str | None = None
        self._fd: int | None = None
        self._dir: int | None = None        # the lock's directory, pinned while the lock is held

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> HostLock:
        if self._fd is not None:
            return self
        for _ in range(5):                  # retry if the file was swapped under us
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                content = _read(fd)
                os.close(fd)
                self._close_dir()
                raise LockBusy(self._busy_message(Holder.parse(content))) from None
            if not self._same_file(fd):     # released and unlinked between open and flock
                os.close(fd)
                continue
            try:
                self._check_stale(_read(fd))
                self._fd = fd
                self._write_holder()
            except BaseException:
                self._fd = None
                os.close(fd)
                self._close_dir()
                raise
            return self
        self._close_dir()
        raise TriageError(f"cannot take the recovery lock {self.path}: the file keeps changing")

    def release(self) -> None:
        """Drop the lock; unlink the file only while it is still ours."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._same_file(fd):
                os.unlink(self.path.name, dir_fd=self._dir)   # before close: no one can flock a ghost
        except OSError:
            pass
        finally:
            os.close(fd)
            self._close_dir()

    def __enter__(self) -> HostLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # helpers
    def _open(self) -> int:
        """The lock file, opened without following, blocking on or writing through anything planted."""
        self._close_dir()
        try:
            self._dir = open_dir(self.path.parent)
            fd = os.open(self.path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o644, dir_fd=self._dir)
        except UnsafePath as exc:
            self._close_dir()
            raise TriageError(f"cannot open the recovery lock {self.path}: {exc}") from None
        except OSError as exc:
            found = self._found()
            self._close_dir()
            if found:
                raise TriageError(f"cannot open the recovery lock {self.path}: it is {found}, not a regular file "
                                  "(someone may have put it there; remove it if no recovery runs)") from None
            raise TriageError(f"cannot open the recovery lock {self.path}: {exc.strerror or exc}") from None
        try:
            self._check_file(fd)
        except BaseException:
            os.close(fd)
            self._close_dir()
            raise
        return fd

    def _check_file(self, fd: int) -> None:
        """Only a regular file with one link, owned by us, is ever written or unlinked."""
        try:
            st = check_regular(fd, self.path, single_link=True)
        except NotRegular as exc:
            raise TriageError(f"cannot open the recovery lock {self.path}: it {_it(exc.problem)} (someone may have put "
                              "it there; remove it if no recovery runs)") from None
        if st.st_uid != os.geteuid():
            raise TriageError(f"cannot open the recovery lock {self.path}: it belongs to {_user(st.st_uid)}, not to "
                              f"the user running this ({_user(os.geteuid())}); a recovery run by that user may hold "
                              "it — if none runs, remove the file")

    def _found(self) -> str | None:
        """What sits at the lock path when it is not a regular file (a FIFO, a symlink...), else None."""
        if self._dir is None:
            return None
        try:
            mode = os.stat(self.path.name, dir_fd=self._dir, follow_symlinks=False).st_mode
        except OSError:
            return None
        return None if stat.S_ISREG(mode) else describe(mode)

    def _close_dir(self) -> None:
        if self._dir is not None:
            os.close(self._dir)
            self._dir = None

    def _same_file(self, fd: int) -> bool:
        try:
            a = os.fstat(fd)
            b = os.stat(self.path.name, dir_fd=self._dir, follow_symlinks=False)
        except (OSError, TypeError):
            return False
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    def _busy_message(self, holder: Holder | None) -> str:
        who = holder.describe() if holder else "holder unknown"
        return f"another triage recover is running: {who}; lock file {self.path}"

    def _check_stale(self, content: bytes) -> None:
        """The flock is ours; decide what a leftover holder record means."""
        if not content.strip():
            return
        old = Holder.parse(content)
        if old is None:
            self.warning = f"took over lock {self.path}: its content was unreadable"
            return
        if old.pid == os.getpid():
            return                          # our own leftover (an earlier lock in this process)
        why = old.why_dead()
        if why is None:                     # alive, same start time, yet not holding the flock
            raise LockBusy(f"lock file {self.path} names a live process {old.describe()} that "
                           "does not hold the lock; if no recovery is running, remove the file")
        self.taken_over_from = old
        self.warning = f"took over a stale recovery lock from {old.describe()}: {why}"

    def _write_holder(self) -> None:
        assert self._fd is not None
        self.holder = Holder.me()
        data = json.dumps(asdict(self.holder), sort_keys=True).encode() + b"\n"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)


def read_holder(path: str | os.PathLike[str] | None = None) -> Holder | None:
    """Who the lock file names (for `status`-style output); None when absent, unreadable or not a file."""
    try:
        return Holder.parse(read_regular(Path(path or default_lock_path())))
    except (OSError, TriageError):
        return None


class BundleLock:
    """`with BundleLock(incident):` — one recovery per incident, whatever host lock each one took.

    An flock on INCIDENT/.recovery.lock (not on actions.jsonl itself: every append flocks that
    file on its own descriptor, which would conflict with a lock held for the whole run). The
    file is never written and never removed, so it carries no content to trust and a second
    recovery always locks the same file."""

    def __init__(self, incident: str | os.PathLike[str], held: HeldDir | None = None):
        self.incident = Path(incident)
        self.path = self.incident / BUNDLE_LOCK_NAME
        self._held = held             # the incident directory a recovery holds open: lock that one
        self._fd: int | None = None

    def acquire(self) -> BundleLock:
        if self._fd is not None:
            return self
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockBusy(f"another triage recover is running on {self.incident} (it holds {self.path}), "
                           "perhaps with another TRIAGE_LOCK_FILE: nothing was done") from None
        except OSError as exc:
            os.close(fd)
            raise TriageError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> BundleLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def _open(self) -> int:
        try:
            directory = os.dup(self._held.fd) if self._held is not None else \
                os.open(self.incident, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise TriageError(f"cannot open the incident directory {self.incident}: {exc.strerror or exc}") from None
        try:
            # Read-only: the file is only flocked, so even a planted hard link is never written.
            fd = os.open(BUNDLE_LOCK_NAME, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o644, dir_fd=directory)
        except OSError as exc:
            try:
                mode = os.stat(BUNDLE_LOCK_NAME, dir_fd=directory, follow_symlinks=False).st_mode
                found = None if stat.S_ISREG(mode) else describe(mode)
            except OSError:
                found = None
            what = f"it is {found}, not a regular file" if found else (exc.strerror or str(exc))
            raise TriageError(f"cannot open the incident lock {self.path}: {what}") from None
        finally:
            os.close(directory)
        try:
            check_regular(fd, self.path, single_link=True)
        except NotRegular as exc:
            os.close(fd)
            raise TriageError(f"cannot open the incident lock {self.path}: it {_it(exc.problem)} "
                              "(someone may have put it there; remove it if no recovery runs)") from None
        return fd


# -- walking to the lock's directory ----------------------------------------------------------

class UnsafePath(Exception):
    """A directory on the way to a lock file that another user could redirect."""


def open_dir(directory: Path) -> int:
    """An fd on `directory`, walked one component at a time with O_NOFOLLOW.

    The lock's own directory must not be a symlink. A symlink further up is followed only when
    root or the running user owns it (/var/lock -> /run/lock): one that another user made (in
    /tmp, say) could point the lock, its holder record and the unlink on release anywhere."""
    text = os.fspath(directory) or "."
    start = os.open("/" if text.startswith("/") else ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return _descend(start, text, [MAX_SYMLINKS], final=True)


def _descend(fd: int, path: str, budget: list[int], final: bool) -> int:
    """Walk `path` from `fd` (consumed); return an fd on where it leads."""
    parts = [p for p in path.split("/") if p and p != "."]
    try:
        for i, part in enumerate(parts):
            last = final and i == len(parts) - 1
            fd = _step(fd, part, budget, last)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step(fd: int, part: str, budget: list[int], last: bool) -> int:
    """Enter `part` of the directory `fd` (closing `fd`), following a symlink only when trusted."""
    try:
        nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError as exc:
        try:
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if not stat.S_ISLNK(st.st_mode):
            raise
        if last:
            raise UnsafePath(f"its directory {part!r} is a symbolic link (use the directory it points to)") \
                from None
        if st.st_uid not in (0, os.geteuid()):
            raise UnsafePath(f"{part!r} on the way to it is a symbolic link owned by {_user(st.st_uid)}") from None
        budget[0] -= 1
        if budget[0] < 0:
            raise UnsafePath("too many symbolic links on the way to it") from None
        target = os.readlink(part, dir_fd=fd)
        base = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if target.startswith("/") \
            else os.dup(fd)
        nxt = _descend(base, target, budget, final=False)
    os.close(fd)
    return nxt


def _it(problem: str) -> str:
    """`a FIFO, not a regular file` -> `is a FIFO, not a regular file`; `has 2 hard links...` unchanged."""
    return problem if problem.startswith("has ") else "is " + problem


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, 65536, 0)
    except OSError:
        return b""


__all__ = ["BundleLock", "Holder", "HostLock", "LockBusy", "ProcStart", "default_lock_path", "open_dir",
           "proc_start", "read_holder"]
