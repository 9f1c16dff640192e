"""Signals that cannot hit a reused PID.

Every signal goes through a pidfd opened *before* the process's identity (pid, start time,
command line: `triage/live/procs.py`) is re-checked: the pidfd pins the process, so if the check
passes the signal reaches that very process, and if the PID was reused in between the check
fails and nothing is sent.
"""
from __future__ import annotations

import os
import signal
import time

from ..live.procs import ProcInfo, read_proc
from . import interrupts


class Drifted(Exception):
    """The PID no longer names the process that was identified (it exited and the number was reused)."""


def send(expected: ProcInfo, signum: int) -> bool:
    """Signal exactly the identified process. False when it is gone; Drifted when its PID was reused."""
    pidfd = _pidfd_open(expected.pid)
    try:
        now = read_proc(expected.pid)
        if now is None:
            return False
        # On its way out, the process reads with an empty command line: still the one identified
        # (same PID and start time, and the pidfd holds it), so it is signalled all the same.
        if not (expected.same_process(now) or expected.exiting(now)):
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
