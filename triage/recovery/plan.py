"""The recovery plan: a runbook made concrete for one incident, before anything is done.

Every step gets the exact details a reviewer needs — which PIDs (and how they will be confirmed),
which signals, the old and new launch arguments and their diff, the environment, the URLs probed
and every timeout. Building a plan has no side effects: `triage recover` without `--execute`
prints it and writes nothing.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..evidence.kinds import Kind
from ..model import EvidenceSet, Verdict
from .fill import min_free_share, render_runbook
from .privileges import RunAs, relaunch_env, run_uid
from .runbooks import Runbook, RunbookStep
from .trust import FLAG, BundleCommand, bundle_commands

if TYPE_CHECKING:
    from .prepare import Prepared

_URL = re.compile(r"https?://[\w.\-\[\]:]+")


@dataclass(frozen=True)
class PidCandidate:
    pid: int
    role: str            # "APIServer", "EngineCore_DP0", "VLLM::Worker_TP0", ...
    source: str          # where it was seen (source:line) or how it was confirmed
    status: str                            # confirmed | refused: why | not running


@dataclass(frozen=True)
class PlannedStep:
    number: int
    step: RunbookStep
    details: tuple[str, ...]


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


def build_plan(verdict: Verdict, runbook: Runbook, prepared: "Prepared",
               driver: str | None = None, deployment: str | None = None) -> Plan:
    """The runbook made concrete: the confirmed PIDs (live /proc reads in `prepared`), the launch
    line with the verdict's changes, every detail of every step."""
    runbook = render_runbook(runbook, verdict)          # the verdict's values in every step text
    plan = Plan(runbook=runbook, verdict=verdict, driver=driver, deployment=deployment)
    from ..advice import launch_changes

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
        plan.steps.append(PlannedStep(number, step, tuple(_details(step, plan))))
    return plan


def _env_dropped(prepared: "Prepared") -> list[str]:
    """The code-loading variables the process driver's relaunch would not carry, and why."""
    spec = prepared.launch
    if spec is None:
        return []
    base, base_uid = (spec.base_env, spec.base_env_uid) if spec.base_env is not None else (dict(os.environ), os.geteuid())
    _, dropped = relaunch_env(base, base_uid, spec.env, spec.bundle_env, run_uid(prepared.run_as))
    return [f"{d.name}: {d.why}" for d in dropped]


def server_url(evidence: EvidenceSet) -> str | None:
    """The server's base URL as its own start-up line printed it (0.0.0.0 means loopback here)."""
    for rec in reversed(evidence.of(Kind.STARTUP_COMPLETE)):
        m = _URL.search(rec.text)
        if m:
            return m.group(0).replace("0.0.0.0", "127.0.0.1")
    return None


def _details(step: RunbookStep, plan: Plan) -> list[str]:
    p = step.params
    url = plan.server_url or "<server URL: give --url>"
    if step.action == "drain":
        return [f"poll {url}/metrics every {p.get('poll_s', 2)} s until vllm:num_requests_running is 0 "
                f"(at most {p.get('max_wait_s', 120)} s; a dead engine counts as drained)"]
    if step.action == "stop_server":
        confirmed = [c for c in plan.pids if c.status == "confirmed"]
        others = [c for c in plan.pids if c.status != "confirmed"]
        lines = [f"signal: {c.pid} {c.role} ({c.source})" for c in confirmed]
        lines += [f"leave:  {c.pid} {c.role} ({c.source}): {c.status}" for c in others]
        if not plan.pids:
            lines = ["PIDs: none named in the evidence (give --pid; only confirmed PIDs are ever signalled)"]
        return [*lines,
                "before any signal: re-read each PID's command line and start time; a mismatch aborts (PID reuse)",
                f"SIGTERM the whole process tree (API server, engine core, workers), wait {p.get('grace_s', 30)} s, "
                "then SIGKILL what is left",
                "then check with NVML that the memory came back"]
    if step.action == "check_gpu_free":
        return _gpu_free_details(step, plan)
    if step.action == "gpu_reset":
        return ["nvidia-smi --gpu-reset -i <GPU> — only with --allow-gpu-reset, as root, and only when NVML "
                "lists no process on that GPU; refused otherwise"]
    if step.action in ("restart", "rollback"):
        return _restart_details(step, plan)
    if step.action == "wait_healthy":
        where = f"{url} (or the URL a relaunch announces in its log)" if plan.server_url else \
            "the URL the relaunch announces in its log (or --url)"
        return [f"GET /health at {where}, {p.get('retries', 60)} tries, backoff {p.get('backoff_s', 2)} s, growing",
                f"then POST /v1/completions with max_tokens=1; it must answer within "
                f"{p.get('completion_deadline_s', 60)} s (a /health 200 alone does not prove the engine serves)"]
    if step.action == "verify":
        return [f"for {p.get('window_s', 60)} s: vllm KV-cache usage <= {p.get('max_kv_usage', 0.95):.0%}, "
                f"GPU memory <= {p.get('max_gpu_share', 0.97):.0%} of the card (NVML)"]
    if step.action == "manual":
        return [str(p.get("instruction")), "the operator confirms before the plan goes on"]
    return []


def _gpu_free_details(step: RunbookStep, plan: Plan) -> list[str]:
    """The free share the check requires, where it comes from, and what the verdict says must go."""
    share, why, strict = min_free_share(step.params, plan.verdict)
    out = [f"NVML: at least {share:.0%} of the GPU free ({why})"
           + (", and no compute process on it" if strict else "; other processes may stay if that much is free")]
    blocking = next((r for r in plan.verdict.recommendations if r.manual and r.setting == "other_gpu_processes"), None)
    if blocking is not None:
        out.append(f"first, by hand: stop {blocking.from_value} (not this server's, so recovery will not); "
                   "until then this check fails")
    return out


def _restart_details(step: RunbookStep, plan: Plan) -> list[str]:
    driver = plan.driver or step.params.get("driver", "process")
    out = [f"driver: {driver}"]
    if driver == "kubectl":
        return out + _kubectl_details(step, plan)
    from_bundle = next((b for b in plan.bundle if b.step == step.id), None)
    if step.action == "rollback":
        if from_bundle is None:
            return out + ["no known-good launch: the records of actions.jsonl this host's key authenticates hold "
                          "no launch that served"]
        return out + [f"from:    {from_bundle.source}", *from_bundle.lines(), *_identity_details(driver, plan),
                      *_confirm_details(from_bundle)]
    env = {**plan.env, **{str(k): str(v) for k, v in (step.params.get("env") or {}).items()}}
    if plan.launch_source:
        out.append(f"from:    {plan.launch_source}")
    if plan.current_argv:
        out.append("current: " + shlex.join(plan.current_argv))
    if plan.new_argv:
        out.append("new:     " + shlex.join(plan.new_argv))
    elif not plan.current_argv:
        out.append("launch command: not in the evidence (attach the command or vLLM's 'non-default args' line)")
    for setting, old, new in plan.diff:
        out.append(f"change:  {setting}: {old} -> {new}")
    for key, value in env.items():
        out.append(f"env:     {key}={value}")
    if from_bundle is not None:
        out.append(from_bundle.lines()[-1])              # its working directory
    out += _identity_details(driver, plan)
    if driver == "process":
        out.append("output:  INCIDENT/recovery/relaunch-<UTC time>.log; new session, PID and start time recorded")
    elif driver == "systemctl":
        out.append("drop-in ExecStart/Environment beside the unit (--unit), daemon-reload, restart, is-active")
    if from_bundle is not None:
        out += _confirm_details(from_bundle)
    return out


def _identity_details(driver: str, plan: Plan) -> list[str]:
    if driver == "systemctl":
        return ["runs as: the unit's own User= (systemd starts it; not changed here); variables from the bundle "
                "that change which code runs are not written into the drop-in"]
    run_as = plan.run_as
    if run_as is None:
        return []
    if run_as.problem:
        return [f"runs as: REFUSED: {run_as.problem}"]
    who = f"{run_as.creds.describe()} — {run_as.source}" if run_as.creds else run_as.source
    return [f"runs as: {who}", *(f"dropped: {line}" for line in plan.env_dropped)]


def _confirm_details(cmd: BundleCommand) -> list[str]:
    return [f"confirm: this command comes from the incident bundle, so --yes does not confirm it: --execute shows "
            f"it at a prompt, or give {FLAG} {cmd.digest}"]


def _kubectl_details(step: RunbookStep, plan: Plan) -> list[str]:
    """The kubectl argv the step runs, in order (the container args are read live, so the patch is
    described by its changes)."""
    namespace, _, name = (plan.deployment or "NAMESPACE/NAME").partition("/")
    base = ["kubectl", "-n", namespace]
    wait = base + ["rollout", "status", f"deployment/{name}", f"--timeout={int(max(1.0, step.timeout_s - 5))}s"]
    if step.action == "rollback":
        return ["run:     " + shlex.join(base + ["rollout", "undo", f"deployment/{name}"]), "run:     " + shlex.join(wait)]
    env = {**{r.setting: str(r.to_value) for r in plan.verdict.recommendations if r.env and r.to_value is not None},
           **plan.env, **{str(k): str(v) for k, v in (step.params.get("env") or {}).items()}}
    args_changes = [(s, old, new) for s, old, new in plan.diff if not any(r.setting == s and r.env
                                                                          for r in plan.verdict.recommendations)]
    out = []
    if args_changes:
        out.append("run:     " + shlex.join(base + ["get", "deployment", name, "-o", "json"]) + "   (the live args)")
    if env:
        out.append("run:     " + shlex.join(base + ["set", "env", f"deployment/{name}", *(f"{k}={v}" for k, v in env.items())]))
    if args_changes:
        out.append("run:     " + shlex.join(base + ["patch", "deployment", name, "--type=json", "-p"])
                   + " '[{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/args\", ...}]'   (the live args "
                   "with " + ", ".join(f"{s}: {old} -> {new}" for s, old, new in args_changes) + ")")
    if not env and not args_changes:
        out.append("run:     " + shlex.join(base + ["rollout", "restart", f"deployment/{name}"]))
    return out + ["run:     " + shlex.join(wait)]


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
