"""One `triage recover` invocation as a library call: classify, choose, prepare, plan, execute.

The click command only parses options and renders; everything that decides lives here or in
the modules it calls, so the same recovery can run from a bot or a test without the CLI.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..classes import registry
from ..errors import BadInput, ExitCode, TriageError
from ..model import EvidenceSet, Verdict
from ..safedir import HeldDir
from ..safefile import kind_at
from . import interrupts, trust
from .audit import AuditLog
from .context import ExecOptions, PlannedStep, Prepared, RunContext, relaunch_driver, rollback_spec
from .executor import Executor, RunReport, StepReport, resume_point
from .lock import BundleLock, HostLock
from .plan import Plan
from .planner import build_plan
from .prepare import prepare
from .privileges import cwd_problem, identity_problem, run_uid
from .runbooks import load_runbooks, select, with_overrides
from .signals import gone


class NoRunbook(TriageError):
    exit_code = ExitCode.UNKNOWN


class NothingToRecover(TriageError):
    """The evidence holds no OOM (verdict no_oom): no runbook applies and that is an answer (exit 0)."""

    exit_code = ExitCode.OK

    def __init__(self, incident: str, verdict: Verdict):
        self.verdict = verdict
        super().__init__(f"{incident}: nothing to recover: no OOM found in the evidence")


@dataclass
class Session:
    incident: Path
    verdict: Verdict
    evidence: EvidenceSet
    plan: Plan
    prepared: Prepared
    audit: AuditLog
    warnings: list[str] = field(default_factory=list)
    audit_seen: tuple[int, str | None] = (0, None)    # (records, last hash) the plan was built from
    held: HeldDir | None = None                       # the incident directory, open for the whole run

    def close(self) -> None:
        if self.held is not None:
            self.held.close()


def open_session(incident: str, *, runbook_name: str | None = None, runbook_dirs: Sequence[str] = (),
                 params: Sequence[str] = (), pids: Sequence[int] = (), url: str | None = None,
                 launch_command: str | None = None, driver: str | None = None,
                 deployment: str | None = None, prove: bool = False) -> Session:
    """Read the incident and build the plan. Reads /proc and actions.jsonl; writes nothing."""
    root = Path(incident)
    if not root.is_dir():
        raise TriageError(f"{incident}: recovery needs an incident directory (it keeps actions.jsonl)")
    # Held by descriptor from here to the end of the run: whoever owns the directory cannot swap it
    # (or a folder inside it) for a link between the plan, the verify step and the writes.
    held = HeldDir.open(root)
    try:
        return _open_session(root, held, runbook_name=runbook_name, runbook_dirs=runbook_dirs, params=params,
                             pids=pids, url=url, launch_command=launch_command, driver=driver, deployment=deployment,
                             prove=prove)
    except BaseException:
        held.close()
        raise


def _open_session(root: Path, held: HeldDir, *, runbook_name: str | None, runbook_dirs: Sequence[str],
                  params: Sequence[str], pids: Sequence[int], url: str | None, launch_command: str | None,
                  driver: str | None, deployment: str | None, prove: bool = False) -> Session:
    from ..api import classify_paths

    incident = str(root)
    planted = kind_at(root / "actions.jsonl")
    if planted:                        # reading a FIFO would hang the run before it prints anything
        raise TriageError(f"{root / 'actions.jsonl'}: {planted}, not a regular file: refusing to recover "
                          "(move it aside)")
    verdict, evidence = classify_paths([incident])
    name = runbook_name or verdict.runbook
    if not name and verdict.oom_class is registry().healthy.id:
        raise NothingToRecover(incident, verdict)
    if not name:
        raise NoRunbook(f"{incident}: the verdict is {verdict.oom_class.value}; choose a runbook with --runbook "
                        "(triage runbooks lists them)")
    book = select(load_runbooks([Path(d) for d in runbook_dirs]), name)
    if prove:                          # `recover --prove`: the proof under the incident's peak, last
        from .actions.prove import with_prove_step

        book = with_prove_step(book)
    if params:
        book = with_overrides(book, params)
    if url is not None:
        from ..httpget import server_base_url

        server_base_url(url)
    audit = AuditLog(held)
    seen = _audit_state(audit)
    relaunch = next((s for s in book.steps if s.action in ("restart", "rollback")), None)
    in_pod = (relaunch_driver(relaunch, driver) if relaunch else driver) == "kubectl"
    trusted, untrusted = audit.authenticated()         # only this host's own records decide anything
    prepared = prepare(root, verdict, evidence, trusted, pids=tuple(pids), url=url,
                       launch_command=launch_command, in_pod=in_pod, untrusted=untrusted)
    plan = build_plan(verdict, book, prepared, driver=driver, deployment=deployment)
    return Session(root, verdict, evidence, plan, prepared, audit, audit_seen=seen, held=held)


def open_live_session(incident: str | Path, verdict: Verdict, book, *, pids: Sequence[int], url: str) -> Session:
    """The plan for a live server no evidence describes (`triage watch --act`): `verdict` is the
    watch's own judgement, `pids` the processes it proved are the server at `url`. Same audit log,
    identification, launch (the running server's own command line) and plan as `open_session`."""
    root = Path(incident)
    held = HeldDir.open(root)
    try:
        planted = kind_at(root / "actions.jsonl")
        if planted:
            raise TriageError(f"{root / 'actions.jsonl'}: {planted}, not a regular file: refusing to recover "
                              "(move it aside)")
        audit = AuditLog(held)
        seen = _audit_state(audit)
        trusted, untrusted = audit.authenticated()
        evidence = EvidenceSet()
        prepared = prepare(root, verdict, evidence, trusted, pids=tuple(pids), url=url, untrusted=untrusted)
        plan = build_plan(verdict, book, prepared)
        return Session(root, verdict, evidence, plan, prepared, audit, audit_seen=seen, held=held)
    except BaseException:
        held.close()
        raise


def _audit_state(audit: AuditLog) -> tuple[int, str | None]:
    """How many records actions.jsonl holds and the hash of the last one."""
    records = audit.records()
    return len(records), (str(records[-1].get("hash")) if records else None)


def preflight(session: Session, options: ExecOptions, done: Sequence[str] = ()) -> list[str]:
    """What would make a step fail for want of an option, checked before anything is done: a
    server stopped and then not relaunched because --unit was missing is an outage of our making."""
    problems: list[str] = []
    p = session.prepared
    for ps in session.plan.steps:
        step = ps.step
        if step.id in done or step.action not in ("restart", "rollback"):
            continue
        driver = relaunch_driver(step, options.driver)
        where = f"step {ps.number} ({step.id}, driver {driver})"
        if driver == "systemctl" and not options.unit:
            problems.append(f"{where} needs the systemd unit: give --unit NAME")
        if driver == "kubectl":
            ns, _, name = (options.deployment or "").partition("/")
            if not ns or not name or "/" in name:
                problems.append(f"{where} needs the deployment: give --deployment NAMESPACE/NAME")
            continue                         # kubectl reads the container args live; no local command needed
        if step.action == "restart" and p.launch is not None and p.launch.missing:
            problems += [f"{where}: {why}" for why in p.launch.missing]
        if step.action == "restart" and p.launch is None:
            problems.append(f"{where} has no command to start the server with: give --launch-command '…' "
                            "(or launch: {argv: […]} in incident.yaml)")
        if step.action == "rollback" and not p.known_good:
            problems.append(f"{where} has no known-good launch: actions.jsonl records (authenticated by this host's "
                            "key) hold no launch that served, and the original command never served; relaunch by hand")
        if driver == "process":
            problems += [f"{where}: {why}" for why in _identity_problems(p, step.action)]
    return problems


def _identity_problems(p: Prepared, action: str) -> list[str]:
    """A relaunch never gains privileges: the server's own user, never root in another user's directory."""
    out = [why for why in (identity_problem(p.run_as),) if why]
    spec = rollback_spec(p.known_good, p.launch) if action == "rollback" and p.known_good else p.launch
    cwd = cwd_problem(spec.cwd if spec else None, run_uid(p.run_as))
    if cwd:
        out.append(cwd + "; give --launch-command to run it from the directory triage runs in")
    return out


def _redo_stop(session: Session, done: list[str], say: Callable[[str], None]) -> list[str]:
    """A resumed run that still has to relaunch skips its completed stop step only while nothing
    of the server runs: a server an interrupted or failed relaunch left running is stopped again,
    never joined by a second copy. (A relaunch that completed is not redone: the run goes on
    waiting for that server.)"""
    steps = session.plan.steps
    pending = next((i for i, ps in enumerate(steps) if ps.step.id not in done), len(steps))
    if not any(ps.step.action in ("restart", "rollback") for ps in steps[pending:]):
        return done
    stops = [i for i, ps in enumerate(steps[:pending]) if ps.step.action == "stop_server"]
    if not stops:
        return done
    running = [p for p in session.prepared.identification.processes if not gone(p.info)]
    if not running:
        return done
    again = steps[stops[-1]]
    say(f"server processes are running ({', '.join(str(p.info.pid) for p in running)}) although step "
        f"{again.number} ({again.step.id}) completed before: it runs again, and every step after it")
    earlier = {ps.step.id for ps in steps[:stops[-1]]}
    return [d for d in done if d in earlier]


def execute(session: Session, options: ExecOptions, *, show_step: Callable[[PlannedStep], None] = lambda ps: None,
            show_result: Callable[[StepReport], None] = lambda r: None, lock_path: str | None = None) -> RunReport:
    """Run the plan under the host lock; resumes after the last completed step of an unfinished run."""
    check = session.audit.verify()
    if not check.ok:
        raise TriageError(f"{session.audit.path}: {check.problems[0]} — the audit trail is broken; "
                          "move it aside (keep it for the postmortem) before recovering again")
    # The host lock keeps one recovery per host; the bundle lock one per incident even when two runs
    # were given different host lock paths. Both are held for the whole run.
    with HostLock(lock_path) as lock, BundleLock(session.incident, held=session.audit.directory()):
        if lock.warning:
            options.say(f"warning: {lock.warning}")
        if _audit_state(session.audit) != session.audit_seen:
            raise TriageError(f"{session.audit.path} changed since this plan was made (another recovery ran in "
                              "the meantime): nothing was done; run the command again to plan from what runs now")
        resume_from, done = resume_point(session.audit, session.plan)
        if done:
            done = _redo_stop(session, done, options.say)
        problems = preflight(session, options, done)
        if problems:
            raise TriageError("; ".join(problems) + " — nothing was done")
        if resume_from and done:
            options.say(f"resuming run {resume_from}: steps {', '.join(done)} already completed")
        p = session.prepared
        session.audit.signing_key()          # no key, no run: refused before anything is written
        trust.confirm(trust.bundle_commands(session.plan.steps, p, options.driver, done), options,
                      str(session.incident))
        ctx = RunContext(session.incident, session.plan.runbook.id, p.model, p.url, p.identification, p.launch,
                         options, known_good=p.known_good, verdict=session.verdict,
                         relaunch_driver=_relaunch_driver(session, options), run_as=p.run_as,
                         held=session.audit.directory())
        with interrupts.handled():
            return Executor(session.plan, ctx, session.audit, show_step, show_result,
                            audit_seen=session.audit_seen).run(resume_from, done)


def _relaunch_driver(session: Session, options: ExecOptions) -> str | None:
    for ps in session.plan.steps:
        if ps.step.action in ("restart", "rollback"):
            return relaunch_driver(ps.step, options.driver)
    return None
