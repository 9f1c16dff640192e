"""`triage recover --execute`: carry out a plan one confirmed, time-boxed, audited step at a time.

The order of every step is fixed: confirm (unless --yes) -> re-check the preconditions
(the server must still be failing) -> append the `start` record -> run the action under its
timeout (a cooperative deadline inside, SIGALRM as the backstop) -> append the `end` record.
The host lock is held for the whole run, so two recoveries never interleave. A failed step with
`on_failure: stop` ends the run with what to do by hand; re-running resumes after the last step
that completed, across runs (each run records which run it resumes).
"""
from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from contextlib import contextmanager

from ..live.server import health, serves
from . import interrupts
from .actions import DESTRUCTIVE, REGISTRY, RUNNERS
from .audit import AuditError, AuditLog
from .context import Deadline, Outcome, PlannedStep, RunContext, StepTimeout
from .handoff import HANDED
from .plan import Plan
from .prepare import this_host

ALARM_SLACK_S = 2.0          # the backstop fires this long after the cooperative deadline
PRECHECK_S = 25.0            # the "does it serve again?" check before the first destructive step


@dataclass
class StepReport:
    number: int
    step_id: str
    result: str              # ok | failed | skipped | aborted | timeout | interrupted | not run | handed
    lines: list[str] = field(default_factory=list)
    by_hand: str | None = None


@dataclass
class RunReport:
    run_id: str
    runbook: str
    resumed_from: str | None
    skipped_done: list[str]                     # step ids completed by earlier runs
    steps: list[StepReport] = field(default_factory=list)
    result: str = "ok"                          # ok | failed | aborted | interrupted | declined

    @property
    def ok(self) -> bool:
        return self.result == "ok"


def resume_point(audit: AuditLog, plan: Plan) -> tuple[str | None, list[str]]:
    """(run id to resume, step ids already done) when the last run in the log is an unfinished
    run of this runbook. A run of another runbook since then (a rollback, a different runbook
    tried by hand) changed what is running: the steps of the older run prove nothing any more,
    so the runbook starts again from step 1."""
    # Only records this host's key authenticates: a forged unfinished run must not skip steps.
    runs: list[dict[str, Any]] = [r for r in this_host(audit.authenticated()[0]) if r.get("action") == "run"]
    all_starts = [r for r in runs if r.get("phase") == "start"]
    starts = [r for r in all_starts if (r.get("args") or {}).get("runbook") == plan.runbook.id]
    if not starts:
        return None, []
    last = starts[-1]
    if all_starts[-1].get("run_id") != last.get("run_id"):
        return None, []
    ended_ok = any(r.get("phase") == "end" and r.get("run_id") == last.get("run_id") and r.get("result") == "ok"
                   for r in runs)
    if ended_ok:
        return None, []              # that recovery finished: a new run starts from step 1
    chain = {last.get("run_id")}
    resumed = (last.get("args") or {}).get("resumes")
    while resumed and resumed not in chain:   # a run that resumed a run that resumed...
        chain.add(resumed)
        earlier = next((r for r in starts if r.get("run_id") == resumed), None)
        resumed = (earlier.get("args") or {}).get("resumes") if earlier else None
    done: list[str] = []
    for run_id in chain:
        done += [s for s in audit.completed_steps(run_id) if s not in done]
    ids = [ps.step.id for ps in plan.steps]
    last_done = max((ids.index(s) for s in done if s in ids), default=-1)
    return str(last.get("run_id")), ids[: last_done + 1]


def audit_moved(audit: AuditLog, seen: tuple[int, str | None]) -> str | None:
    """Why actions.jsonl is no longer the log the plan was made from plus this run's own records
    (another recovery wrote to it, or it was rewritten), or None.

    `seen` is (records, hash of the last one) when the plan was made. Both locks keep other
    recoveries out; this catches a writer that took neither (or a hand edit) before each step."""
    records = audit.records()
    count, last = seen
    if len(records) < count or (count and str(records[count - 1].get("hash")) != str(last)):
        return f"{audit.path} was rewritten since this plan was made"
    foreign = next((r for r in records[count:] if r.get("run_id") != audit.run_id), None)
    if foreign is not None:
        return (f"{audit.path} changed since this plan was made: record {foreign.get('seq')} was written by "
                f"run {foreign.get('run_id')} (another recovery?)")
    return None


class Executor:
    def __init__(self, plan: Plan, ctx: RunContext, audit: AuditLog,
                 show_step: Callable[[PlannedStep], None] = lambda ps: None,
                 show_result: Callable[["StepReport"], None] = lambda r: None,
                 audit_seen: tuple[int, str | None] | None = None):
        self.plan = plan
        self.ctx = ctx
        self.audit = audit
        self.show_step = show_step
        self.show_result = show_result
        self.audit_seen = audit_seen        # re-checked before every step (see audit_moved)

    def run(self, resume_from: str | None = None, done: list[str] | None = None) -> RunReport:
        done = done or []
        report = RunReport(self.audit.run_id, self.plan.runbook.id, resume_from, list(done))
        v = self.plan.verdict
        # A rollback replaces a server that may well be serving: no "still failing" precondition.
        checked_unhealthy = any(ps.step.action == "rollback" for ps in self.plan.steps)
        try:
            self.audit.append({"action": "run", "phase": "start", "args": {
                "runbook": self.plan.runbook.id, "class": v.oom_class.value, "confidence": v.confidence,
                "summary": v.summary, "resumes": resume_from, "already_done": done,
                "pids": self.ctx.identification.pids, "url": self.ctx.url}})
            for ps in self.plan.steps:
                if ps.step.id in done:
                    continue
                interrupts.check()            # an interrupt a finalizer swallowed still ends the run
                self.show_step(ps)
                if not self.ctx.options.yes and not self.ctx.options.confirm(f"Run step {ps.number} ({ps.step.id})?"):
                    report.steps.append(StepReport(ps.number, ps.step.id, "not run", ["declined by the operator"]))
                    report.result = "declined"
                    break
                moved = audit_moved(self.audit, self.audit_seen) if self.audit_seen is not None else None
                if moved:                     # re-checked after the prompt too: a person may answer late
                    report.steps.append(StepReport(ps.number, ps.step.id, "aborted",
                                                   [moved + ": nothing more was done"],
                                                   "run the command again to plan from what runs now"))
                    self.show_result(report.steps[-1])
                    report.result = "aborted"
                    break
                if ps.step.action in DESTRUCTIVE and not checked_unhealthy:
                    drift = self._still_failing()
                    checked_unhealthy = True
                    if drift:
                        report.steps.append(self._abort(ps, drift))
                        self.show_result(report.steps[-1])
                        report.result = "aborted"
                        break
                step_report = self._run_step(ps)
                report.steps.append(step_report)
                self.show_result(step_report)
                if step_report.result in ("ok", "skipped", HANDED):   # a hand-off does not hold the run
                    continue
                if ps.step.on_failure == "continue" and step_report.result in ("failed", "timeout"):
                    continue
                report.result = "aborted" if step_report.result == "aborted" else "failed"
                break
        except KeyboardInterrupt:
            interrupts.clear()                # recorded below: handled
            report.result = "interrupted"
            self._end_run(report)
            raise
        except Exception:
            report.result = "failed"       # the audit log itself failed: try to close the run, then report it
            try:
                self._end_run(report)
            except Exception:
                pass
            raise
        self._end_run(report)
        return report

    # -- internals ------------------------------------------------------------------------------
    def _still_failing(self) -> str | None:
        """Drift check before the first destructive step: a server that serves needs no recovery."""
        if self.ctx.options.force or not self.ctx.url:
            return None
        try:
            with _alarm(PRECHECK_S + ALARM_SLACK_S):    # a server trickling its answer cannot hold the run
                if not health(self.ctx.url, 3.0).ok:
                    return None
                answer = serves(self.ctx.url, self.ctx.model, 15.0)
        except StepTimeout:
            return None                                  # no answer in time: it does not serve
        if answer.ok:
            return (f"the server at {self.ctx.url} serves again ({answer.detail}): nothing to recover; "
                    "use --force to run the plan anyway")
        return None

    def _abort(self, ps: PlannedStep, why: str) -> StepReport:
        with self.audit.step(ps.step.id, ps.step.action, args={"precondition": "server still failing"},
                             number=ps.number) as handle:
            handle.result = "aborted"
            handle.output = why
        return StepReport(ps.number, ps.step.id, "aborted", [why], "check the server; re-run if it fails again")

    def _run_step(self, ps: PlannedStep) -> StepReport:
        step = ps.step
        args: dict[str, Any] = {"params": dict(step.params), "timeout_s": step.timeout_s, "details": list(ps.details),
                                **REGISTRY[step.action].audit_args(step, self.ctx)}
        runner = RUNNERS[step.action]
        outcome: Outcome | None = None
        try:
            with self.audit.step(step.id, step.action, args=args, number=ps.number,
                                 runbook=self.plan.runbook.id) as handle:
                launched_before = len(self.ctx.launched)
                try:
                    with _alarm(step.timeout_s + ALARM_SLACK_S):
                        outcome = runner(step, self.ctx, Deadline(step.timeout_s))
                finally:
                    if outcome is None and len(self.ctx.launched) > launched_before:
                        # Interrupted, timed out or broken after a server was started: the end record
                        # must still name it (pid, start time), or no later run can find and stop it.
                        handle.data = {"launched": self.ctx.launched[-1]}
                handle.result = None if outcome.result == "ok" else outcome.result
                handle.output = outcome.output
                handle.data = outcome.data
        except StepTimeout as exc:
            return StepReport(ps.number, step.id, "timeout", [str(exc)],
                              f"the step did not finish in {step.timeout_s:g} s: {step.verify} — check by hand")
        except AuditError:
            raise                          # no audit, no action: the run ends here
        except Exception as exc:           # a broken action: recorded as failed by the audit step
            return StepReport(ps.number, step.id, "failed", [f"{type(exc).__name__}: {exc}"],
                              f"the step broke off: {step.verify} — check by hand")
        return StepReport(ps.number, step.id, outcome.result, outcome.lines, outcome.by_hand)

    def _end_run(self, report: RunReport) -> None:
        self.audit.append({"action": "run", "phase": "end", "result": report.result,
                           "args": {"runbook": report.runbook},
                           "output_tail": "; ".join(f"{s.step_id}: {s.result}" for s in report.steps)})


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """SIGALRM raises StepTimeout if a blocking call ignores the step's deadline (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: object) -> None:
        raise StepTimeout(f"step timeout of {seconds - ALARM_SLACK_S:g} s reached (a call did not return)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def report_json(report: RunReport) -> dict[str, Any]:
    return {"schema": "triage.recovery/v1", "run_id": report.run_id, "runbook": report.runbook,
            "result": report.result, "resumed_from": report.resumed_from, "already_done": report.skipped_done,
            "steps": [{"number": s.number, "id": s.step_id, "result": s.result, "output": s.lines,
                       "by_hand": s.by_hand} for s in report.steps]}
