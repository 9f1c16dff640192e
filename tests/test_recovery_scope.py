"""Only the failing server is touched: PIDs named by another log of the bundle (a healthy replica
on the same host) are refused, a sighting dated in the future confirms nothing, and a live
/metrics scrape does not re-date an old log.

Real processes (decoys that run the incident's model, simulator servers), real files and real
`triage` subprocesses; every process started is killed by its group.
"""
from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from triage.evidence import load_evidence, scrape

from .simkit import MODEL, START_S, alive, complete, get, kill_group, words

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="recovery identifies processes through /proc")

OOM = ("ERROR {stamp} [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
       "has a total capacity of 79.19 GiB of which 1.06 GiB is free. Of the allocated memory 75.20 GiB is allocated "
       "by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "recover.lock")}


@pytest.fixture
def decoy() -> Iterator[Callable[..., subprocess.Popen]]:
    """A process that runs the incident's model by its command line, in a session of its own."""
    procs: list[subprocess.Popen] = []

    def spawn(*argv: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *argv],
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield spawn
    for p in procs:
        kill_group(p.pid)


def triage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=timeout)


def stamp(moment: datetime) -> str:
    """vLLM's year-less `MM-DD HH:MM:SS`."""
    return moment.strftime("%m-%d %H:%M:%S")


def server_lines(pid: int, at: datetime) -> list[str]:
    return [f"(APIServer pid={pid}) INFO {stamp(at)} [api_server.py:1839] vLLM API server version 0.11.0",
            f"(APIServer pid={pid}) INFO {stamp(at)} [utils.py:233] non-default args: "
            f"{{'model_tag': '{MODEL}', 'model': '{MODEL}'}}"]


def pids(plan: dict) -> dict[int, str]:
    return {p["pid"]: p["status"] for p in plan["pids"]}


# --- a neighbour replica's log ------------------------------------------------------------------------

def test_a_pid_seen_only_in_a_log_the_verdict_does_not_cite_is_refused(tmp_path, env, decoy):
    """logs/replica.log is a healthy replica's (same model, its own session): its PID is refused
    with the reason, though its command line runs the incident's model."""
    server, replica = decoy("vllm", "serve", MODEL), decoy("vllm", "serve", MODEL, "--port", "8001")
    time.sleep(0.2)
    now = datetime.now(timezone.utc)
    logs = tmp_path / "INC" / "logs"
    logs.mkdir(parents=True)
    (logs / "vllm.log").write_text("\n".join(server_lines(server.pid, now) + [
        f"(EngineCore_DP0 pid={server.pid}) " + OOM.format(stamp=stamp(now))]) + "\n")
    (logs / "replica.log").write_text("\n".join(server_lines(replica.pid, now)) + "\n")

    plan = triage("recover", str(tmp_path / "INC"), "--runbook", "burst", "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    status = pids(json.loads(plan.stdout))
    assert status[server.pid] == "confirmed"
    assert status[replica.pid].startswith("refused: seen only in logs/replica.log, which the verdict does not cite")

    text = " ".join(triage("recover", str(tmp_path / "INC"), "--runbook", "burst", env=env).stdout.split())
    assert f"leave: {replica.pid} APIServer" in text and "seen only in logs/replica.log" in text
    # --pid still names any process the operator means
    chosen = json.loads(triage("recover", str(tmp_path / "INC"), "--runbook", "burst", "--json",
                               "--pid", str(replica.pid), env=env).stdout)
    assert pids(chosen)[replica.pid] == "confirmed"

    # The failing server's log prints no PID prefixes: the replica's log is still not its log.
    (logs / "vllm.log").write_text("\n".join(
        [line.split(") ", 1)[1] for line in server_lines(server.pid, now)] + [OOM.format(stamp=stamp(now))]) + "\n")
    bare = json.loads(triage("recover", str(tmp_path / "INC"), "--runbook", "burst", "--json", env=env).stdout)
    assert pids(bare)[replica.pid].startswith("refused: seen only in logs/replica.log, which the verdict does not cite")


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen, str]]]:
    """Simulator servers logging into INCIDENT/logs/<name>; killed (with what recovery relaunched)."""
    started: list[subprocess.Popen] = []

    def run(log: Path, *flags: str) -> tuple[subprocess.Popen, str]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", *flags],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
                                    start_new_session=True)
        started.append(proc)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            m = re.search(r"Starting vLLM API server \d+ on (http://\S+)", log.read_text(errors="replace"))
            if m and get(m.group(1) + "/health") == 200:
                return proc, m.group(1)
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.05)
        pytest.fail("simulator did not start serving in time")

    yield run
    for proc in started:
        kill_group(proc.pid)
    actions = tmp_path / "INC" / "actions.jsonl"
    for line in actions.read_text().splitlines() if actions.exists() else []:
        launched = (json.loads(line).get("data") or {}).get("launched")
        if isinstance(launched, dict) and launched.get("pid"):
            kill_group(launched["pid"])


def test_a_healthy_replica_in_the_bundle_survives_a_root_recovery(tmp_path, env, sims):
    """The attack as found: the bundle holds a healthy replica's log beside the failing server's.
    The recovery stops and relaunches the failing server only; the replica keeps serving."""
    incident = tmp_path / "INC"
    replica, replica_url = sims(incident / "logs" / "replica.log", "--scenario", "healthy")
    failing, url = sims(incident / "logs" / "vllm.log", "--scenario", "chronic")
    for i in range(1, 41):
        if complete(url, f"request {i} " + words(50, f"r{i}"), 2) != 200:
            break
    else:
        pytest.fail("the chronic server never failed")

    plan = json.loads(triage("recover", str(incident), "--json", env=env).stdout)
    assert plan["pids"] and pids(plan)[replica.pid].startswith("refused: seen only in logs/replica.log")

    done = triage("recover", str(incident), "--execute", "--yes", "--param", "steady.window_s=2", env=env)
    assert done.returncode == 0, done.stderr
    assert alive(replica.pid) and complete(replica_url, "still here", 2) == 200
    assert not alive(failing.pid)
    stop = next(json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()
                if json.loads(line).get("step") == "stop" and json.loads(line)["phase"] == "start")
    assert replica.pid not in {p["pid"] for p in stop["args"]["pids"]}


# --- a sighting in the future -------------------------------------------------------------------------

def test_a_sighting_dated_in_the_future_confirms_nothing(tmp_path, env, decoy):
    """incident.yaml says America/Los_Angeles over a UTC log written a minute ago: its times land
    hours ahead. A PID-reuse decoy started after the log's real time (its command line runs the
    model) would pass "started before the log saw it" — it is refused and never signalled."""
    written = datetime.now(timezone.utc) - timedelta(seconds=60)
    stranger = decoy("vllm", "serve", MODEL)             # started after the line was really written
    incident = tmp_path / "INC"
    (incident / "logs").mkdir(parents=True)
    (incident / "incident.yaml").write_text(yaml.safe_dump({"id": "INC-tz", "timezone": "America/Los_Angeles"}))
    (incident / "logs" / "vllm.log").write_text("\n".join(server_lines(stranger.pid, written) + [
        "(EngineCore_DP0 pid=77) " + OOM.format(stamp=stamp(written))]) + "\n")

    classified = triage("classify", str(incident), env=env)
    assert "log times lie in the future" in classified.stderr and "timezone" in classified.stderr

    plan = triage("recover", str(incident), "--runbook", "burst", "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    body = json.loads(plan.stdout)
    assert "in the future" in pids(body)[stranger.pid] and pids(body)[stranger.pid].startswith("refused")
    assert any("log times lie in the future" in n and "timezone" in n for n in body["notes"])

    done = triage("recover", str(incident), "--execute", "--yes", "--runbook", "burst", "--param",
                  "drain.max_wait_s=1", "--launch-command", "/nonexistent/vllm serve x", env=env)
    assert stranger.poll() is None and alive(stranger.pid)
    stop = next(json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()
                if json.loads(line).get("step") == "stop" and json.loads(line)["phase"] == "end")
    assert stop["data"]["signalled"] == []
    assert done.returncode == 1                          # the relaunch: no such program

    # The control: in its own zone, a sighting after the process started confirms it.
    (incident / "incident.yaml").write_text(yaml.safe_dump({"id": "INC-tz", "timezone": "UTC"}))
    (incident / "actions.jsonl").unlink()
    now = datetime.now(timezone.utc) + timedelta(seconds=1)
    (incident / "logs" / "vllm.log").write_text("\n".join(server_lines(stranger.pid, now) + [
        "(EngineCore_DP0 pid=77) " + OOM.format(stamp=stamp(now))]) + "\n")
    plan = triage("recover", str(incident), "--runbook", "burst", "--json", env=env)
    assert pids(json.loads(plan.stdout))[stranger.pid] == "confirmed"
    assert not any("future" in n for n in json.loads(plan.stdout)["notes"])


# --- a live scrape does not re-date an old log --------------------------------------------------------

def test_a_live_scrape_does_not_move_an_old_log_into_another_year(tmp_path):
    """A log from ten months ago (year-less stamps, dated by its mtime) read with a /metrics scrape
    taken now: the scrape says when triage ran, so the log keeps its year (before, it jumped to the
    next one, into the future)."""
    then = datetime.now(timezone.utc) - timedelta(days=300)
    log = tmp_path / "server.log"
    log.write_text(OOM.format(stamp=stamp(then)) + "\n")
    os.utime(log, (then.timestamp() + 3600, then.timestamp() + 3600))
    body = (b"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            b"# TYPE vllm:kv_cache_usage_perc gauge\n"
            b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n')

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        live = scrape(f"http://127.0.0.1:{server.server_port}/metrics")
        ev = load_evidence([str(log)], extra=[live])
    finally:
        server.shutdown()
    oom = next(e for e in ev.items if e.kind == "torch_oom")
    assert oom.time is not None and oom.time.year == then.year
    assert oom.time < datetime.now(timezone.utc)
    assert "file mtime" in next(s.time_note for s in ev.sources if s.path.endswith("server.log"))
    assert any(e.source.endswith("/metrics") and e.time is not None for e in ev.items)   # the scrape is still read
