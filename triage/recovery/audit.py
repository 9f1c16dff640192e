"""The recovery audit log: `INCIDENT/actions.jsonl`, append-only and hash-chained.

Each line is one JSON record (canonical: sorted keys, compact, ASCII). Two fields chain it:
  prev  sha256 hex of the previous line's exact bytes (without its newline); 64 zeros first
  hash  sha256 hex of the canonical JSON of the record without `hash`
so an edited, deleted, reordered or truncated line is detectable (`verify`). Lines are written
with one os.write on an O_APPEND descriptor, then fsync'd; the file is never rewritten.
Arguments and output are redacted (`triage/redact.py`) before they reach the disk.

The chain alone has no key: whoever can write the file can append records and recompute it.
So each record also carries
  key_id  a short name of the host key that signed it (`hostkey.py`)
  mac     HMAC-SHA256, with that key, of the incident directory's real path and the canonical
          JSON of the record without `hash` and `mac`
and recovery trusts a record (to find the servers it relaunched, a launch that served, where to
resume) only when its MAC verifies with this host's key. Binding the MAC to the directory keeps
a record copied from another incident's log from being trusted here.
"""
from __future__ import annotations

import errno
import fcntl
import getpass
import hashlib
import json
import math
import os
import signal
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..errors import BadInput, TriageError
from ..redact import redact
from ..safedir import HeldDir
from ..timestamps import rfc3339
from .hostkey import HostKey, load_key

FILENAME = "actions.jsonl"
GENESIS = "0" * 64
TAIL_CHARS = 2000
PHASES = ("start", "end")
RESULTS = ("ok", "failed", "timeout", "skipped", "interrupted", "aborted", "handed")
RESERVED = ("seq", "time", "user", "host", "prev", "hash", "key_id", "mac")   # filled in by append()
MAC_LABEL = b"oom-triage audit v1\0"
REQUIRED = ("seq", "time", "run_id", "action", "phase", "prev", "hash")

Clock = Callable[[], datetime]


class AuditError(TriageError):
    """The audit log cannot be appended to (broken chain, unwritable file)."""


# -- encoding ---------------------------------------------------------------------------------

def canonical(obj: Mapping[str, Any]) -> bytes:
    """The exact bytes hashed and written: sorted keys, compact separators, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_hash(record: Mapping[str, Any]) -> str:
    return sha256(canonical({k: v for k, v in record.items() if k != "hash"}))


def mac_input(directory: str | os.PathLike[str] | HeldDir, record: Mapping[str, Any]) -> bytes:
    """What a record's MAC covers: the incident directory it belongs to and every field but hash and mac.
    A held directory's real path was read when it was opened: it is not resolved again."""
    real = directory.real if isinstance(directory, HeldDir) else os.path.realpath(directory)
    where = real.encode("utf-8", "surrogateescape")
    return MAC_LABEL + where + b"\0" + canonical({k: v for k, v in record.items() if k not in ("hash", "mac")})


# How a record stands against this host's key.
AUTHENTICATED = "authenticated"
OTHER_KEY = "another key"
NO_MAC = "no MAC"
BAD_MAC = "MAC does not verify"


def authenticity(record: Mapping[str, Any], key: HostKey | None, directory: str | os.PathLike[str] | HeldDir) -> str:
    key_id, mac = record.get("key_id"), record.get("mac")
    if not isinstance(key_id, str) or not isinstance(mac, str):
        return NO_MAC
    if key is None or key_id != key.key_id:
        return OTHER_KEY
    try:
        data = mac_input(directory, record)
    except ValueError:                    # not canonical JSON (a NaN): nothing this tool wrote
        return BAD_MAC
    return AUTHENTICATED if key.verifies(data, mac) else BAD_MAC


def current_user() -> str:
    """The human behind the run: $SUDO_USER under sudo, else the login name (or the uid)."""
    sudo = os.environ.get("SUDO_USER")
    if sudo:
        return sudo
    try:
        return getpass.getuser()
    except (KeyError, OSError):           # no passwd entry (containers)
        return str(os.getuid())


def tail(text: str | bytes | None, limit: int = TAIL_CHARS) -> str | None:
    """The redacted last `limit` characters of an output (redacted before cutting)."""
    if text is None:
        return None
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    window = redact(text[-4 * limit:])     # redact a wider window so no secret is cut in half
    return window if len(window) <= limit else "..." + window[-limit:]


def _plain(value: Any) -> Any:
    """A JSON-safe copy: str keys, lists for tuples/sets, str() for anything exotic."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return str(value)


# -- verification -----------------------------------------------------------------------------

@dataclass
class VerifyReport:
    ok: bool                              # the hash chain is intact (says nothing about who wrote it)
    records: int
    problems: list[str] = field(default_factory=list)
    last_hash: str | None = None          # `hash` of the last valid record
    note: str = ""                        # e.g. "no audit log yet (0 records)"
    key_id: str | None = None             # this host's key, None when it has none yet
    authenticated: int = 0                # records whose MAC verifies with this host's key
    other_key: int = 0                    # records signed with a key this host does not hold
    unauthenticated: int = 0              # no MAC, or a MAC that does not verify with this host's key
    untrusted: list[str] = field(default_factory=list)   # `line N: why`, one per record not authenticated

    @property
    def trusted(self) -> bool:
        """Chain intact and every record authenticated by this host's key."""
        return self.ok and not self.untrusted

    def summary(self) -> str:
        if self.ok:
            return self.note or f"ok: {self.records} records, chain intact; {self.auth_summary()}"
        return f"BROKEN: {len(self.problems)} problem(s); first: {self.problems[0]}"

    def auth_summary(self) -> str:
        key = f"key {self.key_id}" if self.key_id else "no key yet"
        return (f"authenticated by this host ({key}): {self.authenticated}, another host's key: "
                f"{self.other_key}, not authenticated: {self.unauthenticated}")


@dataclass
class _Scan:
    """What a pass over the file found; the tail state is what the next append chains to."""
    report: VerifyReport
    last_record: dict[str, Any] | None = None
    last_valid: dict[str, Any] | None = None
    next_prev: str = GENESIS
    next_seq: int = 1


def log_path(path: str | os.PathLike[str]) -> Path:
    """An incident directory means its actions.jsonl; anything else is the file itself."""
    p = Path(path)
    return p / FILENAME if p.is_dir() else p


def verify(path: str | os.PathLike[str], key: HostKey | None | bool = False) -> VerifyReport:
    """Re-compute every hash and prev link (problems read `line N: ...`); with `key`, also check
    every record's MAC against it (`key=True`: this host's key, read but never created)."""
    target = log_path(path)
    host_key = load_key() if key is True else (key or None)
    if not os.path.isdir(target.parent):
        return VerifyReport(True, 0, note=f"{target}: no audit log yet (0 records)")
    with HeldDir.open(target.parent, follow=True) as held:
        return _scan(held, target, host_key).report


def _scan(held: HeldDir, path: Path, key: HostKey | None = None) -> _Scan:
    """One pass over `path`'s file in the held directory (`path` names it in messages)."""
    # Never through a link, non-blocking and checked before a byte is read: a FIFO planted as
    # actions.jsonl must not hang the run, nor a symlink make it read another file.
    fd = held.read_fd(path.name)
    if fd is None:
        return _Scan(VerifyReport(True, 0, note=f"{path}: no audit log yet (0 records)"))
    fh = os.fdopen(fd, "rb")
    scan = _Scan(VerifyReport(True, 0))
    problems = scan.report.problems
    prev_line: bytes | None = None
    last_seq = 0
    with fh:
        for n, raw in enumerate(fh, start=1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            record = _parse(line)
            if record is None or not raw.endswith(b"\n"):
                why = "" if raw.endswith(b"\n") else " (no trailing newline)"
                problems.append(f"line {n}: truncated or corrupt JSON{why}")
                prev_line = line
                scan.last_record = None
                continue
            expected_prev = GENESIS if prev_line is None else sha256(prev_line)
            line_problems = _check(n, record, expected_prev, last_seq)
            problems.extend(line_problems)
            if not line_problems:
                scan.last_valid = record
            if isinstance(record.get("seq"), int):
                last_seq = record["seq"]
            _count(scan.report, n, authenticity(record, key, held))
            scan.report.records += 1
            scan.last_record = record
            prev_line = line
    scan.report.ok = not problems
    scan.report.key_id = key.key_id if key else None
    if scan.report.ok:
        scan.next_prev = GENESIS if prev_line is None else sha256(prev_line)
        scan.next_seq = last_seq + 1
        scan.report.last_hash = scan.last_valid["hash"] if scan.last_valid else None
        if scan.report.records == 0:
            scan.report.note = f"{path}: empty audit log (0 records)"
    elif scan.last_valid:
        scan.report.last_hash = scan.last_valid["hash"]
    return scan


def _count(report: VerifyReport, n: int, status: str) -> None:
    if status == AUTHENTICATED:
        report.authenticated += 1
        return
    if status == OTHER_KEY:
        report.other_key += 1
    else:
        report.unauthenticated += 1
    why = {OTHER_KEY: "signed with a key this host does not hold (another host's, or a key replaced since)",
           NO_MAC: "carries no MAC (written by hand, by an older version, or forged)",
           BAD_MAC: "its MAC does not verify with this host's key (edited or forged)"}[status]
    report.untrusted.append(f"line {n}: {why}")


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _check(n: int, record: dict[str, Any], expected_prev: str, last_seq: int) -> list[str]:
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        return [f"line {n}: missing field(s) {', '.join(missing)}"]
    out = []
    try:
        if record["hash"] != record_hash(record):
            out.append(f"line {n}: hash mismatch (record edited)")
    except ValueError:
        out.append(f"line {n}: hash mismatch (record is not canonical JSON)")
    if record["prev"] != expected_prev:
        where = "the genesis value" if n == 1 else f"line {n - 1}"
        out.append(f"line {n}: prev does not match {where} (a line was edited, deleted, "
                   "inserted or reordered)")
    seq = record["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq != last_seq + 1:
        out.append(f"line {n}: seq {seq!r}, expected {last_seq + 1} (gap or reorder)")
    return out


# -- writing ----------------------------------------------------------------------------------

@dataclass
class StepHandle:
    """Given to the body of `AuditLog.step`: set `result` ("skipped", "failed"...) and `output`."""
    start: dict[str, Any]
    result: str | None = None             # None at the end means "ok"
    output: str = ""
    data: dict[str, Any] = field(default_factory=dict)   # facts for the end record (pid launched, url...)


# The shapes every reader of an authenticated record relies on (what append() writes).
_OBJECT_FIELDS = ("args", "data")
_TEXT_FIELDS = ("run_id", "step", "action", "phase", "result", "host", "user")


def well_formed(record: Mapping[str, Any]) -> bool:
    """True when each field a reader uses has the type this log writes: a record that verifies but
    has (say) a list for `args` was not written by this tool, and must not crash the run reading it."""
    return all(record.get(k) is None or isinstance(record.get(k), dict) for k in _OBJECT_FIELDS) and \
        all(record.get(k) is None or isinstance(record.get(k), str) for k in _TEXT_FIELDS) and \
        isinstance(record.get("seq"), int) and not isinstance(record.get("seq"), bool)


class AuditLog:
    """Append-only writer for one incident's actions.jsonl (see module doc)."""

    def __init__(self, path: str | os.PathLike[str] | HeldDir, *, run_id: str | None = None,
                 clock: Clock | None = None, monotonic: Callable[[], float] = time.monotonic):
        # A recovery hands in the incident directory it holds open: every read and append then goes
        # to that very directory, whatever its path names by now. Given a path, the directory is
        # opened on first use and held from then on.
        self._held: HeldDir | None = path if isinstance(path, HeldDir) else None
        self.path = Path(path.path) / FILENAME if isinstance(path, HeldDir) else log_path(path)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.clock: Clock = clock or (lambda: datetime.now(timezone.utc))
        self.monotonic = monotonic
        self._tail: tuple[int, int, int, str, int] | None = None   # ino, size, mtime, prev, seq
        self.last_written: dict[str, Any] | None = None             # the record most recently on disk
        self._key: HostKey | None = None

    def signing_key(self) -> HostKey:
        """This host's key, created on first use (see hostkey.py)."""
        if self._key is None:
            key = load_key(create=True)
            if key is None:                     # made and then gone: someone is moving it around
                raise AuditError("the audit key could not be created: nothing was written")
            self._key = key
        return self._key

    def directory(self) -> HeldDir | None:
        """The incident directory, held open from the first use on; None while it does not exist."""
        if self._held is None:
            if not os.path.isdir(self.path.parent):
                return None
            self._held = HeldDir.open(self.path.parent)
        return self._held

    # reading
    def records(self) -> list[dict[str, Any]]:
        """Every parseable record, in file order (use verify() to know whether to trust them)."""
        held = self.directory()
        fd = held.read_fd(self.path.name) if held is not None else None
        if fd is None:
            return []
        try:
            with os.fdopen(fd, "rb") as fh:
                return [r for r in (_parse(raw.rstrip(b"\n")) for raw in fh) if r is not None]
        except OSError as exc:
            raise BadInput(str(self.path), f"cannot read audit log: {exc.strerror or exc}") from None

    def verify(self, key: HostKey | None | bool = False) -> VerifyReport:
        """verify() over this log, read from the held directory."""
        held = self.directory()
        if held is None:
            return VerifyReport(True, 0, note=f"{self.path}: no audit log yet (0 records)")
        return _scan(held, self.path, load_key() if key is True else (key or None)).report

    def authenticated(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(the records whose MAC verifies with this host's key, the others), in file order.
        Only the first may decide anything: which PIDs are ours, what served, where to resume."""
        key = self._key or load_key()
        mine: list[dict[str, Any]] = []
        others: list[dict[str, Any]] = []
        held = self.directory()
        for rec in self.records():
            trusted = held is not None and well_formed(rec) and authenticity(rec, key, held) == AUTHENTICATED
            (mine if trusted else others).append(rec)
        return mine, others

    def last(self) -> dict[str, Any] | None:
        """The last record that verifies (hash, prev and seq), or None: where a resume starts."""
        held = self.directory()
        return _scan(held, self.path).last_valid if held is not None else None

    def completed_steps(self, run_id: str | None = None) -> list[str]:
        """Step ids whose latest `end` record says ok, skipped or handed (to a person: asking
        again on a resume would hand it twice), in the order they ended."""
        done: dict[str, str] = {}
        for rec in self.authenticated()[0]:
            if rec.get("phase") == "end" and (run_id is None or rec.get("run_id") == run_id):
                done.pop(str(rec.get("step")), None)
                if rec.get("result") in ("ok", "skipped", "handed"):
                    done[str(rec.get("step"))] = "done"
        return list(done)

    # writing
    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write one record (redacted, chained, fsync'd) and return it as written."""
        bad = [k for k in RESERVED if k in record]
        if bad:
            raise AuditError(f"audit record may not set {', '.join(bad)} (filled in by the log)")
        if record.get("phase") not in PHASES:
            raise AuditError(f"audit record phase must be start or end, not {record.get('phase')!r}")
        if not record.get("action"):
            raise AuditError("audit record needs an action")
        body: dict[str, Any] = {
            "run_id": self.run_id, "step": None, "args": {}, "result": None,
            "duration_s": None, "output_tail": None,
        }
        body.update(_plain(dict(record)))
        body["args"] = redact(body["args"])
        body["output_tail"] = tail(body["output_tail"])
        for key in set(body) - {"args", "output_tail", "run_id", "step", "action", "phase",
                                "result", "duration_s"}:
            body[key] = redact(body[key])    # extra fields are redacted too
        # Ctrl-C (or SIGTERM, SIGHUP) waits until the record is on disk — from the moment it is
        # built, so a second Ctrl-C while the interrupted run writes its closing records cannot
        # cut them off: a record is written whole or not at all.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            body.update(time=rfc3339(self.clock()), user=current_user(), host=socket.gethostname())
            return self._write_unmasked(body)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    @contextmanager
    def step(self, step: str, action: str, args: Any = None, **extra: Any) -> Iterator[StepHandle]:
        """Record `start`, run the body, record `end` (ok / failed / timeout / interrupted).

        Exceptions (KeyboardInterrupt included) are recorded, then re-raised. An interrupt that
        lands just after the start record was written (signals wait while a record is written,
        then fire) still gets its end record."""
        handle = StepHandle(start={})
        began = self.monotonic()

        def end(result: str, error: BaseException | None = None) -> None:
            output = handle.output
            if error is not None:
                output = f"{output}\n{type(error).__name__}: {error}".lstrip("\n")
            data = {"data": handle.data} if handle.data else {}
            self.append({"step": step, "action": action, "phase": "end", "result": result,
                         "args": handle.start.get("args", {}), "output_tail": output,
                         "duration_s": round(self.monotonic() - began, 3), **data, **extra})

        self.last_written = None
        try:
            handle.start = self.append({"step": step, "action": action, "phase": "start",
                                        "args": {} if args is None else args, **extra})
            yield handle
        except KeyboardInterrupt as exc:
            written = self.last_written or {}
            if handle.start or (written.get("step") == step and written.get("phase") == "start"):
                handle.start = handle.start or written
                end("interrupted", exc)
            raise
        except (TimeoutError, subprocess.TimeoutExpired) as exc:
            end("timeout", exc)
            raise
        except BaseException as exc:
            if handle.start:
                end("failed", exc)
            raise
        end(handle.result or "ok")

    def _write_unmasked(self, body: dict[str, Any]) -> dict[str, Any]:
        held = self.directory()
        if held is None:
            raise BadInput(str(self.path.parent), "incident directory does not exist")
        key = self.signing_key()                     # no key, no record: before the file is touched
        fd, created = self._open(held)
        size: int | None = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)          # one writer at a time, across processes
            prev, seq = self._chain_state(fd, held)
            body.update(seq=seq, prev=prev, key_id=key.key_id)
            body["mac"] = key.mac(mac_input(held, body))
            body["hash"] = record_hash(body)
            line = canonical(body)
            data = line + b"\n"
            size = os.fstat(fd).st_size
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write (disk full?)")
            os.fsync(fd)
            self.last_written = body                 # still inside the signal mask: see step()
            if created:
                held.fsync()
            st = os.fstat(fd)
            self._tail = (st.st_ino, st.st_size, st.st_mtime_ns, sha256(line), seq + 1)
        except OSError as exc:
            kept = ""
            if size is not None:                     # take a half-written record back: the chain stays valid
                try:
                    os.ftruncate(fd, size)
                    kept = " (the record was taken back; the log still verifies)"
                except OSError:
                    kept = " (the last line may be incomplete)"
            raise AuditError(f"{self.path}: cannot write audit log: {exc.strerror or exc}{kept}") from None
        finally:
            os.close(fd)                             # releases the flock
        return body

    def _open(self, held: HeldDir) -> tuple[int, bool]:
        """Append to actions.jsonl beneath the held directory: never through a link (a planted
        `actions.jsonl -> /root/file` is refused), a regular file with one link."""
        try:
            return held.open_append(FILENAME, 0o644)
        except BadInput as exc:
            raise AuditError(f"{self.path}: cannot open audit log: {exc.problem}") from None

    def _chain_state(self, fd: int, held: HeldDir) -> tuple[str, int]:
        """(prev, seq) for the next record; refuses to extend a broken chain."""
        st = os.fstat(fd)
        if self._tail and self._tail[:3] == (st.st_ino, st.st_size, st.st_mtime_ns):
            return self._tail[3], self._tail[4]      # unchanged since our own last write
        scan = _scan(held, self.path)
        if not scan.report.ok:
            raise AuditError(f"{self.path}: audit log is broken, refusing to append: "
                             f"{scan.report.problems[0]} (run `triage audit verify`; move the "
                             "file aside to start a new log)")
        return scan.next_prev, scan.next_seq


__all__ = ["AUTHENTICATED", "AuditError", "AuditLog", "GENESIS", "StepHandle", "VerifyReport", "authenticity",
           "canonical", "log_path", "mac_input", "record_hash", "verify"]
