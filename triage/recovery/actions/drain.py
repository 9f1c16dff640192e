"""`drain`: let running requests finish before the server is stopped, bounded.

vLLM has no drain endpoint: stopping *new* work is the gateway's job (runbooks put a manual
step before this one). This step waits until `vllm:num_requests_running` reaches 0. A server
that no longer answers, or whose engine is dead, has nothing left to drain.
"""
from __future__ import annotations

from ...live.server import Probe, health, metrics
from ..context import Deadline, Outcome, RunbookStep, RunContext, failed, ok, skipped
from ..plan import Plan
from .base import NUMBER, Action, Param


class Drain(Action):
    name = "drain"
    params = (Param("poll_s", NUMBER, 2, low=0.05), Param("max_wait_s", NUMBER, 120, low=0))
    destructive = True

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        return [f"poll {plan.url_or_ask}/metrics every {self.value(step, 'poll_s')} s until vllm:num_requests_running "
                f"is 0 (at most {self.value(step, 'max_wait_s')} s; a dead engine counts as drained)"]

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        if not ctx.url:
            return skipped("no server URL in the evidence (give --url): nothing to poll")
        poll = float(self.value(step, "poll_s"))
        limit = min(float(self.value(step, "max_wait_s")), deadline.left())
        waited = 0.0
        while True:
            probe = health(ctx.url, min(5.0, max(0.5, deadline.left())))
            if probe.status is None:
                return ok(f"{probe.detail}: the server is down, nothing to drain")
            if not probe.ok:
                return ok(f"{probe.detail}: the engine is dead, its requests already failed")
            values = metrics(ctx.url, min(5.0, max(0.5, deadline.left())))
            if isinstance(values, Probe):
                return ok(f"{values.detail}: no request count to wait on")
            running = int(values.get("requests_running", 0))
            if running == 0:
                return ok(f"vllm:num_requests_running is 0 after {waited:.0f} s", running=0)
            if waited >= limit:
                return failed("stop it anyway (the next step) or wait longer; the running requests will fail",
                              f"{_requests(running)} still running after {waited:.0f} s", running=running)
            ctx.options.say(f"  {_requests(running)} running, waiting")
            deadline.sleep(poll)
            waited += poll


def _requests(n: int) -> str:
    return f"{n} request" if n == 1 else f"{n} requests"


drain = Drain()
