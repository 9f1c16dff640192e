"""A host-level lock so two `triage recover` runs cannot act on one host at the same time.

The lock is `fcntl.flock(LOCK_EX | LOCK_NB)` on a file descriptor kept open while the lock is
held; the kernel drops it when the holder dies, however it dies. The file's content (JSON) only
names the holder — pid, the process start time from /proc/<pid>/stat (field 22), user, host,
command line — so a refusal can say who holds it, and a leftover file from a dead holder (or a
pid since reused by another program) is recognised as stale and taken over with a warning.
"""
from __future__ import annotations

import errno
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
from .audit import current_user, rfc3339
from .procs import boot_id, read_proc
from .redact import redact

LOCK_NAME = "triage-recover.lock"


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
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [a.decode("utf-8", errors="replace") for a in raw.split(b"\0") if a]
    except OSError:
        return list(sys.argv)


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
            return "the process is gone" if Path("/proc/self/stat").exists() else None
        if self.start_ticks is not None and now.ticks != self.start_ticks:
            return f"pid {self.pid} now belongs to another process (started {now.utc})"
        if self.start_ticks is None and self.start_time and now.utc and now.utc != self.start_time:
            return f"pid {self.pid} now belongs to another process (started {now.utc})"
        return None


# -- the lock -----------------------------------------------------------------------------------

def default_lock_path() -> Path:
    """$TRIAGE_LOCK_FILE if set, else /run/lock if writable, else $XDG_RUNTIME_DIR, else /tmp (per user).

    Every recovery on one host must agree on the path; set TRIAGE_LOCK_FILE the same way for all
    of them when containers do not share /run/lock."""
    override = os.environ.get("TRIAGE_LOCK_FILE")
    if override:
        return Path(override)
    for directory in ("/run/lock", os.environ.get("XDG_RUNTIME_DIR") or ""):
        if directory and os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK):
            path = Path(directory) / LOCK_NAME
            if not path.exists() or os.access(path, os.R_OK | os.W_OK):
                return path
    return Path(f"/tmp/triage-recover-{os.getuid()}.lock")


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
                raise
            return self
        raise TriageError(f"cannot take the recovery lock {self.path}: the file keeps changing")

    def release(self) -> None:
        """Drop the lock; unlink the file only while it is still ours."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._same_file(fd):
                os.unlink(self.path)        # unlink before close: no one can flock a ghost
        except OSError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> HostLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # helpers
    def _open(self) -> int:
        try:
            # O_NOFOLLOW: a symlink planted at the lock path (in /tmp) must not make root truncate its target
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file")
            return fd
        except OSError as exc:
            holder = ""
            try:
                found = Holder.parse(self.path.read_bytes())
                holder = f" (held by {found.describe()})" if found else ""
            except OSError:
                pass
            raise TriageError(f"cannot open the recovery lock {self.path}: "
                              f"{exc.strerror or exc}{holder}") from None

    def _same_file(self, fd: int) -> bool:
        try:
            a, b = os.fstat(fd), os.stat(self.path)
        except OSError:
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
    """Who the lock file names (for `status`-style output); None when absent or unreadable."""
    try:
        return Holder.parse(Path(path or default_lock_path()).read_bytes())
    except OSError:
        return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, 65536, 0)
    except OSError:
        return b""


__all__ = ["Holder", "HostLock", "LockBusy", "ProcStart", "default_lock_path", "proc_start",
           "read_holder"]
