"""`prove`: the last step of `triage recover --prove` — the relaunched server under the
incident's own peak load (triage/prove), through the executor like every step: audited before
and after, bounded by its timeout, under the recovery lock.

The load profile is read from the incident's evidence when the step runs (the recovery/ logs
are not evidence, so a relaunch's own log never moves the peak). The load goes to the server
URL the run knows (the relaunch's), and only on loopback: a remote server is proved by hand
with `triage prove --allow-remote`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..context import Deadline, Outcome, Runbook, RunbookStep, RunContext, failed, ok
from ..plan import Plan
from .base import NUMBER, Action, Param

STEP_ID = "prove"
SLACK_S = 20.0          # what the step keeps of its timeout for the probes around the load


class Prove(Action):
    name = "prove"
    params = (Param("duration_s", NUMBER, 300, low=1, high=3600), Param("ramp_s", NUMBER, 10, low=0, high=600),
              Param("concurrency", int, None, low=1, high=1024), Param("prompt_tokens", int, None, low=1),
              Param("output_tokens", int, None, low=1), Param("max_requests", int, 20000, low=1, high=1_000_000),
              Param("request_timeout_s", NUMBER, 120, low=0.1, high=3600),
              Param("min_headroom_gib", NUMBER, None, low=0))

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        given = {k: step.params[k] for k in ("concurrency", "prompt_tokens", "output_tokens") if k in step.params}
        load = "the incident's peak load (concurrency, prompt length: read from its evidence when the step runs)"
        if given:
            load += "; set by the runbook: " + ", ".join(f"{k} {v}" for k, v in given.items())
        lines = [f"drive {plan.url_or_ask} (loopback only) with {load}",
                 f"ramp {self.value(step, 'ramp_s')} s, hold {self.value(step, 'duration_s')} s, at most "
                 f"{self.value(step, 'max_requests')} requests, each cut after {self.value(step, 'request_timeout_s')} s; "
                 f"the first failed request stops the load and fails the step"]
        if self.value(step, "min_headroom_gib") is not None:
            lines.append(f"and the card must keep {self.value(step, 'min_headroom_gib')} GiB free at its fullest (NVML)")
        return lines

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        from ...errors import TriageError
        from ...prove.profile import Limits
        from ...prove.record import outcome_data, outcome_lines
        from ...prove.run import ProveOptions, run_prove

        if not ctx.url:
            return failed("give the server URL with --url", "no server URL: nothing to load")
        limits = self._limits(step, deadline, Limits)
        if limits is None:
            return failed("raise the step's timeout_s (--param prove.timeout_s=...)",
                          f"the step's {deadline.left():.0f} s left cannot hold a ramp and a hold")
        headroom = self.value(step, "min_headroom_gib")
        opts = ProveOptions(url=ctx.url, source=str(ctx.incident), model=None, limits=limits, record=False,
                            concurrency=self.value(step, "concurrency"), prompt_tokens=self.value(step, "prompt_tokens"),
                            output_tokens=self.value(step, "output_tokens"),
                            min_headroom_bytes=int(headroom * (1 << 30)) if headroom is not None else None)
        try:
            result = run_prove(opts, say=ctx.options.say)
        except TriageError as exc:
            return failed("prove it by hand: triage prove INCIDENT --url URL", str(exc))
        lines = outcome_lines(result)
        if limits.duration_s < float(self.value(step, "duration_s")):
            lines.insert(0, f"hold cut to {limits.duration_s:.0f} s to fit the step's timeout")
        data: dict[str, Any] = outcome_data(result)
        if result.result == "held":
            return ok(*lines, **data)
        return failed("the new settings did not hold the incident's peak: lower the limits further, or roll back "
                      "(triage recover INCIDENT --runbook rollback)", *lines, **data)

    @staticmethod
    def _limits(step: RunbookStep, deadline: Deadline, limits_type: Any) -> Any:
        """The run's bounds, the hold cut so ramp + hold + drain fit what is left of the step."""
        value = Prove().value
        limits = limits_type(max_requests=int(value(step, "max_requests")), duration_s=float(value(step, "duration_s")),
                             ramp_s=float(value(step, "ramp_s")), request_timeout_s=float(value(step, "request_timeout_s")))
        room = deadline.left() - SLACK_S - limits.ramp_s - min(limits.drain_s, limits.request_timeout_s)
        if room < 1:
            return None
        return replace(limits, duration_s=min(limits.duration_s, room))


def with_prove_step(book: Runbook) -> Runbook:
    """`book` with the proof as its last step (`recover --prove`); its parameters take --param prove.KEY=VALUE."""
    if any(s.id == STEP_ID for s in book.steps):
        return book
    action = Prove()
    timeout = float(action.param("duration_s").default) + float(action.param("ramp_s").default) + 30 + SLACK_S + 60
    step = RunbookStep(STEP_ID, "Prove the fix under the incident's peak load", "prove", timeout, "stop",
                       "every request at the incident's peak concurrency and prompt length is served for the whole "
                       "hold, and the server still answers /health", {})
    return replace(book, steps=(*book.steps, step))


prove = Prove()
