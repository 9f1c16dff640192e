"""The recovery plan as data: a runbook made concrete for one incident, and its JSON form.

Every step carries the exact details a reviewer needs — which PIDs (and how they will be
confirmed), which signals, the old and new launch arguments and their diff, the environment, the
URLs probed and every timeout. `planner.py` builds it; each action writes its own step's lines
(`actions/`). `triage recover` without `--execute` prints it and writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Verdict
from .context import PlannedStep, Runbook
from .privileges import RunAs
from .trust import BundleCommand


@dataclass(frozen=True)
class PidCandidate:
    pid: int
    role: str            # "APIServer", "EngineCore_DP0", "VLLM::Worker_TP0", ...
    source: str          # where it was seen (source:line) or how it was confirmed
    status: str                            # confirmed | refused: why | not running


@dataclass
class Plan:
    runbook: Runbook
    verdict: Verdict
    steps: list[PlannedStep] = field(default_factory=list)
    current_argv: list[str] | None = None
    new_argv: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    diff: list[tuple[str, Any, Any]] = field(default_factory=list)
    pids: list[PidCandidate] = field(default_factory=list)
    server_url: str | None = None
    launch_source: str | None = None
    notes: list[str] = field(default_factory=list)
    driver: str | None = None            # --driver: overrides the runbook's restart driver
    deployment: str | None = None        # --deployment NS/NAME, for the kubectl argv the plan prints
    bundle: list[BundleCommand] = field(default_factory=list)   # commands from the bundle: need confirming
    run_as: RunAs | None = None          # who the relaunch runs as
    env_dropped: list[str] = field(default_factory=list)          # `NAME: why` for variables a relaunch drops
    manual: list[tuple[str, Any, Any, str]] = field(default_factory=list)   # changes no relaunch makes (upgrades)

    @property
    def url_or_ask(self) -> str:
        """The server URL for a step's lines, or what to give when the evidence has none."""
        return self.server_url or "<server URL: give --url>"


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "schema": "triage.recovery_plan/v1",
        "dry_run": True,
        "runbook": plan.runbook.id,
        "verdict": {"class": plan.verdict.oom_class.value, "confidence": plan.verdict.confidence,
                    "summary": plan.verdict.summary},
        "server_url": plan.server_url,
        "pids": [{"pid": c.pid, "role": c.role, "source": c.source, "status": c.status} for c in plan.pids],
        "launch_source": plan.launch_source,
        "notes": plan.notes,
        "current_argv": plan.current_argv,
        "new_argv": plan.new_argv,
        "env": plan.env,
        "changes": [{"setting": s, "from": old, "to": new} for s, old, new in plan.diff],
        "manual_changes": [{"setting": s, "from": old, "to": new, "why": why} for s, old, new, why in plan.manual],
        "bundle_commands": [b.json() for b in plan.bundle],
        "run_as": _run_as_json(plan.run_as),
        "env_dropped": plan.env_dropped,
        "steps": [{"number": ps.number, "id": ps.step.id, "title": ps.step.title, "action": ps.step.action,
                   "timeout_s": ps.step.timeout_s, "on_failure": ps.step.on_failure, "verify": ps.step.verify,
                   "details": list(ps.details)} for ps in plan.steps],
    }


def _run_as_json(run_as: RunAs | None) -> dict[str, Any] | None:
    if run_as is None:
        return None
    creds = run_as.creds
    return {"uid": creds.uid if creds else None, "gid": creds.gid if creds else None,
            "groups": list(creds.groups) if creds else None, "source": run_as.source, "problem": run_as.problem}
