"""The bundle is input, not authority; a relaunch never gains privileges.

* actions.jsonl records carry an HMAC made with a host-local key: forged records (chain
  recomputed, MAC missing, guessed or copied from another incident) are reported by
  `triage audit verify` and never select a PID, a known-good launch or a resume point.
* a command read from the bundle (incident.yaml `launch:`, the logs, actions.jsonl) runs only
  once the operator confirmed it: at a prompt that shows it, or by the digest the plan prints.
* a relaunch runs as the stopped server's own uid, gid and groups, and code-loading variables
  travel only within one user.

Real processes and files throughout; the tests that need another user run only as root.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from triage.cli import main
from triage.errors import TriageError
from triage.live.procs import boot_id, read_proc
from triage.recovery.audit import GENESIS, AuditLog, canonical, mac_input, record_hash, sha256, verify
from triage.recovery.context import ExecOptions
from triage.recovery.hostkey import AuditKeyError, HostKey, default_key_path, load_key
from triage.recovery.privileges import (Creds, RunAs, cwd_problem, identity_problem, read_creds, relaunch_env,
                                        server_identity)

from .conftest import ROOT, sample
from .simkit import MODEL, alive, get, kill_group, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="recovery reads /proc")

IS_ROOT = os.geteuid() == 0
NOBODY = 65534
SHORT = ("--param", "steady.window_s=2")
NOWHERE = ("--url", "http://127.0.0.1:9")         # nothing answers there: no probe reaches a real server
_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")


# -- helpers ------------------------------------------------------------------------------------

def copy_sample(tmp_path: Path, name: str = "chronic-fragmentation") -> Path:
    incident = tmp_path / "INC"
    shutil.copytree(sample(name), incident)
    return incident


def triage(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env or dict(os.environ), timeout=timeout)


def lock_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "recover.lock")}


def records(incident: Path) -> list[dict[str, Any]]:
    path = incident / "actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def forge(incident: Path, *bodies: dict[str, Any], key: HostKey | None = None, key_id: str | None = None) -> None:
    """Append records the way someone who can write the bundle can: chain and hashes recomputed,
    a MAC only with `key` (a key that is not this host's) or a made-up one under `key_id`."""
    path = incident / "actions.jsonl"
    lines = path.read_bytes().splitlines() if path.exists() else []
    prev = sha256(lines[-1]) if lines else GENESIS
    seq = len(lines)
    with open(path, "ab") as fh:
        for body in bodies:
            seq += 1
            rec = {"run_id": "forged", "step": None, "args": {}, "result": None, "duration_s": None,
                   "output_tail": None, "time": "2026-11-22T07:00:00.000Z", "user": "root",
                   "host": socket.gethostname(), **body, "seq": seq, "prev": prev}
            if key is not None:
                rec["key_id"] = key.key_id
                rec["mac"] = key.mac(mac_input(incident, rec))
            elif key_id is not None:
                rec["key_id"], rec["mac"] = key_id, "0" * 64
            rec["hash"] = record_hash(rec)
            line = canonical(rec)
            fh.write(line + b"\n")
            prev = sha256(line)


def other_key(tmp_path: Path) -> HostKey:
    """Another host's key (made here, in a directory of its own)."""
    key = load_key(tmp_path / "elsewhere" / "audit.key", create=True)
    assert key is not None
    return key


def launched_record(pid: int) -> dict[str, Any]:
    info = read_proc(pid)
    assert info is not None
    return {"action": "restart", "step": "relaunch", "phase": "end", "result": "ok",
            "data": {"launched": {"pid": pid, "start_ticks": info.start_ticks, "boot_id": boot_id(),
                                  "argv": list(info.cmdline), "driver": "process"}, "url": "http://127.0.0.1:9"}}


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen]:
    """An unrelated live process: `sleep 3600`."""
    proc = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    assert wait_until(lambda: read_proc(proc.pid) is not None and read_proc(proc.pid).cmdline[:1] == ("sleep",), 5)
    yield proc
    kill_group(proc.pid)
    proc.wait(5)


# -- the host key -------------------------------------------------------------------------------

def test_the_key_is_made_on_first_write_0600_in_a_0700_directory(tmp_path, monkeypatch):
    path = tmp_path / "state" / "oom-triage" / "audit.key"
    monkeypatch.setenv("TRIAGE_KEY_FILE", str(path))
    incident = tmp_path / "inc"
    incident.mkdir()
    assert verify(incident, key=True).ok and not path.exists()      # reading never makes a key
    AuditLog(incident).append({"action": "run", "phase": "start"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert re.fullmatch(r"[0-9a-f]{64}\n", path.read_text())
    AuditLog(incident).append({"action": "run", "phase": "end", "result": "ok"})
    first, second = records(incident)
    assert first["key_id"] == second["key_id"] == load_key().key_id          # the same key, kept
    assert default_key_path() == path


def test_without_an_override_root_keeps_the_key_under_var_lib(monkeypatch):
    monkeypatch.delenv("TRIAGE_KEY_FILE")
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    expected = "/var/lib/oom-triage/audit.key" if IS_ROOT else "/xdg/oom-triage/audit.key"
    assert str(default_key_path()) == expected                  # only the path: nothing is created


def _unsafe(kind: str, path: Path) -> None:
    path.parent.mkdir(mode=0o700)
    good = "ab" * 32 + "\n"
    if kind == "group-readable":
        path.write_text(good)
        path.chmod(0o640)
    elif kind == "symlink":
        target = path.parent / "real.key"
        target.write_text(good)
        target.chmod(0o600)
        path.symlink_to(target)
    elif kind == "hard-link":
        path.write_text(good)
        path.chmod(0o600)
        os.link(path, path.parent / "second-name")
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory-symlink":
        real = path.parent.parent / "real-dir"
        real.mkdir(mode=0o700)
        path.parent.rmdir()
        path.parent.symlink_to(real)
    elif kind == "world-writable-directory":
        path.parent.chmod(0o777)
    elif kind == "other-owner":
        path.write_text(good)
        path.chmod(0o600)
        os.chown(path, NOBODY, NOBODY)


@pytest.mark.parametrize("kind, problem", [
    ("group-readable", "readable or writable by group or others"),
    ("symlink", "is a symlink"),
    ("hard-link", "has 2 links"),
    ("fifo", "not a regular file"),
    ("directory-symlink", "symlink or not a directory"),
    ("world-writable-directory", "writable by group or others"),
    pytest.param("other-owner", "owned by uid 65534",
                 marks=pytest.mark.skipif(not IS_ROOT, reason="giving a file to another user needs root")),
])
def test_an_unsafe_key_is_refused_and_nothing_is_written(tmp_path, monkeypatch, kind, problem):
    path = tmp_path / "keys" / "audit.key"
    _unsafe(kind, path)
    monkeypatch.setenv("TRIAGE_KEY_FILE", str(path))
    incident = tmp_path / "inc"
    incident.mkdir()
    with pytest.raises(AuditKeyError, match=problem):
        AuditLog(incident).append({"action": "run", "phase": "start"})
    assert not (incident / "actions.jsonl").exists()
    if kind == "symlink":
        assert (path.parent / "real.key").read_text() == "ab" * 32 + "\n"


# -- authenticated records ------------------------------------------------------------------------

def test_forged_records_keep_the_chain_intact_but_are_not_authenticated(tmp_path):
    incident = tmp_path / "inc"
    incident.mkdir()
    log = AuditLog(incident)
    log.append({"action": "run", "phase": "start", "args": {"runbook": "chronic"}})
    log.append({"action": "run", "phase": "end", "result": "ok"})
    forge(incident, {"action": "run", "phase": "start"})                               # no MAC at all
    forge(incident, {"action": "run", "phase": "start"}, key_id=load_key().key_id)      # a guessed MAC
    forge(incident, {"action": "run", "phase": "start"}, key=other_key(tmp_path))       # another host's key
    report = verify(incident, key=True)
    assert report.ok and report.records == 5                   # the chain alone proves nothing
    assert (report.authenticated, report.unauthenticated, report.other_key) == (2, 2, 1)
    assert [u.split(":")[0] for u in report.untrusted] == ["line 3", "line 4", "line 5"]
    assert "no MAC" in report.untrusted[0] and "does not verify" in report.untrusted[1]
    assert "key this host does not hold" in report.untrusted[2]
    trusted, untrusted = log.authenticated()
    assert [r["seq"] for r in trusted] == [1, 2] and [r["seq"] for r in untrusted] == [3, 4, 5]


def test_a_record_copied_from_another_incident_is_not_authenticated(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    AuditLog(first).append({"action": "run", "phase": "start"})
    shutil.copy(first / "actions.jsonl", second / "actions.jsonl")
    assert verify(first, key=True).authenticated == 1
    report = verify(second, key=True)
    assert report.ok and report.authenticated == 0 and "does not verify" in report.untrusted[0]


def test_audit_verify_reports_who_wrote_each_record_and_exits_1_for_any_it_cannot_authenticate(
        runner, tmp_path, monkeypatch):
    incident = tmp_path / "inc"
    incident.mkdir()
    with AuditLog(incident).step("stop", "stop_server", args={"pids": [4242]}):
        pass
    ok = runner.invoke(main, ["audit", "verify", str(incident)])
    assert ok.exit_code == 0 and "chain intact" in ok.stdout and "authenticated by this host" in ok.stdout
    assert re.search(r"\): 2, another host's key: 0, not authenticated: 0", ok.stdout)

    forge(incident, launched_record(os.getpid()))
    forged = runner.invoke(main, ["audit", "verify", str(incident)])
    assert forged.exit_code == 1 and "chain intact" in forged.stdout and "not authenticated: 1" in forged.stdout
    assert "line 3: carries no MAC" in forged.stderr and "recovery ignores them" in forged.stderr

    monkeypatch.setenv("TRIAGE_KEY_FILE", str(tmp_path / "another-host" / "audit.key"))
    load_key(create=True)                                      # read where another key is this host's
    elsewhere = runner.invoke(main, ["audit", "verify", str(incident)])
    assert elsewhere.exit_code == 1 and "another host's key: 2" in elsewhere.stdout


def test_a_forged_unfinished_run_is_not_resumed(tmp_path, monkeypatch):
    from triage.recovery.executor import resume_point
    from triage.recovery.session import open_session

    incident = copy_sample(tmp_path)
    forge(incident, {"action": "run", "phase": "start", "args": {"runbook": "chronic"}},
          *({"action": "x", "step": sid, "phase": "end", "result": "ok"} for sid in ("drain", "stop", "gpu-free")))
    session = open_session(str(incident))
    assert resume_point(session.audit, session.plan) == (None, [])       # every step runs again
    assert any("4 record(s) in actions.jsonl are not authenticated" in n for n in session.plan.notes)


# -- attack 1: a forged relaunch record names a live stranger ----------------------------------------

@pytest.mark.parametrize("forgery", ["no-mac", "guessed-mac", "another-key", "copied-from-another-incident"])
def test_a_forged_relaunch_record_never_gets_a_live_process_signalled(tmp_path, sleeper, forgery):
    incident = copy_sample(tmp_path)
    record = launched_record(sleeper.pid)                      # its real start ticks and boot id
    if forgery == "copied-from-another-incident":
        other = tmp_path / "other-incident"
        other.mkdir()
        AuditLog(other).append(record)                         # genuine there: this host's key...
        from triage.recovery.prepare import _relaunched
        assert [r["pid"] for r in _relaunched(AuditLog(other).authenticated()[0])] == [sleeper.pid]
        shutil.copy(other / "actions.jsonl", incident / "actions.jsonl")     # ...but bound to that directory
    elif forgery == "guessed-mac":
        forge(incident, record, key_id=load_key(create=True).key_id)     # this host's key id, a made-up MAC
    else:
        forge(incident, record, key=other_key(tmp_path) if forgery == "another-key" else None)
    env = lock_env(tmp_path)

    dry = triage("recover", str(incident), "--json", *NOWHERE, env=env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert sleeper.pid not in [p["pid"] for p in plan["pids"]]
    assert any(f"names pid {sleeper.pid}" in n and "not authenticated" in n for n in plan["notes"]), plan["notes"]

    done = triage("recover", str(incident), "--execute", "--yes", "--force", *NOWHERE, *SHORT,
                  "--param", "drain.max_wait_s=1", "--launch-command", "/nonexistent/vllm serve x", env=env)
    assert done.returncode == 1 and "cannot start '/nonexistent/vllm'" in done.stderr   # it got as far as the relaunch
    assert sleeper.poll() is None and alive(sleeper.pid)
    stop = next(r for r in records(incident) if r.get("step") == "stop" and r["phase"] == "end")
    assert stop["data"]["signalled"] == []


# -- attack 2: a forged known-good launch -------------------------------------------------------------

def served(argv: list[str]) -> tuple[dict[str, Any], ...]:
    """A launch and a health check that passed after it (what makes a command "known good"), then
    the later relaunch a rollback would replace."""
    return ({"action": "restart", "step": "relaunch", "phase": "start", "args": {"argv": argv}},
            {"action": "wait_healthy", "step": "healthy", "phase": "end", "result": "ok",
             "data": {"serving_argv": argv}},
            {"action": "restart", "step": "relaunch", "phase": "start", "args": {"argv": ["vllm", "serve", MODEL]}})


def test_a_forged_known_good_launch_is_never_run(tmp_path):
    incident = copy_sample(tmp_path)
    marker = tmp_path / "MARKER"
    forge(incident, *served(["/bin/sh", "-c", f"touch {marker}"]))
    env = lock_env(tmp_path)
    dry = triage("recover", str(incident), "--runbook", "rollback", *NOWHERE, env=env)
    assert "3 record(s) in actions.jsonl are not authenticated" in " ".join(dry.stdout.split())
    # The forged record is ignored: the rollback's known-good launch is the one the log shows the
    # server serving with (a chronic OOM served for days), never the forged /bin/sh.
    assert "touch" not in dry.stdout and "vllm serve meta-llama/Llama-3.1-8B-Instruct" in " ".join(dry.stdout.split())

    done = triage("recover", str(incident), "--runbook", "rollback", "--execute", "--yes", *NOWHERE, env=env)
    # Read from the bundle, that launch still needs its digest: --yes alone runs nothing.
    assert done.returncode == 1 and "--yes does not confirm" in done.stderr and "nothing was done" in done.stderr
    assert not marker.exists() and len(records(incident)) == 3


def test_a_known_good_launch_from_actions_jsonl_runs_only_with_its_digest(tmp_path):
    """Even a record this host wrote is read back from the bundle: its argv is shown whole, and
    --yes alone does not run it."""
    incident = copy_sample(tmp_path)
    marker = tmp_path / "MARKER"
    log = AuditLog(incident)
    for rec in served(["/bin/sh", "-c", f"touch {marker}"]):
        log.append(rec)
    env = lock_env(tmp_path)
    rollback = ("--runbook", "rollback", *NOWHERE)

    text = " ".join(triage("recover", str(incident), *rollback, env={**env, "COLUMNS": "500"}).stdout.split())
    assert f"command: /bin/sh -c 'touch {marker}'" in text and "--yes does not confirm it" in text
    (cmd,) = json.loads(triage("recover", str(incident), *rollback, "--json", env=env).stdout)["bundle_commands"]
    assert cmd["argv"] == ["/bin/sh", "-c", f"touch {marker}"] and cmd["step"] == "relaunch-known-good"
    assert re.fullmatch(r"[0-9a-f]{16}", cmd["digest"]) and cmd["digest"] in text

    refused = triage("recover", str(incident), *rollback, "--execute", "--yes", env=env)
    assert refused.returncode == 1 and "--yes does not confirm" in refused.stderr and "nothing was done" in refused.stderr
    wrong = triage("recover", str(incident), *rollback, "--execute", "--yes", "--trust-bundle-launch", "0" * 16, env=env)
    assert wrong.returncode == 1 and "no --trust-bundle-launch given matches" in wrong.stderr
    assert not marker.exists() and len(records(incident)) == 3

    triage("recover", str(incident), *rollback, "--execute", "--yes", "--trust-bundle-launch", cmd["digest"], env=env)
    assert marker.exists()                                     # the operator named that very command


# -- commands from incident.yaml and the logs ----------------------------------------------------------

def with_launch(incident: Path, launch: dict[str, Any]) -> None:
    meta = incident / "incident.yaml"
    data = yaml.safe_load(meta.read_text()) if meta.exists() else {}
    meta.write_text(yaml.safe_dump({**(data or {}), "launch": launch}))


def test_a_launch_from_incident_yaml_is_shown_masked_and_not_confirmed_by_yes(tmp_path):
    incident = copy_sample(tmp_path)
    marker = tmp_path / "MARKER"
    with_launch(incident, {"argv": ["/bin/sh", "-c", f"touch {marker}", "--api-key", "sk-live-0123456789abcdefXYZ"]})
    env = lock_env(tmp_path)
    plan = json.loads(triage("recover", str(incident), "--json", *NOWHERE, env=env).stdout)
    (cmd,) = plan["bundle_commands"]
    assert cmd["source"] == "incident.yaml launch" and cmd["argv"][:3] == ["/bin/sh", "-c", f"touch {marker}"]
    assert "sk-live-0123456789abcdefXYZ" not in json.dumps(cmd)

    done = triage("recover", str(incident), "--execute", "--yes", "--force", *NOWHERE, *SHORT, env=env)
    assert done.returncode == 1 and "incident.yaml launch" in done.stderr and "--yes does not confirm" in done.stderr
    assert not marker.exists() and not (incident / "actions.jsonl").exists()


def test_the_prompt_shows_the_whole_command_and_a_no_ends_the_run_before_any_step(tmp_path, monkeypatch):
    from triage.recovery.session import execute, open_session

    incident = copy_sample(tmp_path)
    marker = tmp_path / "MARKER"
    with_launch(incident, {"argv": ["/bin/sh", "-c", f"touch {marker}"], "env": {"A": "1"}, "cwd": "/"})
    monkeypatch.setenv("TRIAGE_LOCK_FILE", str(tmp_path / "lock"))
    said: list[str] = []
    asked: list[str] = []
    session = open_session(str(incident), url=NOWHERE[1])
    with pytest.raises(TriageError, match="declined — nothing was done"):
        execute(session, ExecOptions(confirm=lambda q: asked.append(q) or False, say=said.append, force=True))
    assert asked == ["Run this command from the bundle?"]
    assert any("incident.yaml launch" in line for line in said)
    assert f"  command: /bin/sh -c 'touch {marker}'" in said and "  env:     A=1" in said and "  cwd:     /" in said
    assert not marker.exists() and not (incident / "actions.jsonl").exists()


def test_a_command_from_the_logs_is_not_confirmed_by_yes_either(tmp_path):
    incident = copy_sample(tmp_path)                           # its launch is rebuilt from the log lines
    done = triage("recover", str(incident), "--execute", "--yes", "--force", *NOWHERE, env=lock_env(tmp_path))
    assert done.returncode == 1 and "the launch in the logs" in done.stderr and "--yes does not confirm" in done.stderr
    assert not (incident / "actions.jsonl").exists()


# -- 2: privileges ---------------------------------------------------------------------------------

def test_code_loading_variables_travel_only_within_one_user():
    base = {"PYTHONPATH": "/home/u/lib", "LD_PRELOAD": "/home/u/x.so", "HOME": "/home/u", "PATH": "/home/u/bin"}
    same, dropped = relaunch_env(base, 1000, {}, (), 1000)
    assert same == base and dropped == []                      # the user's own server, as that user
    other, dropped = relaunch_env(base, 1000, {}, (), 0)
    assert other == {"HOME": "/home/u"} and {d.name for d in dropped} == {"PYTHONPATH", "LD_PRELOAD", "PATH"}
    overrides = {"PYTHONPATH": "/tmp/evil", "LD_LIBRARY_PATH": "/tmp/evil", "PYTORCH_CUDA_ALLOC_CONF": "x"}
    root, dropped = relaunch_env({"PATH": "/usr/bin"}, 0, overrides, ("PYTHONPATH", "LD_LIBRARY_PATH"), 0)
    assert root == {"PATH": "/usr/bin", "PYTORCH_CUDA_ALLOC_CONF": "x"}
    assert all("from the incident bundle" in d.why for d in dropped)
    user, _ = relaunch_env({}, 1000, overrides, ("PYTHONPATH",), 1000)
    assert user["PYTHONPATH"] == "/tmp/evil"                   # confirmed, and it runs as that user only
    typed, _ = relaunch_env({}, 0, {"PYTHONPATH": "/opt/lib"}, (), 0)
    assert typed == {"PYTHONPATH": "/opt/lib"}                 # --launch-command 'PYTHONPATH=… cmd', typed by root


def test_who_a_relaunch_runs_as(tmp_path):
    me = Creds.mine()
    assert read_creds(os.getpid()).same(me)
    nobody = Creds(NOBODY, NOBODY, ())
    assert identity_problem(RunAs(nobody, "pid 1"), Creds(0, 0, (0,))) is None            # root switches
    refused = identity_problem(RunAs(nobody, "pid 1"), Creds(1000, 1000, (1000,)))
    assert refused and "only root can relaunch it as its own user" in refused
    assert identity_problem(RunAs(Creds(1000, 1000, (27,)), "pid 1"), Creds(1000, 1000, (1000,)))   # groups differ
    assert server_identity([]).creds is None and "no server process" in server_identity([]).source
    gone = server_identity([2 ** 22 + 7])
    assert gone.problem and "cannot tell whose server this is" in gone.problem


@pytest.mark.skipif(not IS_ROOT, reason="directories of another user need root to make")
def test_a_relaunch_as_root_never_runs_in_another_users_directory(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    assert "belongs to uid 65534" in cwd_problem(str(theirs), 0)
    assert "writable by group or others" in cwd_problem(str(shared), 0)
    assert cwd_problem(str(mine), 0) is None and cwd_problem(str(theirs), NOBODY) is None


@pytest.mark.skipif(not IS_ROOT, reason="the variables are dropped only for a relaunch as root")
def test_a_code_loading_variable_from_the_bundle_never_reaches_a_root_relaunch(tmp_path):
    incident = copy_sample(tmp_path)
    marker = tmp_path / "ENV"
    script = f'echo "[$PYTHONPATH][$LD_LIBRARY_PATH][$KEPT]" > {marker}'
    with_launch(incident, {"argv": ["/bin/sh", "-c", script],
                           "env": {"PYTHONPATH": "/tmp/evil", "LD_LIBRARY_PATH": "/tmp/evil", "KEPT": "yes"}})
    env = {k: v for k, v in lock_env(tmp_path).items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    plan = json.loads(triage("recover", str(incident), "--json", *NOWHERE, env=env).stdout)
    assert sorted(line.split(":")[0] for line in plan["env_dropped"]) == ["LD_LIBRARY_PATH", "PYTHONPATH"]
    digest = plan["bundle_commands"][0]["digest"]
    triage("recover", str(incident), "--execute", "--yes", "--force", *NOWHERE, *SHORT, "--param",
           "drain.max_wait_s=1", "--trust-bundle-launch", digest, env=env)
    assert wait_until(marker.exists, 10) and marker.read_text() == "[][][yes]\n"


# -- 2, end to end: another user's server -----------------------------------------------------------

SYSTEM_PYTHON = Path("/usr/bin/python3")
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory `nobody` can reach (pytest's tmp dirs are root's, mode 0700)."""
    if not IS_ROOT:
        pytest.skip("running a server as another user needs root")
    base = Path(tempfile.mkdtemp(prefix="triage-users-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def as_nobody_python(base: Path) -> list[str]:
    """A Python `nobody` can run with this checkout and its packages, or skip with the reason."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"{SYSTEM_PYTHON} missing: this venv's interpreter is not readable by nobody")
    probe = subprocess.run([str(SYSTEM_PYTHON), "-c", "import triage.sim.cli, triage.cli"], capture_output=True,
                           text=True, user=NOBODY, group=NOBODY, extra_groups=[], cwd=base, timeout=60,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                "PYTHONPATH": f"{ROOT}:{SITE_PACKAGES}"})
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot import this checkout with {SYSTEM_PYTHON}: {probe.stderr.strip()[-200:]}")
    return [str(SYSTEM_PYTHON)]


def start_sim(incident: Path, python: list[str], env: dict[str, str], cwd: Path, **identity: Any) -> tuple[
        subprocess.Popen, str]:
    (incident / "logs").mkdir(parents=True, exist_ok=True)
    log = incident / "logs" / "vllm.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([*python, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--scenario", "healthy"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, cwd=cwd, env=env,
                                start_new_session=True, **identity)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = _URL.search(log.read_text(errors="replace"))
        if m and get(m.group(1) + "/health") == 200:
            return proc, m.group(1)
        if proc.poll() is not None:
            pytest.fail(f"simulator exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    kill_group(proc.pid)
    pytest.fail("simulator did not start serving in time")


def status_ids(pid: int) -> tuple[str, str]:
    lines = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return lines["Uid"].split()[0], lines["Gid"].split()[0]


def test_a_server_run_as_nobody_is_relaunched_as_nobody_with_its_own_pythonpath(shared_dir, tmp_path):
    """The server runs as nobody with PYTHONPATH pointing at a directory holding a sitecustomize.py
    that records the uid of every interpreter that loads it: root must never be one of them."""
    python = as_nobody_python(shared_dir)
    site = shared_dir / "site"
    site.mkdir(mode=0o777)
    site.chmod(0o777)
    (site / "sitecustomize.py").write_text(
        "import os\nwith open(os.path.join(os.path.dirname(__file__), 'uids'), 'a') as f:\n"
        "    f.write(f'{os.getuid()} {os.geteuid()}\\n')\n")
    run = shared_dir / "run"
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    incident = shared_dir / "INC"
    server_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(run),
                  "PYTHONPATH": f"{site}:{ROOT}:{SITE_PACKAGES}"}
    proc, _ = start_sim(incident, python, server_env, run, user=NOBODY, group=NOBODY, extra_groups=[])
    relaunched: list[int] = []
    try:
        plan = json.loads(triage("recover", str(incident), "--runbook", "chronic", "--json", env=lock_env(tmp_path)).stdout)
        assert plan["run_as"]["uid"] == NOBODY and plan["bundle_commands"] == [] and plan["env_dropped"] == []
        done = triage("recover", str(incident), "--execute", "--yes", "--runbook", "chronic", "--force", *SHORT,
                      env=lock_env(tmp_path), timeout=180)
        relaunched = [r["data"]["launched"]["pid"] for r in records(incident)
                      if r["phase"] == "end" and (r.get("data") or {}).get("launched")]
        assert done.returncode == 0, done.stderr
        assert not alive(proc.pid)
        (pid,) = relaunched
        assert status_ids(pid) == (str(NOBODY), str(NOBODY))
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"PYTHONPATH={site}:{ROOT}:{SITE_PACKAGES}".encode() in environ     # carried: the same user
        uids = (site / "uids").read_text().splitlines()
        assert len(uids) >= 2 and set(uids) == {f"{NOBODY} {NOBODY}"}, uids        # never loaded by root
    finally:
        kill_group(proc.pid)
        for pid in relaunched:
            kill_group(pid)


def test_a_recovery_not_run_as_root_refuses_another_users_server(shared_dir, tmp_path):
    python = as_nobody_python(shared_dir)
    incident = shared_dir / "INC"
    incident.mkdir(mode=0o777)
    incident.chmod(0o777)                                      # the bundle lock lives there
    run = shared_dir / "run"
    run.mkdir(mode=0o777)
    run.chmod(0o777)
    keys = shared_dir / "keys"
    keys.mkdir(mode=0o700)
    os.chown(keys, NOBODY, NOBODY)
    proc, _ = start_sim(incident, [sys.executable], dict(os.environ), Path(ROOT))          # root's server
    try:
        done = subprocess.run([*python, "-m", "triage", "recover", str(incident), "--execute", "--yes", "--runbook",
                               "chronic", "--force", *SHORT], capture_output=True, text=True, timeout=120,
                              user=NOBODY, group=NOBODY, extra_groups=[], cwd=run, stdin=subprocess.DEVNULL,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(run),
                                   "PYTHONPATH": f"{ROOT}:{SITE_PACKAGES}", "TRIAGE_LOCK_FILE": str(run / "lock"),
                                   "TRIAGE_KEY_FILE": str(keys / "audit.key")})
        assert done.returncode == 1, done.stderr
        assert "only root can relaunch it as its own user" in done.stderr and "nothing was done" in done.stderr
        assert alive(proc.pid) and not (incident / "actions.jsonl").exists()
    finally:
        kill_group(proc.pid)


def test_the_timeline_names_the_steps_this_host_did_not_write(tmp_path):
    from triage.timeline.actions import read_actions

    incident = tmp_path / "inc"
    incident.mkdir()
    log = AuditLog(incident)
    log.append({"action": "run", "phase": "start", "args": {"runbook": "chronic"}})
    log.append({"action": "run", "phase": "end", "result": "ok"})
    forge(incident, {"action": "restart", "phase": "end", "result": "ok"})               # no MAC at all
    _, problems, _ = read_actions(incident)
    flagged = [p for p in problems if "not authenticated" in p]
    assert flagged == ["actions.jsonl: line(s) 3 not authenticated by this host's key (written on another host, "
                       "by hand, or forged); recovery does not trust them"]


def test_the_timeline_says_nothing_of_keys_where_this_host_has_none(tmp_path, monkeypatch):
    from triage.timeline.actions import read_actions

    incident = tmp_path / "inc"
    incident.mkdir()
    AuditLog(incident).append({"action": "run", "phase": "start"})
    monkeypatch.setenv("TRIAGE_KEY_FILE", str(tmp_path / "elsewhere" / "audit.key"))   # a machine with no key
    _, problems, _ = read_actions(incident)
    assert not [p for p in problems if "authenticated" in p]
