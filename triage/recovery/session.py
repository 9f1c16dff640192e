"""One `triage recover` invocation as a library call: classify, choose, prepare, plan, execute.

The click command only parses options and renders; everything that decides lives here or in
the modules it calls, so the same recovery can run from a bot or a test without the CLI.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..errors import ExitCode, TriageError
from ..model import EvidenceSet, Verdict
from .audit import AuditLog
from .context import ExecOptions, RunContext
from .executor import Executor, RunReport, StepReport, resume_point
from .lock import HostLock
from .plan import Plan, PlannedStep, build_plan
from .prepare import Prepared, prepare
from .runbooks import load_runbooks, select, with_overrides


class NoRunbook(TriageError):
    exit_code = ExitCode.UNKNOWN


@dataclass
class Session:
    incident: Path
    verdict: Verdict
    evidence: EvidenceSet
    plan: Plan
    prepared: Prepared
    audit: AuditLog
    warnings: list[str] = field(default_factory=list)


def open_session(incident: str, *, runbook_name: str | None = None, runbook_dirs: Sequence[str] = (),
                 params: Sequence[str] = (), pids: Sequence[int] = (), url: str | None = None,
                 launch_command: str | None = None, driver: str | None = None) -> Session:
    """Read the incident and build the plan. Reads /proc and actions.jsonl; writes nothing."""
    from ..api import classify_paths

    root = Path(incident)
    if not root.is_dir():
        raise TriageError(f"{incident}: recovery needs an incident directory (it keeps actions.jsonl)")
    verdict, evidence = classify_paths([incident])
    name = runbook_name or verdict.runbook
    if not name:
        raise NoRunbook(f"{incident}: the verdict is {verdict.oom_class.value}; choose a runbook with --runbook "
                        "(triage runbooks lists them)")
    book = select(load_runbooks([Path(d) for d in runbook_dirs]), name)
    if params:
        book = with_overrides(book, params)
    audit = AuditLog(root)
    prepared = prepare(root, verdict, evidence, audit.records(), pids=tuple(pids), url=url,
                       launch_command=launch_command)
    plan = build_plan(verdict, evidence, book, prepared, driver=driver)
    return Session(root, verdict, evidence, plan, prepared, audit)


def execute(session: Session, options: ExecOptions, *, show_step: Callable[[PlannedStep], None] = lambda ps: None,
            show_result: Callable[[StepReport], None] = lambda r: None, lock_path: str | None = None) -> RunReport:
    """Run the plan under the host lock; resumes after the last completed step of an unfinished run."""
    from .audit import verify

    check = verify(session.incident)
    if not check.ok:
        raise TriageError(f"{session.audit.path}: {check.problems[0]} — the audit trail is broken; "
                          "move it aside (keep it for the postmortem) before recovering again")
    with HostLock(lock_path) as lock:
        if lock.warning:
            options.say(f"warning: {lock.warning}")
        resume_from, done = resume_point(session.audit, session.plan)
        if resume_from and done:
            options.say(f"resuming run {resume_from}: steps {', '.join(done)} already completed")
        p = session.prepared
        ctx = RunContext(session.incident, session.plan.runbook.id, p.model, p.url, p.identification, p.launch,
                         options, known_good=p.known_good, verdict=session.verdict)
        with _sigterm_interrupts():
            return Executor(session.plan, ctx, session.audit, show_step, show_result).run(resume_from, done)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a supervisor stopping this run) is handled like Ctrl-C: the step in progress is
    recorded as interrupted and the run ends cleanly, so the audit trail says what happened."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
