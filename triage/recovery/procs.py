"""Processes as /proc shows them, and signals that cannot hit a reused PID.

A PID alone names nothing stable: once a process exits its number is free for the next program.
So a process is identified by (pid, start time in clock ticks since boot, command line), read
from /proc, and every signal goes through a pidfd opened *before* that identity is re-checked:
the pidfd pins the process, so if the check passes the signal reaches that very process, and if
the PID was reused in between the check fails and nothing is sent.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str                  # R, S, D, Z, ...
    start_ticks: int            # clock ticks after boot: with the pid, unique until reboot
    uid: int
    comm: str                   # the kernel's 15-character name (prctl / setproctitle)
    cmdline: tuple[str, ...]
    pgid: int = 0               # process group and session: an orphan keeps its server's
    sid: int = 0

    @property
    def start_utc(self) -> datetime | None:
        boot = boot_time()
        if boot is None:
            return None
        return datetime.fromtimestamp(boot + self.start_ticks / os.sysconf("SC_CLK_TCK"), timezone.utc)

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")

    def command(self, limit: int = 160) -> str:
        text = " ".join(self.cmdline) or f"[{self.comm}]"
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def same_process(self, other: "ProcInfo | None") -> bool:
        return other is not None and (other.pid, other.start_ticks, other.cmdline) == \
            (self.pid, self.start_ticks, self.cmdline)


def read_proc(pid: int) -> ProcInfo | None:
    """The process `pid` as /proc shows it now, or None when there is none (or only a zombie)."""
    base = PROC / str(pid)
    try:
        stat = (base / "stat").read_text()
        raw_cmd = (base / "cmdline").read_bytes()
        uid = (base).stat().st_uid
    except (OSError, ValueError):
        return None
    open_paren, close_paren = stat.find("("), stat.rfind(")")
    fields = stat[close_paren + 2:].split()     # comm may hold spaces and parentheses
    if open_paren < 0 or len(fields) < 20:
        return None
    try:
        info = ProcInfo(pid=pid, ppid=int(fields[1]), state=fields[0], start_ticks=int(fields[19]), uid=uid,
                        comm=stat[open_paren + 1:close_paren],
                        cmdline=tuple(a.decode("utf-8", "replace") for a in raw_cmd.split(b"\0") if a),
                        pgid=int(fields[2]), sid=int(fields[3]))
    except ValueError:
        return None
    return info if info.alive else None


def all_procs() -> dict[int, ProcInfo]:
    out: dict[int, ProcInfo] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            info = read_proc(int(name))
            if info is not None:
                out[info.pid] = info
    return out


def descendants(root: ProcInfo, procs: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
    """Children, grandchildren... of `root`, parents before children.

    A child must have started no earlier than its parent: a PID whose number was reused cannot
    sneak into the tree through a stale parent link."""
    procs = all_procs() if procs is None else procs
    by_parent: dict[int, list[ProcInfo]] = {}
    for p in procs.values():
        by_parent.setdefault(p.ppid, []).append(p)
    out: list[ProcInfo] = []
    queue = [root]
    while queue:
        parent = queue.pop(0)
        for child in sorted(by_parent.get(parent.pid, []), key=lambda p: p.pid):
            if child.start_ticks >= parent.start_ticks and child.pid != root.pid and child not in out:
                out.append(child)
                queue.append(child)
    return out


def protected_pids() -> set[int]:
    """PIDs never to signal: init, this process and every ancestor of it (our shell, our tmux...)."""
    pids = {0, 1, os.getpid()}
    pid = os.getppid()
    for _ in range(64):
        if pid <= 1 or pid in pids:
            break
        pids.add(pid)
        info = read_proc(pid)
        if info is None:
            break
        pid = info.ppid
    return pids


_BOOT: list[float | None] = []


def boot_time() -> float | None:
    if not _BOOT:
        value = None
        try:
            for line in (PROC / "stat").read_text().splitlines():
                if line.startswith("btime "):
                    value = float(line.split()[1])
        except OSError:
            pass
        _BOOT.append(value)
    return _BOOT[0]


def boot_id() -> str | None:
    """This boot's random id: start ticks only compare within one boot."""
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


# -- signals ------------------------------------------------------------------------------------

class Drifted(Exception):
    """The PID no longer names the process that was identified (it exited and the number was reused)."""


def send(expected: ProcInfo, signum: int) -> bool:
    """Signal exactly the identified process. False when it is gone; Drifted when its PID was reused."""
    pidfd = _pidfd_open(expected.pid)
    try:
        now = read_proc(expected.pid)
        if now is None:
            return False
        if not expected.same_process(now):
            raise Drifted(f"pid {expected.pid} is now {now.command(80)!r} (started {_utc(now)}), not the "
                          f"identified {expected.command(80)!r} (started {_utc(expected)})")
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(expected.pid, signum)   # no pidfd (old kernel): the check above narrows the race
        except ProcessLookupError:
            return False
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def gone(expected: ProcInfo) -> bool:
    """True when the identified process has exited (a reused PID counts as gone)."""
    _reap(expected.pid)
    return not expected.same_process(read_proc(expected.pid))


def wait_gone(procs: list[ProcInfo], until: float, poll_s: float = 0.1) -> list[ProcInfo]:
    """Wait (until the monotonic time `until`) for every process to exit; those still alive."""
    from . import interrupts

    while True:
        left = [p for p in procs if not gone(p)]
        if not left or time.monotonic() >= until:
            return left
        interrupts.check()
        time.sleep(min(poll_s, max(0.0, until - time.monotonic())))


def _pidfd_open(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None or not hasattr(signal, "pidfd_send_signal"):
        return None
    try:
        return opener(pid)
    except ProcessLookupError:
        return None
    except OSError:
        return None                 # ENOSYS on old kernels, EPERM in some sandboxes


def _reap(pid: int) -> None:
    """Collect our own exited children (a server this run relaunched) so they do not linger as zombies."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def _utc(info: ProcInfo) -> str:
    moment = info.start_utc
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else "at an unknown time"
