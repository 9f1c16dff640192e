"""What a local user who can write an incident bundle (or hand root a packed one) can make root do.

Root runs `timeline`, `postmortem` and `recover` over directories and archives someone else
wrote. None of that may steer what root writes (a member name, a planted link, a directory
swapped mid-run), which processes it signals (PIDs printed in a log) or as whom it relaunches
(a dead server's user). Real files, links, archives and processes throughout; the cases that
need another user run only as root (as CI does).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from triage.cli import main
from triage.errors import BadInput
from triage.evidence.archive import _safe_name
from triage.recovery import actions
from triage.recovery.actions import launch
from triage.recovery.audit import AuditError, AuditLog, verify
from triage.recovery.context import Deadline, ExecOptions, LaunchSpec, RunContext, ok
from triage.recovery.identify import Identification
from triage.recovery.privileges import Creds, identity_without_server
from triage.recovery.runbooks import RunbookStep
from triage.recovery.session import execute, open_session
from triage.recovery.trust import BundleCommand
from triage.safedir import HeldDir

from .conftest import sample
from .simkit import MODEL, alive, kill_group, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="recovery reads /proc")

IS_ROOT = os.geteuid() == 0
NOBODY = 65534
needs_root = pytest.mark.skipif(not IS_ROOT, reason="another user's files and processes need root")


def triage(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env or dict(os.environ), timeout=timeout, cwd="/")


def lock_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "recover.lock")}


def copy_sample(where: Path, name: str = "chronic-fragmentation") -> Path:
    incident = where / "INC"
    shutil.copytree(sample(name), incident)
    return incident


def chown_tree(path: Path, uid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
    os.chown(path, uid, uid)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can own things in (pytest's tmp dirs are root's, mode 0700)."""
    base = Path(tempfile.mkdtemp(prefix="triage-users-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


# -- 1. archive member names ----------------------------------------------------------------------

@pytest.mark.parametrize("name, normalised, refused", [
    ("INC//tmp/x/ESCAPED", "INC/tmp/x/ESCAPED", None),
    ("./INC/./logs//vllm.log", "INC/logs/vllm.log", None),
    ("/etc/cron.d/x", None, "an absolute path"),
    ("INC/../../etc/x", None, "'..'"),
    ("INC\\..\\x", None, "backslash"),
    ("C:/Windows/x", None, "drive-letter"),
    ("INC/C:x", None, "drive-letter"),
    ("INC/a\0b", None, "NUL"),
    ("", None, "empty"),
    ("./", None, "empty"),
])
def test_every_member_name_is_normalised_or_refused_before_use(name, normalised, refused):
    got, why = _safe_name(name)
    if refused:
        assert why is not None and refused in why
    else:
        assert why is None and got == normalised


def _bundle_archive(where: Path, kind: str, escape_to: Path) -> Path:
    members = {
        "INC/incident.yaml": (sample("chronic-fragmentation") / "incident.yaml").read_bytes(),
        "INC/logs/vllm.log.gz": (sample("chronic-fragmentation") / "logs" / "vllm.log.gz").read_bytes(),
        f"INC/{escape_to}/ESCAPED": b"written outside the bundle\n",        # INC//tmp/.../ESCAPED
        f"INC/../../{escape_to.name}/UP": b"up\n",
        "INC/logs\\..\\..\\BACK": b"back\n",
    }
    path = where / f"bundle.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
    else:
        with tarfile.open(path, "w:gz") as tf:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
@pytest.mark.parametrize("command", [("timeline",), ("postmortem", "-o", "-"), ("recover", "--json")])
def test_an_archive_member_never_lands_outside_the_bundle(tmp_path, kind, command):
    outside = tmp_path / "outside"
    (tmp_path / "in").mkdir()
    archive = _bundle_archive(tmp_path / "in", kind, outside)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, [command[0], str(archive), *command[1:]], catch_exceptions=False)
    assert result.exit_code in (0, 3), result.output
    assert not outside.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (Path(tempfile.gettempdir()) / "outside").exists()      # where `INC/../../outside` points
    assert "a path with '..'" in result.stderr and "backslash" in result.stderr
    if command[0] == "timeline":                  # the bundle itself was read: its log made the timeline
        assert "vllm.log" in result.stdout


# -- 2. the relaunch log --------------------------------------------------------------------------

SERVES = ("import sys, time\nprint('INFO Starting vLLM API server 0 on http://127.0.0.1:9', flush=True)\n"
          "time.sleep(30)\n")


def _relaunch_ctx(incident: Path) -> RunContext:
    spec = LaunchSpec([sys.executable, "-c", SERVES], {}, None, None, "test")
    return RunContext(incident, "chronic", MODEL, None, Identification(), spec, ExecOptions(yes=True),
                      held=HeldDir.open(incident))


def _step() -> RunbookStep:
    return RunbookStep("relaunch", "relaunch", "restart", 30.0, "stop", "it serves", {})


def test_a_planted_relaunch_log_link_is_never_written_through(tmp_path):
    incident = tmp_path / "INC"
    (incident / "recovery").mkdir(parents=True)
    roots_file = tmp_path / "root-only"
    roots_file.write_text("root's own\n")
    roots_file.chmod(0o600)
    now = datetime.now(timezone.utc)
    for second in range(-5, 300):                 # the names of the next few minutes, all planted
        stamp = (now + timedelta(seconds=second)).strftime("%Y-%m-%dT%H-%M-%SZ")
        (incident / "recovery" / f"relaunch-{stamp}.log").symlink_to(roots_file)
    ctx = _relaunch_ctx(incident)
    out = launch.restart(_step(), ctx, Deadline(10))
    try:
        assert out.result == "ok", out.output
        assert roots_file.read_text() == "root's own\n"
        log = incident / out.data["launched"]["log"]
        assert not log.is_symlink() and log.stat().st_nlink == 1
        assert "Starting vLLM API server" in log.read_text()
    finally:
        kill_group(out.data["launched"]["pid"])
        ctx.held.close()


def test_a_symlinked_recovery_folder_is_refused_and_nothing_starts(tmp_path):
    incident = tmp_path / "INC"
    incident.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (incident / "recovery").symlink_to(elsewhere)
    ctx = _relaunch_ctx(incident)
    out = launch.restart(_step(), ctx, Deadline(10))
    ctx.held.close()
    assert out.result == "failed" and "symbolic link" in out.output
    assert list(elsewhere.iterdir()) == [] and "launched" not in out.data


# -- 3. actions.jsonl -----------------------------------------------------------------------------

def test_the_audit_log_is_never_appended_through_a_link(tmp_path):
    incident = tmp_path / "INC"
    incident.mkdir()
    target = tmp_path / "root-empty"
    target.write_bytes(b"")
    (incident / "actions.jsonl").symlink_to(target)
    with pytest.raises(AuditError, match="symbolic link"):
        AuditLog(incident).append({"action": "run", "phase": "start"})
    assert target.read_bytes() == b""
    (incident / "actions.jsonl").unlink()
    os.link(target, incident / "actions.jsonl")   # a second name for another file: two links
    with pytest.raises(AuditError, match="hard links"):
        AuditLog(incident).append({"action": "run", "phase": "start"})
    assert target.read_bytes() == b""


def test_recover_execute_refuses_a_linked_audit_log_and_writes_nothing(tmp_path):
    incident = copy_sample(tmp_path)
    target = tmp_path / "root-empty"
    target.write_bytes(b"")
    (incident / "actions.jsonl").symlink_to(target)
    done = triage("recover", str(incident), "--execute", "--yes", "--runbook", "chronic", "--url",
                  "http://127.0.0.1:9", "--launch-command", "sleep 1", env=lock_env(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "symbolic link" in done.stderr
    assert target.read_bytes() == b""


# -- 4. PIDs a log names ---------------------------------------------------------------------------

def _start_replica(log: Path) -> subprocess.Popen:
    """Root's own healthy replica of the model (the simulator), its log where root keeps it."""
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--scenario",
                                 "healthy"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
                                start_new_session=True)
    assert wait_until(lambda: "EngineCore_DP0 pid=" in log.read_text(errors="replace"), 20), log.read_text()
    return proc


def _oom_line(pid: int, when: datetime) -> str:
    return (f"(EngineCore_DP0 pid={pid}) ERROR {when:%m-%d %H:%M:%S} [core.py:710] torch.OutOfMemoryError: CUDA out "
            "of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is "
            "free. Including non-PyTorch memory, this process has 78.10 GiB memory in use. Of the allocated memory "
            "70.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated.\n")


def _plan(incident: Path, tmp_path: Path) -> dict[str, Any]:
    done = triage("recover", str(incident), "--runbook", "chronic", "--json", env=lock_env(tmp_path))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_root
def test_a_users_log_cannot_name_roots_replica(shared_dir, tmp_path):
    """The user copies root's replica's log lines (its PIDs, its model) into their own OOM log."""
    replica_log = tmp_path / "replica.log"
    replica = _start_replica(replica_log)
    try:
        incident = shared_dir / "INC"
        (incident / "logs").mkdir(parents=True)
        (incident / "incident.yaml").write_text("id: INC-7\ntitle: my server died\n")
        engine = int(replica_log.read_text().split("EngineCore_DP0 pid=")[1].split(")")[0])
        (incident / "logs" / "vllm.log").write_text(replica_log.read_text(errors="replace")
                                                     + _oom_line(engine, datetime.now(timezone.utc)))
        chown_tree(incident, NOBODY)
        plan = _plan(incident, tmp_path)
        named = {p["pid"]: p["status"] for p in plan["pids"]}
        assert engine in named and named[engine].startswith("refused") and "uid 0" in named[engine]
        assert not any(status == "confirmed" for status in named.values())
        done = triage("recover", str(incident), "--execute", "--yes", "--runbook", "chronic", "--force",
                      "--param", "steady.window_s=2", env=lock_env(tmp_path), timeout=180)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert alive(replica.pid) and alive(engine)
    finally:
        kill_group(replica.pid)


def test_a_process_that_only_carries_the_model_name_is_not_a_server(tmp_path):
    """Root's own log (writable by root alone) names a process whose argv holds the model's name
    but which runs no engine: `python3 -c … serve MODEL`."""
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "serve", MODEL],
                             start_new_session=True)
    try:
        time.sleep(1.1)                           # the log's one-second times lie after its start
        now = datetime.now(timezone.utc)
        incident = tmp_path / "INC"
        (incident / "logs").mkdir(parents=True)
        log = incident / "logs" / "vllm.log"
        log.write_text(f"(APIServer pid={decoy.pid}) INFO {now:%m-%d %H:%M:%S} [api_server.py:1839] vLLM API server "
                       f"version 0.11.0\n(APIServer pid={decoy.pid}) INFO {now:%m-%d %H:%M:%S} [utils.py:233] "
                       f"non-default args: {{'model_tag': '{MODEL}', 'model': '{MODEL}'}}\n"
                       + _oom_line(decoy.pid, now).replace("EngineCore_DP0", "APIServer"))
        log.chmod(0o644)
        named = {p["pid"]: p["status"] for p in _plan(incident, tmp_path)["pids"]}
        assert named.get(decoy.pid, "").startswith("refused") and "no serving engine" in named[decoy.pid]
        assert alive(decoy.pid)
    finally:
        kill_group(decoy.pid)


# -- 5. who a dead server is relaunched as ---------------------------------------------------------

def _launched_end(uid: int, gid: int | None = None, groups: list[int] | None = None) -> dict[str, Any]:
    launched: dict[str, Any] = {"pid": 999999, "start_ticks": 1, "argv": ["vllm", "serve", MODEL], "uid": uid,
                                "driver": "process"}
    if gid is not None:
        launched.update(gid=gid, groups=groups or [])
    return {"phase": "end", "seq": 4, "action": "restart", "data": {"launched": launched}}


def test_a_dead_server_takes_its_user_from_the_authenticated_record(tmp_path):
    run_as = identity_without_server([_launched_end(1001, 1001, [1001, 27])], tmp_path, Creds(0, 0, ()))
    assert run_as.creds == Creds(1001, 1001, (27, 1001)) and "actions.jsonl:4" in run_as.source


@needs_root
def test_a_dead_server_in_a_users_directory_never_runs_as_root(shared_dir):
    incident = shared_dir / "INC"
    incident.mkdir()
    os.chown(incident, NOBODY, NOBODY)
    run_as = identity_without_server([], incident)
    assert run_as.creds is not None and run_as.creds.uid == NOBODY and run_as.problem is None
    os.chown(incident, 0, 0)
    assert identity_without_server([], incident).creds is None           # root's own bundle: root


def test_the_digest_an_operator_confirms_covers_the_user():
    as_root = BundleCommand("relaunch", 3, "logs", ["vllm", "serve", MODEL], {}, None, "uid 0, gid 0, groups none")
    as_user = BundleCommand("relaunch", 3, "logs", ["vllm", "serve", MODEL], {}, None, "uid 1001, gid 1001, groups 1001")
    assert as_root.digest != as_user.digest and "runs as: uid 1001" in "\n".join(as_user.lines())


@needs_root
def test_a_dead_unprivileged_server_recovered_once_is_planned_as_its_user_again(tmp_path):
    """Root relaunched uid 65534's server once (recorded, authenticated); it died again. The next plan
    relaunches it as 65534, and the digest printed is for that user."""
    incident = copy_sample(tmp_path)
    AuditLog(incident).append({"action": "restart", "phase": "end", "step": "relaunch", "result": "ok",
                               "data": {"launched": {"pid": 999999, "start_ticks": 1, "argv": ["vllm", "serve", MODEL],
                                                     "uid": NOBODY, "gid": NOBODY, "groups": [NOBODY],
                                                     "driver": "process", "boot_id": "another boot"}}})
    plan = _plan(incident, tmp_path)
    assert plan["run_as"]["uid"] == NOBODY and "actions.jsonl" in plan["run_as"]["source"]
    assert all(f"uid {NOBODY}" in b["user"] for b in plan["bundle_commands"]) and plan["bundle_commands"]


# -- 6. the incident directory swapped mid-run -------------------------------------------------------

def test_a_directory_swapped_mid_run_gets_no_record_and_the_held_one_all(tmp_path, monkeypatch):
    incident = copy_sample(tmp_path)
    books = tmp_path / "books"
    books.mkdir()
    (books / "probe.yaml").write_text(
        "id: probe\ntitle: two checks\napplies_to: [probe]\nsummary: checks only\nsteps:\n"
        + "".join(f"  - {{id: check{i}, title: check {i}, action: check_gpu_free, timeout_s: 5, on_failure: stop, "
                  f"verify: checked}}\n" for i in (1, 2)))
    moved, other = tmp_path / "INC.held", tmp_path / "other"
    other.mkdir()

    def swap_then_ok(step, ctx, deadline):
        if not moved.exists():                    # the directory swapped for a link while the run is under way
            incident.rename(moved)
            incident.symlink_to(other)
        return ok("checked")

    monkeypatch.setitem(actions.RUNNERS, "check_gpu_free", swap_then_ok)
    session = open_session(str(incident), runbook_name="probe", runbook_dirs=[str(books)], url="http://127.0.0.1:9")
    try:
        report = execute(session, ExecOptions(yes=True), lock_path=str(tmp_path / "recover.lock"))
    finally:
        session.close()
    assert report.ok
    assert list(other.iterdir()) == []
    lines = (moved / "actions.jsonl").read_text().splitlines()
    assert len(lines) == 6                        # run start, two steps of two records, run end
    incident.unlink()                             # put it back where the run found it: the records are
    moved.rename(incident)                        # bound to that directory, and all of them verify there
    check = verify(incident, key=True)
    assert check.ok and check.authenticated == 6


def test_a_symlinked_incident_directory_is_refused_for_recovery(tmp_path):
    real = copy_sample(tmp_path)
    link = tmp_path / "LINK"
    link.symlink_to(real)
    with pytest.raises(BadInput, match="symbolic link"):
        open_session(str(link), runbook_name="chronic")
