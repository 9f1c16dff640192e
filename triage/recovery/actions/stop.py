"""`stop_server`: SIGTERM the identified process tree, wait, SIGKILL what is left, check the GPU.

Only processes confirmed by `identify.py` are signalled, each through `signals.send`, which
re-checks the PID's start time and command line through a pidfd first. If any PID drifted
(exited and was reused) the step aborts before the first signal: a partly stopped server is
easier to reason about than a signal sent to a stranger.
"""
from __future__ import annotations

import signal
import time
from typing import Any

from ...live.nvml import NoNvml, read_gpus
from ...live.procs import all_procs, descendants, protected_pids
from ...live.server import health
from ..context import Deadline, Outcome, RunbookStep, RunContext, aborted, failed, ok
from ..identify import ServerProcess, still_same
from ..plan import Plan
from ..signals import Drifted, send, wait_gone
from .base import NUMBER, Action, Param

KILL_WAIT_S = 5.0


class StopServer(Action):
    name = "stop_server"
    params = (Param("grace_s", NUMBER, 30, low=0),)
    destructive = True

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        confirmed = [c for c in plan.pids if c.status == "confirmed"]
        others = [c for c in plan.pids if c.status != "confirmed"]
        lines = [f"signal: {c.pid} {c.role} ({c.source})" for c in confirmed]
        lines += [f"leave:  {c.pid} {c.role} ({c.source}): {c.status}" for c in others]
        if not plan.pids:
            lines = ["PIDs: none named in the evidence (give --pid; only confirmed PIDs are ever signalled)"]
        return [*lines,
                "before any signal: re-read each PID's command line and start time; a mismatch aborts (PID reuse)",
                "SIGTERM the whole process tree (API server, engine core, workers), "
                f"wait {self.value(step, 'grace_s')} s, then SIGKILL what is left",
                "then check with NVML that the memory came back"]

    def audit_args(self, step: RunbookStep, ctx: RunContext) -> dict[str, Any]:
        return {"pids": [{"pid": p.info.pid, "role": p.role, "start_ticks": p.info.start_ticks,
                          "cmdline": list(p.info.cmdline), "why": p.why} for p in ctx.identification.processes]}

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        ident = ctx.identification
        lines = [f"refused {r.pid} ({r.role}, {r.source}): {r.reason}" for r in ident.refused]
        if ident.gone:
            lines.append("already exited: " + ", ".join(f"{c.pid} ({c.role})" for c in ident.gone))
        procs = [p for p in ident.processes]
        if not procs:
            return _nothing_identified(ctx, lines)
        drift = [d for d in (still_same(p) for p in procs) if d]
        if drift:
            return aborted("re-run `triage recover` to identify the server again", *lines, *drift)
        procs += _new_children(procs)
        for p in procs[len(ident.processes):]:
            lines.append(f"also {p.info.pid} ({p.role}): {p.why}")
        infos = [p.info for p in procs]
        signalled: list[int] = []
        try:
            for p in procs:                       # the API server first: it stops its engine and workers
                if send(p.info, signal.SIGTERM):
                    signalled.append(p.info.pid)
                    lines.append(f"SIGTERM {p.info.pid} ({p.role})")
            grace = min(float(self.value(step, "grace_s")), max(0.0, deadline.left() - KILL_WAIT_S))
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


stop_server = StopServer()


def _nothing_identified(ctx: RunContext, lines: list[str]) -> Outcome:
    """No process to stop: fine when the server is down, not when it still answers and the relaunch
    would start a second copy beside it."""
    if ctx.url:
        probe = health(ctx.url, 3.0)
        if probe.status is not None:
            line = (f"{ctx.url} still answers ({probe.detail}), but none of its processes was identified "
                    "(refused or not named)")
            if ctx.relaunch_driver in (None, "process"):
                return failed("find the server's PID (ss -ltnp, ps -eo pid,lstart,args) and give it with --pid; "
                              "nothing was signalled", *lines, line, signalled=[])
            return ok(*lines, line, f"the {ctx.relaunch_driver} driver replaces it", signalled=[])
    return ok(*lines, "no process of this server is running: nothing to stop", signalled=[])


def _new_children(procs: list[ServerProcess]) -> list[ServerProcess]:
    """Children the server started since it was identified (a worker respawned, an engine core
    restarted): snapshot the tree again before the first signal, while every parent link is still
    there — once the parent dies its children are re-parented and no longer findable as its own."""
    now = all_procs()
    known = {p.info.pid for p in procs}
    protected = protected_pids()
    extra: list[ServerProcess] = []
    for p in procs:
        if not p.info.same_process(now.get(p.info.pid)):
            continue                  # gone (a reused PID aborted above): its old children are not followed
        for child in descendants(p.info, now):
            if child.pid not in known and child.pid not in protected:
                known.add(child.pid)
                extra.append(ServerProcess(child, child.comm or "child",
                                           f"child of {p.role} {p.info.pid}, started since the server was identified"))
    return extra


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
