"""One recovery per server, whatever the lock path; nothing planted at a path is followed,
blocked on or written through.

* the incident itself is locked (INCIDENT/.recovery.lock): two recoveries of one bundle with
  different TRIAGE_LOCK_FILEs cannot both run, and actions.jsonl is re-checked before each step;
* a FIFO, a hard link or a symlinked directory at the lock path is refused in one line, and
  what it points to is left as it was;
* `triage note` does not follow a symlinked or hard-linked notes.jsonl; a FIFO as incident.yaml
  or notes.jsonl does not hang classify, timeline or note.

Every CLI run is a subprocess with a timeout: a hang fails the test instead of stalling it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from triage.errors import TriageError
from triage.recovery.audit import AuditLog
from triage.recovery.context import ExecOptions
from triage.recovery.lock import BundleLock, HostLock, LockBusy
from triage.recovery.session import execute, open_session

from .simkit import incident_with_runbook

# A runbook that changes nothing on the host: an acknowledged instruction, then a /health wait on a
# port nobody listens on (it holds the run, and both locks, for a few seconds).
HOLD_RUNBOOK = """
id: hold
title: Hold the incident for a few seconds
applies_to: [hold]
summary: Test runbook; touches no process.
steps:
  - id: ack
    title: Acknowledge
    action: manual
    params: {instruction: "nothing to do"}
    timeout_s: 10
    on_failure: stop
    verify: acknowledged
  - id: wait
    title: Wait for a server that never answers
    action: wait_healthy
    params: {retries: 1000, backoff_s: 0.2}
    timeout_s: 6
    on_failure: continue
    verify: it never answers
  - id: ack-again
    title: Acknowledge again
    action: manual
    params: {instruction: "nothing to do"}
    timeout_s: 10
    on_failure: stop
    verify: acknowledged
"""
NO_SERVER = "http://127.0.0.1:9"
QUICK_S = 30           # a refusal comes at once; this only bounds a hang


def triage(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env or dict(os.environ), timeout=timeout)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("triage:") and "warning" not in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def incident(tmp_path: Path) -> Path:
    return incident_with_runbook(tmp_path, "hold", HOLD_RUNBOOK)


def hold_args(incident: Path) -> list[str]:
    return ["recover", str(incident), "--execute", "--yes", "--runbook", "hold", "--runbook-dir",
            str(incident.parent / "books"), "--url", NO_SERVER]


def records(incident: Path) -> list[dict]:
    path = incident / "actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- one recovery per incident -----------------------------------------------------------------------

def test_two_recoveries_with_different_lock_files_do_not_both_run(incident, tmp_path):
    """The container case: each recovery has its own TRIAGE_LOCK_FILE. The second one to start
    finds the incident locked and does nothing."""
    first_env = {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "a.lock")}
    second_env = {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "b.lock")}
    first = subprocess.Popen([sys.executable, "-m", "triage", *hold_args(incident)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=first_env)
    try:
        deadline = time.monotonic() + QUICK_S
        while not any(r.get("step") == "wait" for r in records(incident)):   # inside its run, locks held
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = triage(*hold_args(incident), env=second_env)
        out, err = first.communicate(timeout=QUICK_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert second.returncode == 1
    assert "another triage recover is running on" in one_line(second.stderr)
    assert first.returncode == 0, err
    runs = {r["run_id"] for r in records(incident)}
    assert len(runs) == 1                                   # the second run wrote nothing at all
    assert triage("audit", "verify", str(incident)).returncode == 0


def test_the_incident_lock_is_held_for_the_whole_run(incident, tmp_path):
    """A recovery that finds the incident lock taken (by another process, here this test) does nothing."""
    env = {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "own.lock")}
    with BundleLock(incident):
        refused = triage(*hold_args(incident), env=env)
    assert refused.returncode == 1 and "another triage recover is running on" in one_line(refused.stderr)
    assert records(incident) == []
    done = triage(*hold_args(incident), env=env)             # released: the next one runs
    assert done.returncode == 0, done.stderr


def test_actions_jsonl_is_rechecked_before_every_step(incident, tmp_path):
    """A record another writer appends while the run waits for the operator stops the run before
    its next step, not only when the lock is taken."""
    session = open_session(str(incident), runbook_name="hold", runbook_dirs=[str(tmp_path / "books")],
                           url=NO_SERVER)
    answers: list[str] = []

    def confirm(question: str) -> bool:
        answers.append(question)
        if question.startswith("Run step 3"):                 # someone else writes while we wait
            AuditLog(incident, run_id="intruder").append({"action": "manual", "phase": "start", "step": "x"})
        return True

    options = ExecOptions(yes=False, confirm=confirm)
    report = execute(session, options, lock_path=str(tmp_path / "own.lock"))
    assert report.result == "aborted"
    assert [s.result for s in report.steps][-1] == "aborted"
    assert "changed since this plan was made" in report.steps[-1].lines[0]
    assert "ack-again" not in {r.get("step") for r in records(incident) if r.get("run_id") != "intruder"}


# --- what may sit at the lock path ----------------------------------------------------------------

def test_a_fifo_at_the_lock_path_is_refused_at_once(incident, tmp_path):
    fifo = tmp_path / "recover.lock"
    os.mkfifo(fifo)
    env = {**os.environ, "TRIAGE_LOCK_FILE": str(fifo)}
    done = triage(*hold_args(incident), env=env, timeout=QUICK_S)      # TimeoutExpired if it hangs
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert str(fifo) in line and "a FIFO, not a regular file" in line
    assert records(incident) == []
    with pytest.raises(TriageError, match="FIFO"):
        HostLock(fifo).acquire()


def test_a_hard_link_at_the_lock_path_leaves_its_target_alone(tmp_path):
    target = tmp_path / "precious.conf"
    target.write_text("keep me\n")
    lock = tmp_path / "recover.lock"
    os.link(target, lock)
    with pytest.raises(TriageError, match="hard links"):
        HostLock(lock).acquire()
    assert target.read_text() == "keep me\n" and lock.exists()


def test_a_symlinked_directory_in_the_lock_path_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "recover.lock").write_text("keep me\n")
    (tmp_path / "link").symlink_to(victim, target_is_directory=True)
    with pytest.raises(TriageError, match="symbolic link"):
        HostLock(tmp_path / "link" / "recover.lock").acquire()
    assert (victim / "recover.lock").read_text() == "keep me\n"
    with pytest.raises(TriageError, match="symbolic link"):             # a new file there is not made either
        HostLock(tmp_path / "link" / "new.lock").acquire()
    assert sorted(p.name for p in victim.iterdir()) == ["recover.lock"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file or symlink another user's needs root")
def test_a_symlink_or_a_lock_file_of_another_user_is_refused(tmp_path):
    """Higher up the path, a symlink is followed only when root or the running user made it
    (/var/lock -> /run/lock); one another user planted (in /tmp, say) is refused. A lock file
    another user owns is never written."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "recover.lock").write_text("keep me\n")
    planted = tmp_path / "planted"
    planted.symlink_to(real, target_is_directory=True)
    os.lchown(planted, 65534, 65534)
    with pytest.raises(TriageError, match="symbolic link owned by"):
        HostLock(planted / "sub" / "recover.lock").acquire()
    assert (real / "sub" / "recover.lock").read_text() == "keep me\n"

    trusted = tmp_path / "trusted"
    trusted.symlink_to(real, target_is_directory=True)      # ours: followed, like /var/lock
    with HostLock(trusted / "sub" / "mine.lock") as lock:
        assert lock.held and (real / "sub" / "mine.lock").exists()
    assert not (real / "sub" / "mine.lock").exists()

    os.chown(real / "sub" / "recover.lock", 65534, 65534)
    with pytest.raises(TriageError, match="belongs to"):
        HostLock(real / "sub" / "recover.lock").acquire()
    assert (real / "sub" / "recover.lock").read_text() == "keep me\n"


def test_the_incident_lock_refuses_what_is_planted_there(incident, tmp_path):
    lock = incident / ".recovery.lock"
    os.mkfifo(lock)
    with pytest.raises(TriageError, match="FIFO"):
        BundleLock(incident).acquire()
    lock.unlink()
    target = tmp_path / "precious.conf"
    target.write_text("keep me\n")
    lock.symlink_to(target)
    with pytest.raises(TriageError, match="symbolic link"):
        BundleLock(incident).acquire()
    lock.unlink()
    with BundleLock(incident):
        with pytest.raises(LockBusy):
            BundleLock(incident).acquire()
    assert target.read_text() == "keep me\n"


# --- notes.jsonl and incident.yaml ----------------------------------------------------------------

def test_note_does_not_follow_a_symlinked_or_hard_linked_notes_file(incident, tmp_path):
    target = tmp_path / "precious.conf"
    target.write_text("keep me\n")
    (incident / "notes.jsonl").symlink_to(target)
    done = triage("note", str(incident), "restarted by hand", timeout=QUICK_S)
    assert done.returncode == 1 and "symbolic link" in one_line(done.stderr)
    assert target.read_text() == "keep me\n"

    (incident / "notes.jsonl").unlink()
    os.link(target, incident / "notes.jsonl")
    done = triage("note", str(incident), "restarted by hand", timeout=QUICK_S)
    assert done.returncode == 1 and "hard links" in one_line(done.stderr)
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("planted", ["incident.yaml", "notes.jsonl", "actions.jsonl"])
def test_a_fifo_in_the_bundle_does_not_hang_classify_timeline_or_note(incident, planted):
    os.mkfifo(incident / planted)
    classify = triage("classify", str(incident), timeout=QUICK_S)
    assert classify.returncode in (0, 3) and "Traceback" not in classify.stderr, classify.stderr   # 3: unknown
    if planted == "incident.yaml":
        assert f"{incident / planted}: a FIFO, not a regular file; skipped" in classify.stderr

    timeline = triage("timeline", str(incident), timeout=QUICK_S)
    assert timeline.returncode == 0, timeline.stderr
    # The problems list wraps long temporary paths at any character: compare without whitespace.
    assert f"{planted}:aFIFO,notaregularfile;skipped" in "".join(timeline.stdout.split())

    note = triage("note", str(incident), "looked at it", timeout=QUICK_S)
    if planted == "notes.jsonl":       # nowhere to write the note: refused, in one line
        assert note.returncode == 1 and "a FIFO, not a regular file" in one_line(note.stderr)
    else:
        assert note.returncode == 0, note.stderr
        assert json.loads((incident / "notes.jsonl").read_text())["text"] == "looked at it"
        if planted == "incident.yaml":
            assert "a FIFO, not a regular file; skipped" in note.stderr


def test_audit_verify_refuses_a_fifo_as_actions_jsonl_at_once(incident):
    os.mkfifo(incident / "actions.jsonl")
    done = triage("audit", "verify", str(incident), timeout=QUICK_S)
    assert done.returncode == 1
    assert one_line(done.stderr).endswith("actions.jsonl: a FIFO, not a regular file"), done.stderr
