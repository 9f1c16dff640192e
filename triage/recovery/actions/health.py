"""`wait_healthy` and `verify`: prove the server serves, then that it stays sane for a while.

`/health` 200 alone proves little (vLLM answers it while the engine is wedged), so the step
ends with a real completion of one token under its own deadline. `verify` then watches KV-cache
usage from /metrics and GPU memory from NVML for a window.
"""
from __future__ import annotations

from ...live.nvml import NoNvml, read_gpus
from ...live.server import Probe, health, metrics, serves
from ...thresholds import KV_CRITICAL, RELAUNCH_GPU_SHARE_MAX
from ..context import Deadline, Outcome, RunbookStep, RunContext, StepTimeout, failed, ok
from ..plan import Plan
from .base import NUMBER, Action, Param

# The limits `verify` holds the relaunched server to, unless the runbook sets its own: the
# critical KV alert level, and the share of the card that still leaves room outside the KV cache
# (both in the threshold table, with why).
MAX_KV_USAGE = KV_CRITICAL
MAX_GPU_SHARE = RELAUNCH_GPU_SHARE_MAX


class WaitHealthy(Action):
    name = "wait_healthy"
    params = (Param("retries", int, 60, low=1), Param("backoff_s", NUMBER, 2, low=0),
              Param("completion_deadline_s", NUMBER, 60, low=0.1))

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        where = f"{plan.server_url} (or the URL a relaunch announces in its log)" if plan.server_url else \
            "the URL the relaunch announces in its log (or --url)"
        return [f"GET /health at {where}, {self.value(step, 'retries')} tries, backoff {self.value(step, 'backoff_s')} "
                "s, growing",
                f"then POST /v1/completions with max_tokens=1; it must answer within "
                f"{self.value(step, 'completion_deadline_s')} s (a /health 200 alone does not prove the engine serves)"]

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        if not ctx.url:
            return failed("give the server URL with --url", "no server URL: nothing to probe")
        retries = int(self.value(step, "retries"))
        backoff = float(self.value(step, "backoff_s"))
        lines: list[str] = []
        probe = Probe(False, "not tried")
        for attempt in range(1, retries + 1):
            probe = health(ctx.url, min(5.0, max(0.5, deadline.left())))
            if probe.ok:
                lines.append(f"{probe.detail} after {attempt} tries")
                break
            if attempt == retries or deadline.left() < 1:
                return failed("read the server log; the server never answered /health", *lines,
                              f"{probe.detail} ({attempt} tries)")
            # exponential backoff from `backoff`, capped so the step keeps polling
            deadline.sleep(min(backoff * (1.5 ** min(attempt - 1, 6)), 15.0))
        budget = min(float(self.value(step, "completion_deadline_s")), deadline.left())
        answer = serves(ctx.url, ctx.model, budget)
        lines.append(answer.detail)
        if not answer.ok and deadline.expired():
            raise StepTimeout(f"no completion before the step timeout of {deadline.seconds:g} s ({answer.detail})")
        if not answer.ok:
            return failed("the engine answers /health but does not complete requests: stop it (stop_server) and "
                          "read its log; if the new flags are the cause, roll back", *lines)
        served = ctx.launched[-1]["argv"] if ctx.launched and "argv" in ctx.launched[-1] else None
        return ok(*lines, url=ctx.url, serving_argv=served)


class Verify(Action):
    name = "verify"
    params = (Param("window_s", NUMBER, 60, low=0), Param("max_kv_usage", NUMBER, MAX_KV_USAGE, low=0.01, high=1),
              Param("max_gpu_share", NUMBER, MAX_GPU_SHARE, low=0.01, high=1))

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        return [f"for {self.value(step, 'window_s')} s: vllm KV-cache usage <= {self.value(step, 'max_kv_usage'):.0%}, "
                f"GPU memory <= {self.value(step, 'max_gpu_share'):.0%} of the card (NVML)"]

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        if not ctx.url:
            return failed("give the server URL with --url", "no server URL: nothing to watch")
        window = min(float(self.value(step, "window_s")), max(0.0, deadline.left() - 2))
        max_kv = float(self.value(step, "max_kv_usage"))
        max_gpu = float(self.value(step, "max_gpu_share"))
        end = deadline.clock() + window
        worst_kv, worst_gpu, samples = 0.0, 0.0, 0
        gpu_note = None
        while True:
            values = metrics(ctx.url, min(5.0, max(0.5, deadline.left())))
            if isinstance(values, Probe):
                return failed("the server stopped answering during the watch window: read its log", values.detail)
            samples += 1
            kv = values.get("kv_cache_usage")
            if kv is not None:
                worst_kv = max(worst_kv, kv)
                if kv > max_kv:
                    return failed("lower the load or the limits further", f"KV-cache usage {kv:.0%} > {max_kv:.0%}")
            gpus = read_gpus()
            if isinstance(gpus, NoNvml):
                gpu_note = str(gpus)
            else:
                share = max((g.used_share for g in gpus), default=0.0)
                worst_gpu = max(worst_gpu, share)
                if share > max_gpu:
                    return failed("GPU memory is at the edge: lower gpu_memory_utilization",
                                  f"GPU memory {share:.0%} of the card > {max_gpu:.0%}")
            if deadline.clock() >= end:
                break
            deadline.sleep(min(2.0, max(0.0, end - deadline.clock())))
        lines = [f"{samples} samples over {window:.0f} s: KV-cache usage at most {worst_kv:.0%} (limit {max_kv:.0%})"]
        lines.append(f"GPU: {gpu_note}" if gpu_note
                     else f"GPU memory at most {worst_gpu:.0%} of the card (limit {max_gpu:.0%})")
        return ok(*lines, max_kv_usage=round(worst_kv, 4),
                  max_gpu_share=round(worst_gpu, 4) if not gpu_note else None)


wait_healthy = WaitHealthy()
verify = Verify()
