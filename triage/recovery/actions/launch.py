"""`restart` and `rollback`: start the server again, through one of three drivers.

* process   — the command line as an argv list (never a shell string), in a new session so it
              outlives this tool, output appended to INCIDENT/recovery/relaunch-<UTC>.log, and its
              PID + start time recorded so a later run can identify exactly this process.
* systemctl — a drop-in (ExecStart / Environment) beside the unit, daemon-reload, restart.
* kubectl   — `kubectl set env`, a JSON patch of the container args read live from the
              deployment (changed only where the verdict says), then `rollout status`.

The step succeeds when the server can be reached — its URL announced on its output or in the log
file its command line names, a port its own process tree listens on answering /health, or the
known URL answering /health — and fails as soon as the new process exits, with the tail of its log.

The process driver starts the server as the stopped server's own user (`privileges.py`): a
recovery running as root switches to its uid, gid and groups, and variables that change which
code runs are carried only from that user's own environment. systemd and Kubernetes start the
process themselves, as the unit's or the pod's user; the systemctl drop-in never gets such a
variable from the bundle.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Mapping

from ...advice import apply_changes
from ...errors import BadInput
from ...live.procs import boot_id, read_proc
from ...live.server import health
from ..context import (DRIVERS, Deadline, LaunchSpec, Outcome, RunbookStep, RunContext, failed, ok, relaunch_driver,
                       rollback_spec)
from ..plan import Plan
from ..privileges import (Creds, RunAs, bundle_env_dropped, cwd_problem, identity_problem, popen_identity,
                          relaunch_env, run_uid)
from ..signals import gone
from .base import Action, Param
from .launch_plan import restart_lines, rollback_lines
from .relaunch_find import NamedLog, listening_urls, named_log
from .relaunch_log import RelaunchLog

SYSTEMD_DIR_ENV = "TRIAGE_SYSTEMD_DIR"     # where drop-ins go (default /etc/systemd/system)
DROPIN_NAME = "50-triage-recovery.conf"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEEP: list[subprocess.Popen] = []          # relaunched servers outlive this tool; keep the handles quiet


def _env_problem(env: Mapping[Any, Any]) -> tuple[str, str] | None:
    for name, text in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name) \
                or isinstance(text, bool) or not isinstance(text, (str, int, float)):
            return str(name), "expected NAME: value (a string or number)"
    return None


# --driver, else the step's own, else the first of DRIVERS.
DRIVER = Param("driver", str, DRIVERS[0])


class _Relaunch(Action):
    """What restart and rollback share: they replace the server, through one of the DRIVERS."""

    destructive = True

    def check(self, params: Mapping[str, Any]) -> tuple[str, str] | None:
        if params.get("driver", DRIVER.default) not in DRIVERS:
            return "driver", f"expected one of {', '.join(DRIVERS)}"
        return None


class Restart(_Relaunch):
    name = "restart"
    params = (DRIVER, Param("env", dict, check=_env_problem),
              Param("log", str))             # accepted, not used: the process driver's log is always its own file

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        return restart_lines(step, plan, relaunch_driver(step, plan.driver))

    def audit_args(self, step: RunbookStep, ctx: RunContext) -> dict[str, Any]:
        spec = ctx.launch
        if spec is None:
            return {}
        return {"argv": spec.argv, "old_argv": spec.old_argv, "env": spec.env, "cwd": spec.cwd, "source": spec.source}

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        spec = ctx.launch
        env = {**(spec.env if spec else {}), **{str(k): str(v) for k, v in (step.params.get("env") or {}).items()}}
        if relaunch_driver(step, ctx.options.driver) == "kubectl":   # the container args are read live
            recs = ctx.verdict.recommendations if ctx.verdict else []
            advised = {r.setting: str(r.to_value) for r in recs if r.env and r.to_value is not None}
            return _kubectl(ctx, deadline, {**advised, **env})
        if spec is None:
            return failed("give the launch command with --launch-command '…' (or `launch: {argv: […]}` in "
                          "incident.yaml) and re-run", "no launch command: the server is not running and the "
                          "evidence has no command line")
        return _drive(step, ctx, deadline, spec, env)


class Rollback(_Relaunch):
    name = "rollback"
    params = (DRIVER,)

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        return rollback_lines(step, plan, relaunch_driver(step, plan.driver))

    def audit_args(self, step: RunbookStep, ctx: RunContext) -> dict[str, Any]:
        return {"argv": ctx.known_good, "replaces": ctx.launch.argv if ctx.launch else None}

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        if relaunch_driver(step, ctx.options.driver) == "kubectl":
            return _kubectl(ctx, deadline, {}, undo=True)   # the deployment's own history knows what served
        if not ctx.known_good:
            return failed("relaunch by hand with the command that last served",
                          "no known-good launch: actions.jsonl has no launch that passed a health check, and the "
                          "original command never served")
        return _drive(step, ctx, deadline, rollback_spec(ctx.known_good, ctx.launch), {})


restart = Restart()
rollback = Rollback()


def _drive(step: RunbookStep, ctx: RunContext, deadline: Deadline, spec: LaunchSpec, env: dict[str, str]) -> Outcome:
    if relaunch_driver(step, ctx.options.driver) == "systemctl":
        return _systemctl(ctx, deadline, spec, env)
    return _process(ctx, deadline, spec, env)


# -- process ------------------------------------------------------------------------------------

def _process(ctx: RunContext, deadline: Deadline, spec: LaunchSpec, env: dict[str, str]) -> Outcome:
    running = [p for p in ctx.identification.processes if not gone(p.info)]
    if running:
        return failed("stop the server first (its stop step), then relaunch; or stop it by hand",
                      "the server is still running: " + ", ".join(f"{p.info.pid} ({p.role})" for p in running)
                      + " — a second copy would fight it for the GPU and the port")
    if spec.cwd and not os.path.isdir(spec.cwd):
        return failed("give the command with --launch-command from the right directory, or fix launch.cwd",
                      f"the server's working directory {spec.cwd} is gone: relative paths in its command would "
                      "resolve elsewhere")
    me = Creds.mine()
    uid = run_uid(ctx.run_as, me)
    refused = identity_problem(ctx.run_as, me) or cwd_problem(spec.cwd, uid)
    if refused:                  # preflight refuses this before the first step; checked again here
        return failed("relaunch the server by hand, as its own user", refused)
    try:
        log = RelaunchLog.create(ctx)
    except BadInput as exc:
        return failed("move the planted file or folder aside (someone else may own the incident directory), "
                      "then run again", f"cannot create the relaunch log: {exc}")
    base, base_uid = (spec.base_env, spec.base_env_uid) if spec.base_env is not None else (dict(os.environ), me.uid)
    full_env, dropped = relaunch_env(base, base_uid, env, spec.bundle_env, uid)
    cwd = spec.cwd or None
    who = ctx.run_as.creds.describe() if ctx.run_as and ctx.run_as.creds else f"uid {uid} (this process's user)"
    lines = [f"argv: {shlex.join(spec.argv)}", *(f"env: {k}={v}" for k, v in env.items() if k in full_env),
             *(f"env dropped: {d.name}: {d.why}" for d in dropped), f"runs as: {who}", f"log: {log.name}"]
    # Read where it ends before the server starts: the old server's serving line is not the new one's.
    own_log_path = named_log(spec.argv, cwd)
    own_log = NamedLog(own_log_path, uid) if own_log_path is not None else None
    with log:
        try:
            proc = subprocess.Popen(spec.argv, stdin=subprocess.DEVNULL, stdout=log.fd, stderr=subprocess.STDOUT,
                                    cwd=cwd, env=full_env, start_new_session=True, close_fds=True,
                                    **popen_identity(ctx.run_as, me))
        except (OSError, subprocess.SubprocessError) as exc:
            return failed("check the command (is the program on PATH for this user?)", *lines,
                          f"cannot start {spec.argv[0]!r}: {getattr(exc, 'strerror', None) or exc}")
        _KEEP.append(proc)
        info = read_proc(proc.pid)
        launched: dict[str, Any] = {"pid": proc.pid, "start_ticks": info.start_ticks if info else None,
                                    "boot_id": boot_id(), "argv": spec.argv, "env": sorted(env), "uid": uid,
                                    **_identity_record(ctx.run_as, me), "log": log.name, "driver": "process"}
        ctx.launched.append(launched)
        lines.append(f"started pid {proc.pid} in its own session")
        if own_log is not None:
            lines.append(f"its command line sends its log to {own_log.path}")
        while True:
            code = proc.poll()
            if code is not None:
                return failed("read the relaunch log; fix the flags or roll back (runbook rollback)", *lines,
                              f"the new server exited with code {code} during start-up:", log.tail(),
                              launched=launched)
            found = _found(proc.pid, log, own_log, ctx.url)
            if found:
                ctx.url, how = found
                return ok(*lines, f"serving at {ctx.url} ({how})", launched=launched, url=ctx.url)
            if deadline.left() < 0.3:
                where = f"{log.name}" + (f" or {own_log.path}" if own_log is not None else "")
                return failed("the server is still starting or stuck: read its log; it was left running",
                              *lines, f"before the step timeout: no 'Starting vLLM API server' line in {where}, "
                              f"and no port pid {proc.pid} listens on answered /health", log.tail(),
                              launched=launched)
            deadline.sleep(0.2)


def _found(pid: int, log: RelaunchLog, own_log: NamedLog | None, known: str | None) -> tuple[str, str] | None:
    """(URL, how it was found) once the relaunched server can be reached, else None: its stdout,
    the log file its command line names, a port its own process tree listens on that answers
    /health, or the URL it served at before."""
    url = log.announced_url()
    if url:
        return url, "from the relaunch log"
    url = own_log.announced_url() if own_log is not None else None
    if url:
        return url, f"from its log, {own_log.path}"
    for url in listening_urls(pid):
        if health(url, 1.0).ok:
            return url, f"pid {pid} listens there and /health answers 200"
    if known and health(known, 1.0).ok:
        return known, f"{known}/health answers 200"
    return None


def _identity_record(run_as: RunAs | None, me: Creds) -> dict[str, Any]:
    """Who the relaunched server runs as, in full: a later run that finds it dead relaunches it as
    exactly this user (never as root by default), and only when this record is authenticated."""
    creds = run_as.creds if run_as and run_as.creds else me
    return {"gid": creds.gid, "groups": list(creds.groups)}


# -- systemctl ----------------------------------------------------------------------------------

def systemd_dropin(unit: str) -> Path:
    return Path(os.environ.get(SYSTEMD_DIR_ENV, "/etc/systemd/system")) / f"{unit}.d" / DROPIN_NAME


def dropin_text(spec: LaunchSpec, env: dict[str, str]) -> str:
    out = ["# written by triage recover: the verdict's launch changes; delete to undo", "[Service]"]
    out += [f'Environment="{k}={v}"' for k, v in env.items()]
    out += ["ExecStart=", "ExecStart=" + shlex.join(spec.argv)]
    return "\n".join(out) + "\n"


def _systemctl(ctx: RunContext, deadline: Deadline, spec: LaunchSpec, env: dict[str, str]) -> Outcome:
    unit = ctx.options.unit
    if not unit:
        return failed("give the unit with --unit NAME", "the systemctl driver needs the unit name")
    dropin = systemd_dropin(unit)
    lines = [f"drop-in: {dropin}"]
    withheld = bundle_env_dropped(env, spec.bundle_env)
    if withheld:                 # the unit may run as root: code-loading variables from the bundle stay out
        env = {k: v for k, v in env.items() if k not in withheld}
        lines.append("not written (from the incident bundle, and they change which code runs): " + ", ".join(withheld))
    try:
        dropin.parent.mkdir(parents=True, exist_ok=True)
        tmp = dropin.with_suffix(".tmp")
        tmp.write_text(dropin_text(spec, env), encoding="utf-8")
        os.replace(tmp, dropin)
    except OSError as exc:
        return failed("run as root, or edit the unit by hand", *lines, f"cannot write the drop-in: {exc.strerror or exc}")
    for argv in (["systemctl", "daemon-reload"], ["systemctl", "restart", unit], ["systemctl", "is-active", unit]):
        done = _run(argv, deadline)
        lines.append(done[1])
        if not done[0]:
            return failed(f"see `journalctl -u {unit}`", *lines, dropin=str(dropin))
    return ok(*lines, dropin=str(dropin), launched={"driver": "systemctl", "unit": unit, "argv": spec.argv})


# -- kubectl ------------------------------------------------------------------------------------

def kubectl_commands(namespace: str, name: str, env: dict[str, str], new_args: list[str] | None,
                     timeout_s: float) -> list[list[str]]:
    """The argv lists the kubectl driver runs, in order (also printed by the dry run)."""
    base = ["kubectl", "-n", namespace]
    cmds: list[list[str]] = []
    if env:
        cmds.append(base + ["set", "env", f"deployment/{name}", *(f"{k}={v}" for k, v in env.items())])
    if new_args is not None:
        patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": new_args}]
        cmds.append(base + ["patch", "deployment", name, "--type=json", "-p", json.dumps(patch)])
    if not cmds:
        cmds.append(base + ["rollout", "restart", f"deployment/{name}"])
    cmds.append(base + ["rollout", "status", f"deployment/{name}", f"--timeout={int(timeout_s)}s"])
    return cmds


def _kubectl(ctx: RunContext, deadline: Deadline, env: dict[str, str], undo: bool = False) -> Outcome:
    target = ctx.options.deployment
    namespace, _, name = (target or "").partition("/")
    if not namespace or not name or "/" in name:
        return failed("give the deployment with --deployment NAMESPACE/NAME", "the kubectl driver needs the deployment")
    lines: list[str] = []
    if undo:
        base = ["kubectl", "-n", namespace]
        wait = f"--timeout={int(max(1.0, deadline.left() - 5))}s"
        for argv in (base + ["rollout", "undo", f"deployment/{name}"],
                     base + ["rollout", "status", f"deployment/{name}", wait]):
            done = _run(argv, deadline)
            lines.append(done[1])
            if not done[0]:
                return failed(f"see `kubectl -n {namespace} rollout history deployment/{name}`", *lines)
        return ok(*lines, launched={"driver": "kubectl", "deployment": target, "undo": True})
    new_args = None
    recs = [r for r in (ctx.verdict.recommendations if ctx.verdict else []) if not r.env and r.to_value is not None]
    if recs:
        got = _run(["kubectl", "-n", namespace, "get", "deployment", name, "-o", "json"], deadline, keep_output=True)
        if not got[0]:
            return failed("check kubectl access to the deployment", got[1])
        current = _container_args(got[2])
        if current is None:
            return failed("patch the container args by hand", "the deployment's first container has no args to change")
        facts = ctx.verdict.facts
        new_args, _ = apply_changes(current, recs, str(facts.get("engine") or "vllm"), facts.get("engine_version"),
                                    facts.get("engine_mode"))
        lines.append(f"container args: {shlex.join(current)} -> {shlex.join(new_args)}")
    for argv in kubectl_commands(namespace, name, env, new_args, max(1.0, deadline.left() - 5)):
        done = _run(argv, deadline)
        lines.append(done[1])
        if not done[0]:
            return failed(f"see `kubectl -n {namespace} describe deployment {name}`", *lines)
    return ok(*lines, launched={"driver": "kubectl", "deployment": target, "args": new_args, "env": sorted(env)})


def _container_args(text: str) -> list[str] | None:
    try:
        containers = json.loads(text)["spec"]["template"]["spec"]["containers"]
        args = containers[0].get("args")
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return [str(a) for a in args] if isinstance(args, list) else None


def _run(argv: list[str], deadline: Deadline, keep_output: bool = False) -> tuple[bool, str, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=max(1.0, deadline.left()))
    except FileNotFoundError:
        return False, f"{argv[0]}: not found on PATH", ""
    except subprocess.TimeoutExpired:
        return False, f"{shlex.join(argv)}: no answer before the step timeout", ""
    said = (done.stdout if not keep_output else "") + done.stderr
    line = f"{shlex.join(argv)} -> exit {done.returncode}" + (f": {said.strip()[-300:]}" if said.strip() else "")
    return done.returncode == 0, line, done.stdout

