"""`check_gpu_free` and `gpu_reset`, through NVML.

A reset is the last resort: it needs --allow-gpu-reset, NVML must be readable, and NVML must
list no process on that GPU — a reset under a live process takes down whatever it was running.
"""
from __future__ import annotations

import os
import subprocess

from ...live.nvml import GpuReading, NoNvml, describe, read_gpus
from ..context import Deadline, Outcome, RunbookStep, RunContext, failed, ok, skipped
from ..fill import DEFAULT_FREE_SHARE, min_free_share
from ..plan import Plan
from .base import NUMBER, Action, Param


class CheckGpuFree(Action):
    """The share the relaunch needs must be free. `min_free_share: target` is the relaunch's own
    gpu_memory_utilization (what vLLM itself will insist is free), so processes a lowered target
    was sized around may stay; a fixed share also requires that no compute process is left."""

    name = "check_gpu_free"
    # A share of the card, or `target` (see recovery.fill): the default lives beside that rule.
    params = (Param("min_free_share", (*NUMBER, str), DEFAULT_FREE_SHARE, low=0, high=1, words=("target",)),)

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        """The free share the check requires, where it comes from, and what the verdict says must go."""
        share, why, strict = min_free_share(step.params, plan.verdict)
        out = [f"NVML: at least {share:.0%} of the GPU free ({why})"
               + (", and no compute process on it" if strict else "; other processes may stay if that much is free")]
        blocking = next((r for r in plan.verdict.recommendations if r.manual and r.setting == "other_gpu_processes"),
                        None)
        if blocking is not None:
            out.append(f"first, by hand: stop {blocking.from_value} (not this server's, so recovery will not); "
                       "until then this check fails")
        return out

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        need, why, strict = min_free_share(step.params, ctx.verdict)
        while True:
            gpus = read_gpus()
            if isinstance(gpus, NoNvml):
                return skipped(f"{gpus}; check `nvidia-smi` by hand before the relaunch "
                               f"(need {need:.0%} of the GPU free: {why})")
            gpus = _server_gpus(gpus, ctx)
            busy = [g for g in gpus if (strict and g.pids) or g.free_share < need]
            if not busy:
                return ok(*(describe(g) for g in gpus), f"needed {need:.0%} free ({why})",
                          gpus=[g.index for g in gpus])
            if deadline.left() < 2:
                return failed("find the processes with `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                              "--format=csv` and stop them (they are not this server's, so triage will not)",
                              *(describe(g) for g in busy),
                              f"need {need:.0%} free ({why})" + (" and no process" if strict else ""))
            deadline.sleep(2)


class GpuReset(Action):
    name = "gpu_reset"
    # Documents in the runbook that the step needs --allow-gpu-reset; the step never runs without it.
    params = (Param("require_flag", bool, True),)
    destructive = True

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        return ["nvidia-smi --gpu-reset -i <GPU> — only with --allow-gpu-reset, as root, and only when NVML "
                "lists no process on that GPU; refused otherwise"]

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        if not ctx.options.allow_gpu_reset:
            return skipped("not asked for: a GPU reset runs only with --allow-gpu-reset")
        gpus = read_gpus()
        if isinstance(gpus, NoNvml):
            return failed("reset by hand once you have checked no process uses the GPU",
                          f"{gpus}: cannot prove that no process uses the GPU, so no reset")
        targets, known = _server_gpus(gpus, ctx, exact=True)
        if not known and len(gpus) > 1:
            return failed("reset the server's GPU by hand (nvidia-smi --gpu-reset -i N), or record "
                          "CUDA_VISIBLE_DEVICES in the launch environment", f"which of the {len(gpus)} GPUs the "
                          "server used is not known (no CUDA_VISIBLE_DEVICES): no reset")
        busy = [g for g in targets if g.pids]
        if busy:                         # every GPU is checked before any is reset
            return failed("stop those processes first",
                          *(f"GPU {g.index} is in use by {list(g.pids)}: no reset" for g in busy))
        lines = []
        for gpu in targets:
            argv = ["nvidia-smi", "--gpu-reset", "-i", str(gpu.index)]
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=max(1.0, deadline.left()))
            except FileNotFoundError:
                return failed("install nvidia-smi or reset from the host", *lines, "nvidia-smi not found")
            lines.append(f"{' '.join(argv)} -> exit {done.returncode}: {(done.stdout + done.stderr).strip()[-300:]}")
            if done.returncode != 0:
                return failed("a reset needs root and an idle GPU; otherwise drain the node and reboot it", *lines)
        return ok(*lines)


check_free = CheckGpuFree()
reset = GpuReset()


def _server_gpus(gpus: list[GpuReading], ctx: RunContext, exact: bool = False):
    """The GPUs the server was given (its CUDA_VISIBLE_DEVICES, by index or UUID), else all of them.

    With `exact`: (those GPUs, whether they are known) — a reset must not guess."""
    env = {**((ctx.launch.base_env if ctx.launch else None) or os.environ), **(ctx.launch.env if ctx.launch else {})}
    visible = [v.strip() for v in str(env.get("CUDA_VISIBLE_DEVICES", "")).split(",") if v.strip()]
    chosen = [g for g in gpus if str(g.index) in visible or g.uuid in visible] if visible else []
    if exact:
        return (chosen, True) if chosen else (gpus, False)
    return chosen or gpus
