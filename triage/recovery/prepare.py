"""Everything recovery needs to know before it acts, read without changing anything.

* the server's processes, identified and confirmed (`identify.py`) from the evidence, `--pid`
  and the servers earlier runs relaunched (recorded in actions.jsonl with their start time);
* how to launch it again: the running server's own command line, cwd and environment when it
  is still there, else the command an earlier run recorded, `launch:` in incident.yaml, the
  command line `triage collect` captured from the live server (`process:` in incident.yaml), or
  the command line in the logs — with the verdict's changes applied and nothing else;
* the URL to probe, the model name, and the last launch that served (for rollback);
* who the relaunch runs as: the server's own uid, gid and groups (`privileges.py`).

Only the records of actions.jsonl that this host's key authenticates are read (`audit.py`):
anyone who can write the bundle can append the others. Where a command comes from is kept
(`LaunchSpec.origin`): one read from the bundle runs only once confirmed (`trust.py`).

Reading /proc is the only thing done here, so the dry run shows the same PIDs the execution
will act on.
"""
from __future__ import annotations

import os
import re
import shlex
import socket
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..advice import apply_changes
from ..bundle import read_incident
from ..errors import BadInput
from ..live.procs import boot_id, read_cwd, read_environ
from ..model import EvidenceSet, Verdict
from ..redact import MASK as MASK_MARK
from .captured import Captured, captured_launch
from .context import BUNDLE, FLAG, LIVE, LaunchSpec, Prepared
from ..classes import registry
from .identify import (Candidate, Identification, ServerProcess, candidates_from_evidence, identify,
                       scope_to_verdict, server_url, source_file)
from .privileges import identity_without_server, read_creds, server_identity

_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RUNTIME_CLASSES = tuple(m.SPEC.id for m in registry().runtime())


def prepare(incident: Path, verdict: Verdict, evidence: EvidenceSet, records: list[dict[str, Any]], *,
            pids: tuple[int, ...] = (), url: str | None = None, launch_command: str | None = None,
            in_pod: bool = False, untrusted: list[dict[str, Any]] | None = None) -> Prepared:
    """`records`: the actions.jsonl records this host's key authenticates; `untrusted`: the others,
    read only to say in the plan what was ignored."""
    notes: list[str] = untrusted_notes(untrusted or [])
    model = _model(verdict)
    records = this_host(records, notes)
    relaunched = _relaunched(records)
    # Only the failing server's own log names candidates: PIDs of a replica's log are refused.
    logged, elsewhere = scope_to_verdict(candidates_from_evidence(evidence), verdict, evidence, notes)
    logged = _this_host(logged, notes)
    if in_pod and logged:
        # The server runs in a pod: the PIDs its log prints are numbers in the pod's own PID namespace,
        # and the same numbers here name other processes (another replica of the same model, even).
        notes.append(f"the relaunch driver is kubectl: the {len(logged)} PID(s) in the logs are the pod's own "
                     "(another PID namespace) and are not looked up here; give --pid for a process on this host")
        logged = []
    logged = with_log_owners(logged, incident)
    cands = [Candidate(p, "--pid", "--pid") for p in pids] + logged
    cands += [Candidate(int(r["pid"]), "relaunched server", f"actions.jsonl:{r['seq']}", None, int(r["start_ticks"]))
              for r in relaunched if r.get("pid") and r.get("start_ticks") is not None]
    cands += _gpu_candidates(notes)
    ident = identify(cands, model, [tuple(r["argv"]) for r in relaunched if r.get("argv")],
                     port=_port(url or server_url(evidence)))
    ident.refuse([] if in_pod else elsewhere)      # in a pod, log PIDs are another namespace's numbers
    launch = _launch_spec(incident, verdict, ident, records, launch_command, notes)
    if launch is not None:
        notes += [f"cannot relaunch: {why}" for why in launch.missing]
    if launch is not None and launch.base_env is None and not in_pod and not launch.source.startswith("the running"):
        watch = ("CUDA_VISIBLE_DEVICES", "HF_HOME", "HF_TOKEN")
        keys = ", ".join(k for k in watch if k in os.environ) or "none of " + ", ".join(watch)
        notes.append(f"the server is not running, so its own environment cannot be read: the relaunch gets this "
                     f"shell's environment (here: {keys}) plus the changes shown; put what it needs in incident.yaml "
                     "launch.env or before the command in --launch-command")
    found_url = url or _relaunch_url(records) or server_url(evidence)
    run_as = server_identity((p.info.pid for p in ident.processes), identity_without_server(records, incident))
    return Prepared(model, found_url, ident, launch, _known_good(verdict, records, launch), notes, run_as)


def untrusted_notes(untrusted: list[dict[str, Any]]) -> list[str]:
    """What the plan says about records this host's key does not authenticate: how many, and every
    PID such a record would have named as a server an earlier run relaunched."""
    if not untrusted:
        return []
    notes = [f"{len(untrusted)} record(s) in actions.jsonl are not authenticated by this host's key: ignored "
             "(not used to find PIDs, launches that served or where to resume); `triage audit verify` lists them"]
    for rec in untrusted:
        launched = (rec.get("data") or {}).get("launched") if isinstance(rec.get("data"), dict) else None
        if isinstance(launched, dict) and launched.get("pid"):
            notes.append(f"actions.jsonl record {rec.get('seq')} names pid {launched.get('pid')} as a server an "
                         "earlier run relaunched, but it is not authenticated by this host's key: that PID is not "
                         "a candidate")
    return notes


def with_log_owners(cands: list[Candidate], incident: Path) -> list[Candidate]:
    """Each log candidate with the uids its log may name: the owner of the log file (a planted
    symlink counts as its planter's) and the owner of the incident directory. A log only root
    could have written (root's, writable by no one else) may name any process: root chose it."""
    try:
        dir_owner = {os.stat(incident, follow_symlinks=False).st_uid}
    except OSError:
        dir_owner = set()
    out = []
    for cand in cands:
        if not cand.from_log:
            out.append(cand)
            continue
        name = source_file(cand)
        owners: set[int] | None = set(dir_owner)
        for path in (incident / name, Path(name)):
            try:
                st = os.stat(path, follow_symlinks=False)
            except (OSError, ValueError):
                continue
            if st.st_uid == 0 and stat.S_ISREG(st.st_mode) and not st.st_mode & 0o022 and st.st_nlink == 1:
                owners = None
            else:
                owners.add(st.st_uid)
            break
        out.append(replace(cand, owners=None if owners is None else frozenset(owners)))
    return out


def _port(url: str | None) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port if url else None
    except ValueError:
        return None


def _this_host(cands: list[Candidate], notes: list[str], host: str | None = None) -> list[Candidate]:
    """A fleet bundle holds logs of several hosts, and their PIDs mean nothing here: keep the PIDs
    of the file named after this host when there is one (logs/gpu-node-07.log on gpu-node-07)."""
    files = {c.source.rsplit(":", 1)[0] for c in cands}
    if len(files) < 2:
        return cands
    host = (host or socket.gethostname()).split(".")[0].lower()
    mine = {f for f in files if host and host in Path(f).name.lower()}
    if mine:
        return [c for c in cands if c.source.rsplit(":", 1)[0] in mine]
    notes.append(f"PIDs come from {len(files)} files (several hosts?): each is still confirmed against this "
                 "host's processes; give --pid to name the server exactly")
    return cands


def _gpu_candidates(notes: list[str]) -> list[Candidate]:
    """Processes NVML sees on the GPUs now: candidates like the rest, confirmed only if they run the model."""
    from ..live.nvml import NoNvml, read_gpus

    gpus = read_gpus()
    if isinstance(gpus, NoNvml):
        notes.append(f"live GPU processes not listed: {gpus}")
        return []
    return [Candidate(pid, "GPU process", f"NVML GPU {g.index}", weak=True) for g in gpus for pid in g.pids]


def _model(verdict: Verdict) -> str | None:
    args = verdict.facts.get("launch_args") or {}
    for key in ("model", "model_tag", "model_path", "model_id"):
        if args.get(key):
            return str(args[key])
    return None


def this_host(records: list[dict[str, Any]], notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The audit records written on this host. An incident directory may be shared (a fleet bundle on
    NFS): another host's PIDs, URLs, launches and unfinished runs mean nothing here."""
    host = socket.gethostname()
    mine = [r for r in records if r.get("host") in (None, host)]
    if notes is not None and len(mine) < len(records):
        notes.append(f"actions.jsonl: {len(records) - len(mine)} record(s) written on other hosts are ignored here")
    return mine


def _relaunched(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Servers earlier runs started with the process driver, since the last boot: pid, start_ticks,
    argv, seq. (A PID and start time in clock ticks are unique only until the host reboots.)"""
    boot = boot_id()
    out = []
    for rec in records:
        launched = (rec.get("data") or {}).get("launched") if rec.get("phase") == "end" else None
        if isinstance(launched, dict) and launched.get("driver") == "process":
            if launched.get("boot_id") and boot and launched["boot_id"] != boot:
                continue
            out.append({**launched, "seq": rec.get("seq")})
    return out


def _relaunch_url(records: list[dict[str, Any]]) -> str | None:
    for rec in reversed(records):
        data = rec.get("data") or {}
        if rec.get("phase") == "end" and rec.get("result") == "ok" and data.get("url"):
            return str(data["url"])
    return None


def _launch_spec(incident: Path, verdict: Verdict, ident: Identification, records: list[dict[str, Any]],
                 launch_command: str | None, notes: list[str]) -> LaunchSpec | None:
    base_env: dict[str, str] | None = None
    cwd: str | None = None
    old: list[str] | None = None
    env: dict[str, str] = {}
    base_uid: int | None = None
    missing: list[str] = []
    origin = BUNDLE
    if launch_command:
        old, env = _split_command(launch_command)
        source, origin = "--launch-command", FLAG
    elif (server := _server_root(ident)) is not None:
        old, source = list(server.info.cmdline), f"the running {server.role} pid {server.info.pid}"
        origin = LIVE
        cwd, base_env = read_cwd(server.info.pid), _environ(server.info.pid)
        creds = read_creds(server.info.pid)
        base_uid = None if isinstance(creds, str) else creds.uid
        if base_env is None or cwd is None:
            notes.append(f"cannot read the {'environment' if base_env is None else 'working directory'} of pid "
                         f"{server.info.pid} (another user's process?): the relaunch would get this shell's "
                         "instead; run triage as the server's user or root")
    elif (recorded := _recorded_launch(records)) is not None:
        old, source = recorded["old_argv"], f"actions.jsonl:{recorded['seq']} (the command before the last relaunch)"
        cwd = recorded.get("cwd")
    elif (yaml_launch := _incident_launch(incident, notes)) is not None and yaml_launch[0]:
        old, env, cwd = yaml_launch
        source = "incident.yaml launch"
    elif isinstance(captured := _captured(incident, verdict, notes), Captured):
        # The server's own command line, as collect read it: better than one rebuilt from the log.
        env = {**captured.env, **(yaml_launch[1] if yaml_launch is not None else {})}
        cwd = yaml_launch[2] if yaml_launch is not None else None
        old, env, missing = fill_secrets(captured.argv, env, captured.needs)
        source = captured.source
    elif verdict.facts.get("argv"):
        old = [str(a) for a in verdict.facts["argv"]]
        launch_fact = verdict.facts.get("launch") or {}
        source = f"the launch in the logs ({launch_fact.get('source') or 'command line'})"
        if yaml_launch is not None:          # incident.yaml gives only launch.env (the secrets the log masked)
            env, cwd = yaml_launch[1], yaml_launch[2]
        old, env, missing = fill_secrets(old, env, launch_fact.get("needs") or [])
    else:
        return None
    facts = verdict.facts
    new, rec_env = apply_changes(old, verdict.recommendations, str(facts.get("engine") or "vllm"),
                                 facts.get("engine_version"), facts.get("engine_mode"))
    from_bundle = tuple(k for k in env if k not in rec_env) if origin == BUNDLE else ()
    return LaunchSpec(new, {**env, **rec_env}, cwd, base_env, source, old, origin=origin, bundle_env=from_bundle,
                      base_env_uid=base_uid, missing=tuple(missing))


def _captured(incident: Path, verdict: Verdict, notes: list[str]) -> Captured | None:
    try:
        data, _ = read_incident(incident)
    except BadInput:
        return None                       # _incident_launch has said why already
    found = captured_launch(data, str(verdict.facts.get("engine") or "vllm"))
    if isinstance(found, str):
        notes.append(f"{found}: the relaunch command comes from the logs (or give --launch-command)")
        return None
    return found


def fill_secrets(argv: list[str], env: dict[str, str], needs: list[dict[str, Any]]
                 ) -> tuple[list[str], dict[str, str], list[str]]:
    """A secret the log masked comes from launch.env (the variable the engine reads it from) or
    from this shell's environment; the placeholder flag is then dropped from argv. What is still
    missing is returned as a sentence each: the relaunch is refused before step 1 with it."""
    missing: list[str] = []
    argv = list(argv)
    for need in needs:
        flag, var = str(need.get("flag")), need.get("env")
        if var and (var in env or var in os.environ):
            if var not in env:
                env = {**env, var: os.environ[var]}
            argv = _without_flag(argv, flag)
            continue
        what = "the API key" if need.get("arg") == "api_key" else f"the value of {flag}"
        missing.append(f"{what} is not in the evidence (the log masks it): {need.get('how')}")
    return argv, env, missing


def _without_flag(argv: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok == flag:
            skip = True
            continue
        if tok.startswith(flag + "="):
            continue
        out.append(tok)
    return out


def _server_root(ident: Identification) -> ServerProcess | None:
    """The process whose command line relaunches the server: the API server, not an engine or worker."""
    roots = [p for p in ident.processes if "incident's model" in p.why or "launched by this tool" in p.why]
    for proc in roots:
        if "APIServer" in proc.role or proc.role in ("--pid", "relaunched server"):
            return proc
    return next((p for p in roots if not any(w in p.role for w in ("Worker", "EngineCore", "GPU process"))), None)


def _recorded_launch(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    for rec in reversed(records):
        args = rec.get("args") or {}
        if rec.get("phase") == "start" and rec.get("action") == "restart" and isinstance(args.get("old_argv"), list):
            if any(MASK_MARK in str(a) for a in args["old_argv"]):
                return None        # secrets were masked in the log: that command cannot be run again
            return {"old_argv": [str(a) for a in args["old_argv"]], "cwd": args.get("cwd"), "seq": rec.get("seq")}
    return None


def _incident_launch(incident: Path, notes: list[str] | None = None
                     ) -> tuple[list[str], dict[str, str], str | None] | None:
    try:
        data, path = read_incident(incident)
    except BadInput as exc:      # a typo in incident.yaml must not cost the plan: the other sources decide
        if notes is not None:
            notes.append(f"could not read {exc.path} for its launch: ({exc.problem}); the relaunch command "
                         "comes from the other sources (or give --launch-command)")
        return None
    launch = data.get("launch")
    if launch is None:
        return None
    if isinstance(launch, dict) and set(launch) - {"argv", "env", "cwd"}:
        raise BadInput(str(path), f"launch.{sorted(map(str, set(launch) - {'argv', 'env', 'cwd'}))[0]}: unknown key "
                                  "(allowed: argv, env, cwd)")
    argv = launch.get("argv") if isinstance(launch, dict) else None
    # launch.env alone is allowed: the secrets a rebuilt command needs (VLLM_API_KEY), argv from the logs.
    env_only = isinstance(launch, dict) and argv is None and "env" in launch
    if not env_only and (not isinstance(argv, list) or not argv
                         or not all(isinstance(a, (str, int, float)) for a in argv)):
        raise BadInput(str(path), "launch.argv must be a non-empty list of strings (or give launch.env alone)")
    env = launch.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and _ENV_NAME.match(k) and not isinstance(v, bool)
                                            and isinstance(v, (str, int, float)) for k, v in env.items()):
        raise BadInput(str(path), "launch.env must be a mapping of NAME: value (strings or numbers)")
    cwd = launch.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
        raise BadInput(str(path), "launch.cwd must be an absolute directory path")
    return [str(a) for a in argv or ()], {str(k): str(v) for k, v in env.items()}, cwd or None


def _known_good(verdict: Verdict, records: list[dict[str, Any]], launch: LaunchSpec | None) -> list[str] | None:
    """The last launch that served a real completion, other than the one a rollback replaces;
    else the command from before the first relaunch, if the server had been serving with it."""
    launches = [r["args"] for r in records if r.get("phase") == "start" and r.get("action") == "restart"
                and isinstance((r.get("args") or {}).get("argv"), list)]
    replaced = launches[-1]["argv"] if launches else None
    served: list[list[Any]] = []
    last_launch: list[Any] | None = None
    for rec in records:
        args = rec.get("args") or {}
        if rec.get("phase") == "start" and rec.get("action") in ("restart", "rollback") \
                and isinstance(args.get("argv"), list):
            last_launch = args["argv"]
        if rec.get("action") == "wait_healthy" and rec.get("phase") == "end" and rec.get("result") == "ok":
            # A resumed run did not start the server it waited for: the launch before it did.
            argv = (rec.get("data") or {}).get("serving_argv") or last_launch
            if isinstance(argv, list):
                served.append(argv)
    for argv in reversed(served):
        if argv != replaced and not any(MASK_MARK in str(a) for a in argv):
            return [str(a) for a in argv]
    if verdict.oom_class not in RUNTIME_CLASSES:
        return None                      # a start-up failure never served with its original command
    original = launches[0].get("old_argv") if launches else (launch.old_argv if launch else None)
    if isinstance(original, list) and original and not any(MASK_MARK in str(a) for a in original):
        return [str(a) for a in original]
    return None


def _split_command(command: str) -> tuple[list[str], dict[str, str]]:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise BadInput("--launch-command", f"cannot split the command: {exc}") from None
    env: dict[str, str] = {}
    while words and _ENV_WORD.match(words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words:
        raise BadInput("--launch-command", "no program in the command")
    return words, env


def _environ(pid: int) -> dict[str, str] | None:
    try:
        return read_environ(pid)
    except OSError:
        return None
