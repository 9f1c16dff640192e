"""What the plan shows for a restart or rollback: the exact command, where it came from, who it
runs as, and — for a command read from the incident bundle — how the operator confirms it.

The kubectl driver reads the container args live, so its lines are the kubectl argv in order
with the patch described by its changes.
"""
from __future__ import annotations

import shlex

from ..context import RunbookStep
from ..plan import Plan
from ..trust import FLAG, BundleCommand


def restart_lines(step: RunbookStep, plan: Plan, driver: str) -> list[str]:
    out = [f"driver: {driver}"]
    if driver == "kubectl":
        return out + kubectl_lines(step, plan)
    from_bundle = _bundle_command(step, plan)
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
    out += identity_lines(driver, plan)
    if driver == "process":
        out.append("output:  INCIDENT/recovery/relaunch-<UTC time>.log; new session, PID and start time recorded")
    elif driver == "systemctl":
        out.append("drop-in ExecStart/Environment beside the unit (--unit), daemon-reload, restart, is-active")
    if from_bundle is not None:
        out += confirm_lines(from_bundle)
    return out


def rollback_lines(step: RunbookStep, plan: Plan, driver: str) -> list[str]:
    out = [f"driver: {driver}"]
    if driver == "kubectl":
        return out + kubectl_lines(step, plan)
    from_bundle = _bundle_command(step, plan)
    if from_bundle is None:
        return out + ["no known-good launch: the records of actions.jsonl this host's key authenticates hold "
                      "no launch that served"]
    return out + [f"from:    {from_bundle.source}", *from_bundle.lines(), *identity_lines(driver, plan),
                  *confirm_lines(from_bundle)]


def identity_lines(driver: str, plan: Plan) -> list[str]:
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


def confirm_lines(cmd: BundleCommand) -> list[str]:
    return [f"confirm: this command comes from the incident bundle, so --yes does not confirm it: --execute shows "
            f"it at a prompt, or give {FLAG} {cmd.digest}"]


def kubectl_lines(step: RunbookStep, plan: Plan) -> list[str]:
    """The kubectl argv the step runs, in order (the container args are read live, so the patch is
    described by its changes)."""
    namespace, _, name = (plan.deployment or "NAMESPACE/NAME").partition("/")
    base = ["kubectl", "-n", namespace]
    wait = base + ["rollout", "status", f"deployment/{name}", f"--timeout={int(max(1.0, step.timeout_s - 5))}s"]
    if step.action == "rollback":
        return ["run:     " + shlex.join(base + ["rollout", "undo", f"deployment/{name}"]),
                "run:     " + shlex.join(wait)]
    recs = plan.verdict.recommendations
    env = {**{r.setting: str(r.to_value) for r in recs if r.env and r.to_value is not None},
           **plan.env, **{str(k): str(v) for k, v in (step.params.get("env") or {}).items()}}
    args_changes = [(s, old, new) for s, old, new in plan.diff
                    if not any(r.setting == s and r.env for r in recs)]
    out = []
    if args_changes:
        out.append("run:     " + shlex.join(base + ["get", "deployment", name, "-o", "json"]) + "   (the live args)")
    if env:
        out.append("run:     " + shlex.join(base + ["set", "env", f"deployment/{name}",
                                                     *(f"{k}={v}" for k, v in env.items())]))
    if args_changes:
        out.append("run:     " + shlex.join(base + ["patch", "deployment", name, "--type=json", "-p"])
                   + " '[{\"op\": \"replace\", \"path\": \"/spec/template/spec/containers/0/args\", ...}]'   (the live "
                   "args with " + ", ".join(f"{s}: {old} -> {new}" for s, old, new in args_changes) + ")")
    if not env and not args_changes:
        out.append("run:     " + shlex.join(base + ["rollout", "restart", f"deployment/{name}"]))
    return out + ["run:     " + shlex.join(wait)]


def _bundle_command(step: RunbookStep, plan: Plan) -> BundleCommand | None:
    """The command from the incident bundle this step would run (it needs the operator's confirmation)."""
    return next((b for b in plan.bundle if b.step == step.id), None)
