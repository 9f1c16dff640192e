"""Building the recovery plan: a runbook made concrete for one incident, before anything is done.

The verdict's values go into every step text, the launch line gets the verdict's changes, the
PIDs come with how each was confirmed or why it was refused (live /proc reads, done by
`prepare.py`), and each step's action describes exactly what it will do. Building a plan has no
side effects.
"""
from __future__ import annotations

import os

from ..advice import launch_changes
from ..model import Verdict
from .actions import REGISTRY
from .context import PlannedStep, Prepared, Runbook
from .fill import render_runbook
from .plan import PidCandidate, Plan
from .privileges import relaunch_env, run_uid
from .trust import bundle_commands


def build_plan(verdict: Verdict, runbook: Runbook, prepared: Prepared,
               driver: str | None = None, deployment: str | None = None) -> Plan:
    """The runbook made concrete: the confirmed PIDs (live /proc reads in `prepared`), the launch
    line with the verdict's changes, every detail of every step."""
    runbook = render_runbook(runbook, verdict)          # the verdict's values in every step text
    plan = Plan(runbook=runbook, verdict=verdict, driver=driver, deployment=deployment)
    relaunch = launch_changes(verdict)
    plan.diff = [(r.setting, r.from_value, r.to_value) for r in relaunch]
    # An upgrade or a restart schedule: a restart cannot make it; listed for a person to do.
    plan.manual = [(r.setting, r.from_value, r.to_value, r.why) for r in verdict.recommendations
                   if r.to_value is not None and r not in relaunch]
    plan.server_url = prepared.url
    ident = prepared.identification
    plan.pids = [PidCandidate(p.info.pid, p.role, p.why, "confirmed") for p in ident.processes]
    plan.pids += [PidCandidate(r.pid, r.role, r.source, f"refused: {r.reason}") for r in ident.refused]
    plan.pids += [PidCandidate(c.pid, c.role, c.source, "not running") for c in ident.gone]
    if prepared.launch:
        plan.current_argv = prepared.launch.old_argv
        plan.new_argv, plan.env = prepared.launch.argv, dict(prepared.launch.env)
        plan.launch_source = prepared.launch.source
    plan.notes = list(prepared.notes)
    plan.run_as = prepared.run_as
    plan.env_dropped = _env_dropped(prepared)
    plan.bundle = bundle_commands([PlannedStep(n, s, ()) for n, s in enumerate(runbook.steps, 1)], prepared, driver)
    for number, step in enumerate(runbook.steps, 1):
        plan.steps.append(PlannedStep(number, step, tuple(REGISTRY[step.action].describe(step, plan))))
    return plan


def _env_dropped(prepared: Prepared) -> list[str]:
    """The code-loading variables the process driver's relaunch would not carry, and why."""
    spec = prepared.launch
    if spec is None:
        return []
    base, base_uid = (spec.base_env, spec.base_env_uid) if spec.base_env is not None else (dict(os.environ), os.geteuid())
    _, dropped = relaunch_env(base, base_uid, spec.env, spec.bundle_env, run_uid(prepared.run_as))
    return [f"{d.name}: {d.why}" for d in dropped]
