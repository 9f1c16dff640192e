"""`stop_server`: SIGTERM the identified process tree, wait, SIGKILL what is left, check the GPU.

Only processes confirmed by `identify.py` are signalled, each through `procs.send`, which
re-checks the PID's start time and command line through a pidfd first. If any PID drifted
(exited and was reused) the step aborts before the first signal: a partly stopped server is
easier to reason about than a signal sent to a stranger.
"""
from __future__ import annotations

import signal
import time

from ...live.nvml import NoNvml, read_gpus
from ..context import Deadline, Outcome, RunContext, aborted, failed, ok
from ..identify import still_same
from ..procs import Drifted, send, wait_gone
from ..runbooks import RunbookStep

KILL_WAIT_S = 5.0


def run(step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
    ident = ctx.identification
    lines = [f"refused {r.pid} ({r.role}, {r.source}): {r.reason}" for r in ident.refused]
    if ident.gone:
        lines.append("already exited: " + ", ".join(f"{c.pid} ({c.role})" for c in ident.gone))
    procs = [p for p in ident.processes]
    if not procs:
        return ok(*lines, "no process of this server is running: nothing to stop", signalled=[])
    drift = [d for d in (still_same(p) for p in procs) if d]
    if drift:
        return aborted("re-run `triage recover` to identify the server again", *lines, *drift)
    infos = [p.info for p in procs]
    signalled: list[int] = []
    try:
        for p in procs:                       # the API server first: it stops its engine and workers
            if send(p.info, signal.SIGTERM):
                signalled.append(p.info.pid)
                lines.append(f"SIGTERM {p.info.pid} ({p.role})")
        grace = min(float(step.params.get("grace_s", 30)), max(0.0, deadline.left() - KILL_WAIT_S))
        left = wait_gone(infos, time.monotonic() + grace)
        killed: list[int] = []
        for info in left:
            if send(info, signal.SIGKILL):
                killed.append(info.pid)
                lines.append(f"SIGKILL {info.pid}: still alive after {grace:.0f} s")
        left = wait_gone(left, time.monotonic() + min(KILL_WAIT_S, deadline.left()))
    except Drifted as exc:
        return aborted("check the processes by hand (ps -o pid,lstart,args -p PID)", *lines, str(exc),
                       signalled=signalled)
    except PermissionError as exc:
        return failed("run triage as the server's user (or root) to stop it", *lines,
                      f"not permitted to signal: {exc.strerror or exc}", signalled=signalled)
    if left:
        return failed("a process survived SIGKILL (stuck in the driver, state D?): check `ps -o pid,stat,args -p "
                      + ",".join(str(i.pid) for i in left) + "` and the kernel log",
                      *lines, f"still alive: {[i.pid for i in left]}", signalled=signalled)
    lines.append(f"stopped {len(infos)} process(es): {[i.pid for i in infos]}"
                 + (f" ({len(killed)} needed SIGKILL)" if killed else ""))
    gpu = _gpu_released([i.pid for i in infos], deadline)
    lines.append(gpu[1])
    if not gpu[0]:
        return failed("the GPU memory did not come back: look for leftover processes with nvidia-smi; "
                      "a reset may be needed (gpu_fault runbook)", *lines, signalled=signalled, killed=killed)
    return ok(*lines, signalled=signalled, killed=killed)


def _gpu_released(pids: list[int], deadline: Deadline) -> tuple[bool, str]:
    while True:
        gpus = read_gpus()
        if isinstance(gpus, NoNvml):
            return True, f"GPU: {gpus}"
        holding = sorted({pid for g in gpus for pid in g.pids if pid in pids})
        if not holding:
            return True, "GPU: NVML lists none of the stopped PIDs"
        if deadline.left() < 1:
            return False, f"GPU: NVML still lists {holding} on the GPU"
        deadline.sleep(1)
