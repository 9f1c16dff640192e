"""The host-local key that authenticates the recovery audit log (`actions.jsonl`).

A hash chain alone proves nothing about who wrote it: anyone who can write the bundle can
append records and recompute the chain. Each record therefore also carries an HMAC-SHA256
made with a key only the user who runs recovery can read, and recovery trusts a record only
when that MAC verifies with *this* host's key.

Where the key lives (the first that applies):
  $TRIAGE_KEY_FILE
  /var/lib/oom-triage/audit.key                       when running as root
  $XDG_STATE_HOME/oom-triage/audit.key                else
  ~/.local/state/oom-triage/audit.key                 without XDG_STATE_HOME

It is created on first write (32 random bytes, hex), with O_CREAT|O_EXCL|O_NOFOLLOW and mode
0600, in a directory created 0700. A key file is refused when it is not a regular file, is a
symlink, is not owned by the running user, is readable or writable by group or others, or has
more than one link; its directory is refused when it is a symlink, is owned by neither the
running user nor root, or is writable by group or others.
Reading never creates a key: a host without one authenticates nothing.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import TriageError

KEY_FILE_ENV = "TRIAGE_KEY_FILE"
KEY_BYTES = 32
KEY_ID_CHARS = 16
_ID_LABEL = b"oom-triage audit key id\0"
_READ_RETRY_S = 1.0            # a key another process is writing right now: wait this long for it


class AuditKeyError(TriageError):
    """The audit key cannot be created or is not safe to use."""


@dataclass(frozen=True)
class HostKey:
    secret: bytes
    path: Path

    @property
    def key_id(self) -> str:
        """A short name for the key: records made with another host's key are recognisable as such."""
        return hashlib.sha256(_ID_LABEL + self.secret).hexdigest()[:KEY_ID_CHARS]

    def mac(self, data: bytes) -> str:
        return hmac.new(self.secret, data, hashlib.sha256).hexdigest()

    def verifies(self, data: bytes, mac: object) -> bool:
        return isinstance(mac, str) and hmac.compare_digest(self.mac(data), mac)


def default_key_path() -> Path:
    configured = os.environ.get(KEY_FILE_ENV)
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/var/lib/oom-triage/audit.key")
    state = os.environ.get("XDG_STATE_HOME")
    if state and os.path.isabs(state):
        return Path(state) / "oom-triage" / "audit.key"
    try:
        home = Path.home()
    except (KeyError, RuntimeError):
        raise AuditKeyError(f"no home directory to keep the audit key in: set {KEY_FILE_ENV}") from None
    return home / ".local" / "state" / "oom-triage" / "audit.key"


def load_key(path: Path | None = None, *, create: bool = False) -> HostKey | None:
    """This host's key; None when there is none yet and `create` is False."""
    path = path or default_key_path()
    if create:
        _make_dir(path.parent)
    dir_fd = _open_dir(path.parent, must_exist=create)
    if dir_fd is None:
        return None
    try:
        secret = _read(path, dir_fd)
        if secret is None and create:
            _create(path, dir_fd)
            secret = _read(path, dir_fd)
    finally:
        os.close(dir_fd)
    return HostKey(secret, path) if secret is not None else None


# -- the directory ----------------------------------------------------------------------------

def _make_dir(directory: Path) -> None:
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise AuditKeyError(f"{directory}: cannot create the audit key directory: {exc.strerror or exc} "
                        f"(set {KEY_FILE_ENV} to a path of your own)") from None


def _open_dir(directory: Path, must_exist: bool) -> int | None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if must_exist:
            raise AuditKeyError(f"{directory}: the audit key directory vanished") from None
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise AuditKeyError(f"{directory}: the audit key directory is a symlink or not a directory: "
                            "refusing to use it") from None
        raise AuditKeyError(f"{directory}: cannot open the audit key directory: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    problem = None
    if st.st_uid not in (os.geteuid(), 0):
        problem = f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        problem = f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        os.close(fd)
        raise AuditKeyError(f"{directory}: audit key directory {problem}: refusing to use it")
    return fd


# -- the file ---------------------------------------------------------------------------------

def _read(path: Path, dir_fd: int) -> bytes | None:
    deadline = time.monotonic() + _READ_RETRY_S
    while True:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise AuditKeyError(f"{path}: the audit key is a symlink: refusing to use it") from None
            raise AuditKeyError(f"{path}: cannot read the audit key: {exc.strerror or exc}") from None
        try:
            _check_file(path, os.fstat(fd))
            raw = os.read(fd, 4 * KEY_BYTES)
        finally:
            os.close(fd)
        if raw.strip() or time.monotonic() >= deadline:
            return _decode(path, raw)
        time.sleep(0.05)         # created a moment ago by another process, not yet written


def _check_file(path: Path, st: os.stat_result) -> None:
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    elif st.st_mode & 0o077:
        problem = f"is readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}; chmod 600)"
    elif st.st_nlink != 1:
        problem = f"has {st.st_nlink} links (a hard link elsewhere could be read or replaced)"
    if problem:
        raise AuditKeyError(f"{path}: the audit key {problem}: refusing to use it")


def _decode(path: Path, raw: bytes) -> bytes:
    try:
        secret = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != KEY_BYTES:
        raise AuditKeyError(f"{path}: not an audit key ({2 * KEY_BYTES} hex digits expected): move it aside "
                        "and a new key is made (records made with the old one are then no longer trusted)")
    return secret


def _create(path: Path, dir_fd: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path.name, flags, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        return                   # another process made it first: read theirs
    except OSError as exc:
        raise AuditKeyError(f"{path}: cannot create the audit key: {exc.strerror or exc} "
                        f"(set {KEY_FILE_ENV} to a path of your own)") from None
    try:
        os.fchmod(fd, 0o600)     # whatever the umask
        data = (secrets.token_bytes(KEY_BYTES).hex() + "\n").encode("ascii")
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["HostKey", "KEY_FILE_ENV", "AuditKeyError", "default_key_path", "load_key"]
