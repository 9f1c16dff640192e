"""The recovery audit log (hash chain, tamper detection, redaction) and the host lock.

Real files in tmp_path; the lock tests use real child processes, always killed in finally.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from triage.errors import TriageError
from triage.recovery.audit import GENESIS, AuditLog, canonical, record_hash, sha256, verify
from triage.recovery.lock import Holder, HostLock, LockBusy, default_lock_path, proc_start
from triage.redact import is_secret_key, redact

HF = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3"
SK = "sk-proj-" + "Zx8Cv7Bn6Mq5Wr4Et3Yu2Io1"
AKIA = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.c2lnbmF0dXJl"
URL_PW = "Tr0ub4dor&3"
API_KEY = "local-api-key-4242"
SECRETS = [HF, SK, AKIA, AWS_SECRET, BEARER, URL_PW, API_KEY]


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 7, 0, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def make_log(tmp_path: Path, n: int = 5) -> tuple[AuditLog, Path]:
    log = AuditLog(tmp_path, run_id="run1", clock=FakeClock())
    for i in range(1, n + 1):
        log.append({"step": f"s{i}", "action": "manual", "phase": "start", "args": {"i": i}})
    return log, tmp_path / "actions.jsonl"


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# -- redaction -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, secret, hint", [
    (f"export HF_TOKEN={HF}", HF, "hf_***"),
    (f"token is {HF} ok", HF, "hf_***"),
    (f"OPENAI_API_KEY={SK}", SK, "sk-***"),
    (f"key {AKIA} in use", AKIA, "AKIA***"),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key = ***"),
    (f"curl -H 'Authorization: Bearer {BEARER}' http://x", BEARER, "Authorization: Bearer ***"),
    (f"sent Bearer {BEARER}", BEARER, "Bearer ***"),
    (f"postgres://admin:{URL_PW}@db:5432/app", URL_PW, "postgres://admin:***@db:5432/app"),
    (f"vllm serve m --api-key {API_KEY} --port 8000", API_KEY, "--api-key *** --port 8000"),
    (f"vllm serve m --hf-token={HF}", HF, "--hf-token=hf_***"),
    (f'{{"password": "{URL_PW}"}}', URL_PW, '"password": "***"'),
])
def test_redact_text(text: str, secret: str, hint: str) -> None:
    out = redact(text)
    assert secret not in out
    assert hint in out
    assert redact(out) == out                       # idempotent


def test_redact_keeps_harmless_flags_and_values() -> None:
    text = ("vllm serve m --max-num-batched-tokens 8192 --tokenizer foo --max-tokens 16 "
            "https://example.com/a:b PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert redact(text) == text
    for name in ("max_num_batched_tokens", "tokenizer", "max_tokens", "eos_token_id", "PWD"):
        assert not is_secret_key(name), name
    for name in ("HF_TOKEN", "api_key", "X-Api-Key", "aws_secret_access_key", "accessToken",
                 "db_password", "apikey", "AWS_ACCESS_KEY_ID", "--hf-token"):
        assert is_secret_key(name), name


def test_redact_nested_is_pure() -> None:
    value = {"env": {"HF_TOKEN": "abc", "CUDA_VISIBLE_DEVICES": "0"},
             "argv": ["vllm", "serve", "--api-key", API_KEY, f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}"],
             "headers": {"Authorization": f"Bearer {BEARER}"}, "clientSecret": "s3", "n": 3,
             "urls": (f"https://u:{URL_PW}@h/",)}
    before = json.dumps(value, sort_keys=True)
    out = redact(value)
    assert json.dumps(value, sort_keys=True) == before                 # input untouched
    assert out["env"] == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0"}
    assert out["argv"] == ["vllm", "serve", "--api-key", "***", "AWS_SECRET_ACCESS_KEY=***"]
    assert out["headers"] == {"Authorization": "Bearer ***"}
    assert out["clientSecret"] == "***" and out["n"] == 3
    assert out["urls"] == ("https://u:***@h/",)


def test_redact_is_linear_on_pathological_text() -> None:
    import time
    for text in ("x" * 200_000, "a." * 100_000, "--a" * 70_000, "a:" * 100_000, " " * 200_000):
        began = time.perf_counter()
        redact(text)
        assert time.perf_counter() - began < 1.0


# -- the hash chain --------------------------------------------------------------------------

def test_chain_verifies_and_records_have_every_field(tmp_path: Path) -> None:
    log, path = make_log(tmp_path, 3)
    report = verify(tmp_path)
    assert report.ok and report.records == 3 and report.problems == []
    recs = [json.loads(x) for x in lines(path)]
    assert [r["seq"] for r in recs] == [1, 2, 3]
    assert recs[0]["prev"] == GENESIS
    assert recs[1]["prev"] == sha256(lines(path)[0].rstrip(b"\n"))
    assert all(r["hash"] == record_hash(r) for r in recs)
    assert recs[0]["time"] == "2026-11-22T07:00:01.000Z"
    for key in ("seq", "time", "user", "host", "run_id", "step", "action", "phase", "args",
                "result", "duration_s", "output_tail", "prev", "hash"):
        assert key in recs[0], key
    assert lines(path)[0] == canonical(recs[0]) + b"\n"
    assert report.last_hash == recs[-1]["hash"] and log.last() == recs[-1]


def test_missing_and_empty_logs_are_ok(tmp_path: Path) -> None:
    missing = verify(tmp_path / "actions.jsonl")
    assert missing.ok and missing.records == 0 and "no audit log yet" in missing.summary()
    (tmp_path / "actions.jsonl").write_bytes(b"")
    empty = verify(tmp_path)
    assert empty.ok and empty.records == 0 and "empty" in empty.summary()
    assert AuditLog(tmp_path).last() is None


def test_append_only_never_rewrites(tmp_path: Path) -> None:
    log, path = make_log(tmp_path, 2)
    before = path.read_bytes()
    log.append({"step": "x", "action": "manual", "phase": "end", "result": "ok"})
    assert path.read_bytes().startswith(before)
    # a second writer (new object) chains onto the same file
    AuditLog(path).append({"step": "y", "action": "manual", "phase": "start"})
    assert verify(path).ok and verify(path).records == 4


@pytest.mark.parametrize("edit, first_line", [
    ("value", 3), ("byte", 3), ("delete", 3), ("swap", 2), ("truncate", 5), ("genesis", 1),
])
def test_tampering_is_detected_at_the_right_line(tmp_path: Path, edit: str, first_line: int) -> None:
    _, path = make_log(tmp_path, 5)
    ls = lines(path)
    if edit == "value":                     # one byte changes a value, JSON still valid
        ls[2] = ls[2].replace(b'"i":3', b'"i":4')
    elif edit == "byte":                    # one byte breaks the JSON
        ls[2] = ls[2][:10] + b"#" + ls[2][11:]
    elif edit == "delete":
        del ls[2]
    elif edit == "swap":
        ls[1], ls[2] = ls[2], ls[1]
    elif edit == "truncate":
        ls[4] = ls[4][:-15]
    elif edit == "genesis":
        del ls[0]
    path.write_bytes(b"".join(ls))
    report = verify(path)
    assert not report.ok
    assert report.problems[0].startswith(f"line {first_line}: "), report.problems
    if edit == "truncate":
        assert report.problems == ["line 5: truncated or corrupt JSON (no trailing newline)"]
    if edit == "delete":
        assert any("seq 4, expected 3" in p for p in report.problems)


def test_seq_gap_in_an_intact_chain_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    prev, out = GENESIS, b""
    for seq in (1, 2, 4):                   # correctly hashed and linked, but seq jumps
        rec = {"seq": seq, "time": "t", "run_id": "r", "action": "manual", "phase": "start",
               "prev": prev}
        rec["hash"] = record_hash(rec)
        line = canonical(rec)
        out, prev = out + line + b"\n", sha256(line)
    path.write_bytes(out)
    assert verify(path).problems == ["line 3: seq 4, expected 3 (gap or reorder)"]
    path.write_bytes(os.urandom(2000).replace(b"\n", b"") + b"\n\x00\xff")
    report = verify(path)
    assert not report.ok and report.problems[0] == "line 1: truncated or corrupt JSON"
    with pytest.raises(TriageError, match="line 1: truncated or corrupt JSON"):
        AuditLog(path).append({"action": "manual", "phase": "start"})


def test_resume_and_refusal_after_a_corrupt_tail(tmp_path: Path) -> None:
    log, path = make_log(tmp_path, 4)
    good = [json.loads(x) for x in lines(path)]
    with open(path, "ab") as fh:            # a torn write: half a line, no newline
        fh.write(b'{"seq":5,"action":"dra')
    assert log.last() == good[-1]
    size = path.stat().st_size
    for writer in (log, AuditLog(path)):    # cached state or not, it re-checks the file
        with pytest.raises(TriageError, match=r"refusing to append: line 5: truncated"):
            writer.append({"step": "s5", "action": "manual", "phase": "start"})
    assert path.stat().st_size == size      # nothing written


def test_append_validates_its_input(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    with pytest.raises(TriageError, match="may not set seq"):
        log.append({"seq": 9, "action": "manual", "phase": "start"})
    with pytest.raises(TriageError, match="phase"):
        log.append({"action": "manual", "phase": "middle"})
    with pytest.raises(TriageError, match="incident directory does not exist"):
        AuditLog(tmp_path / "nope" / "actions.jsonl").append({"action": "manual", "phase": "start"})


# -- steps -----------------------------------------------------------------------------------

def test_step_records_success_failure_exception_interrupt_timeout(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, run_id="r", clock=FakeClock())
    with log.step("drain", "drain", {"max_wait_s": 30}) as h:
        h.output = "running=0"
    with log.step("gpu", "check_gpu_free") as h:
        h.result = "failed"
    with pytest.raises(RuntimeError):
        with log.step("stop", "stop_server", {"pids": [1234]}):
            raise RuntimeError("pid 1234 ignored SIGTERM")
    with pytest.raises(KeyboardInterrupt):
        with log.step("restart", "restart"):
            raise KeyboardInterrupt
    with pytest.raises(subprocess.TimeoutExpired):
        with log.step("health", "wait_healthy"):
            raise subprocess.TimeoutExpired(["curl"], 5)
    recs = log.records()
    assert verify(tmp_path).ok
    assert [(r["step"], r["phase"], r["result"]) for r in recs] == [
        ("drain", "start", None), ("drain", "end", "ok"),
        ("gpu", "start", None), ("gpu", "end", "failed"),
        ("stop", "start", None), ("stop", "end", "failed"),
        ("restart", "start", None), ("restart", "end", "interrupted"),
        ("health", "start", None), ("health", "end", "timeout"),
    ]
    assert recs[1]["output_tail"] == "running=0" and recs[1]["duration_s"] >= 0
    assert "RuntimeError: pid 1234 ignored SIGTERM" in recs[5]["output_tail"]
    assert recs[5]["args"] == {"pids": [1234]}
    assert log.completed_steps() == ["drain"]


def test_output_tail_is_bounded(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    with log.step("s", "manual") as h:
        h.output = "x" * 10_000 + f" HF_TOKEN={HF}"
    tail = log.records()[-1]["output_tail"]
    assert len(tail) <= 2003 and tail.endswith("HF_TOKEN=hf_***") and HF not in tail


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    args = {"argv": ["vllm", "serve", "m", "--api-key", API_KEY, "--hf-token", HF],
            "env": {"OPENAI_API_KEY": SK, "AWS_ACCESS_KEY_ID": AKIA,
                    "AWS_SECRET_ACCESS_KEY": AWS_SECRET},
            "headers": [f"Authorization: Bearer {BEARER}"],
            "url": f"https://ops:{URL_PW}@registry.local/v2"}
    with log.step("restart", "restart", args) as h:
        h.output = (f"launching with {HF} and {SK}; aws {AKIA} aws_secret_access_key={AWS_SECRET}"
                    f"\nGET /v1/models Authorization: Bearer {BEARER}\n"
                    f"pulling https://ops:{URL_PW}@registry.local\nvllm serve --api-key {API_KEY}")
    with pytest.raises(ValueError):
        with log.step("x", "manual", {"token": HF}):
            raise ValueError(f"bad key {SK}")
    raw = (tmp_path / "actions.jsonl").read_text()
    for secret in SECRETS:
        assert secret not in raw, secret
    assert "hf_***" in raw and "--api-key" in raw and verify(tmp_path).ok


SIGINT_CHILD = """
import sys, time
from triage.recovery.audit import AuditLog
log = AuditLog(sys.argv[1])
with log.step("drain", "drain", {"max_wait_s": 5}):
    pass
with log.step("stop", "stop_server", {"pids": [1]}):
    print("acting", flush=True)
    time.sleep(30)
"""


def test_ctrl_c_in_a_real_process_leaves_a_valid_log(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SIGINT_CHILD, str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert wait_line(proc, "acting")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    finally:
        kill(proc)
    report = verify(tmp_path)
    assert report.ok and report.records == 4
    last = AuditLog(tmp_path).last()
    assert last is not None and (last["step"], last["phase"], last["result"]) == (
        "stop", "end", "interrupted")


# -- the host lock ---------------------------------------------------------------------------

HOLD_CHILD = """
import sys, time
from triage.recovery.lock import HostLock
lock = HostLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(60)
"""
SLEEP_CHILD = "import time; print('up', flush=True); time.sleep(60)"


def wait_line(proc: subprocess.Popen, expected: str, timeout: float = 15.0) -> bool:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return bool(ready) and proc.stdout.readline().strip() == expected


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout:
        proc.stdout.close()


def spawn(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True)


def test_lock_blocks_a_second_process_and_names_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "recover.lock"
    child = spawn(HOLD_CHILD, str(path))
    try:
        assert wait_line(child, "locked")
        start = proc_start(child.pid)
        assert start is not None
        with pytest.raises(LockBusy) as err:
            HostLock(path).acquire()
        message = str(err.value)
        assert message.startswith(f"another triage recover is running: pid {child.pid} (started ")
        assert start.utc in message and "\n" not in message
        holder = Holder.parse(path.read_bytes())
        assert holder is not None and holder.start_ticks == start.ticks
        assert any("sys.argv[1]" in a or "HostLock" in a for a in holder.cmdline)
    finally:
        kill(child)


def test_stale_lock_of_a_killed_holder_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "recover.lock"
    child = spawn(HOLD_CHILD, str(path))
    try:
        assert wait_line(child, "locked")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        with HostLock(path) as lock:
            assert lock.taken_over_from is not None and lock.taken_over_from.pid == child.pid
            assert lock.warning and "stale" in lock.warning and "gone" in lock.warning
            assert Holder.parse(path.read_bytes()).pid == os.getpid()  # type: ignore[union-attr]
        assert not path.exists()            # released and unlinked
    finally:
        kill(child)


def test_pid_reuse_is_stale_but_a_live_same_process_is_not(tmp_path: Path) -> None:
    path = tmp_path / "recover.lock"
    child = spawn(SLEEP_CHILD)              # a live process that never took the lock
    try:
        assert wait_line(child, "up")
        start = proc_start(child.pid)
        assert start is not None
        record = {"pid": child.pid, "start_time": "2020-01-01T00:00:00.000Z", "user": "alice",
                  "host": "h", "cmdline": ["triage", "recover"], "acquired_at": "",
                  "start_ticks": start.ticks - 1000, "boot_id": start.boot_id}
        path.write_text(json.dumps(record))
        with HostLock(path) as lock:
            assert lock.taken_over_from is not None and lock.taken_over_from.pid == child.pid
            assert lock.warning and "now belongs to another process" in lock.warning
        # the same pid *and* start time, but no flock: refuse rather than guess
        record.update(start_time=start.utc, start_ticks=start.ticks)
        path.write_text(json.dumps(record))
        with pytest.raises(LockBusy, match=f"names a live process pid {child.pid}"):
            HostLock(path).acquire()
    finally:
        kill(child)


def test_lock_release_and_reacquire_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRIAGE_LOCK_FILE", raising=False)    # the default name, whatever the caller's shell sets
    path = tmp_path / "recover.lock"
    first = HostLock(path).acquire()
    with pytest.raises(LockBusy):           # flock is per open file: a second one conflicts
        HostLock(path).acquire()
    first.release()
    first.release()                         # idempotent
    with HostLock(path) as again:
        assert again.held and again.warning is None
    assert not path.exists()
    assert default_lock_path().name.startswith("triage-recover")


def test_audit_verify_command(tmp_path):
    from click.testing import CliRunner

    from triage.cli import main
    from triage.recovery.audit import AuditLog

    log = AuditLog(tmp_path)
    with log.step("stop", "stop_server", args={"pids": [4242]}):
        pass
    runner = CliRunner()
    ok = runner.invoke(main, ["audit", "verify", str(tmp_path)])
    assert ok.exit_code == 0, ok.stderr
    path = tmp_path / "actions.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1].replace('"ok"', '"failed"'))
    bad = runner.invoke(main, ["audit", "verify", str(tmp_path)])
    assert bad.exit_code == 1 and "line 2" in bad.stderr
