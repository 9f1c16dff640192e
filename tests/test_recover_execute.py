"""`triage recover --execute` end to end: real simulator processes on loopback, real signals.

Each test writes an incident bundle whose logs/vllm.log is the simulator's own stderr (as a
service manager would capture it), drives the server into its failure, runs `triage recover`
as a separate process, and checks what a user relies on: the server serves again with the
advised flags, only the identified processes were signalled, and actions.jsonl tells the whole
story and verifies. Every wait is bounded; every process started is killed by its group.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from triage.live.nvml import NoNvml, read_gpus
from triage.recovery.lock import HostLock

from .simkit import MODEL, SMALL_CARD, START_S, alive, complete, get, kill_group, wait_until, words

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists() or not hasattr(os, "fork"),
                                reason="recovery identifies processes through /proc")

_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")
SHORT = ("--param", "steady.window_s=2")        # the bundled runbooks watch for minutes
README = Path(__file__).resolve().parent.parent / "README.md"


@dataclass
class Live:
    incident: Path
    proc: subprocess.Popen
    url: str = ""

    @property
    def log(self) -> Path:
        return self.incident / "logs" / "vllm.log"

    def pid_of(self, role: str) -> int:
        m = re.search(rf"\({role} pid=(\d+)\)", self.log.read_text(errors="replace"))
        assert m, f"no {role} line in the log"
        return int(m.group(1))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment `triage recover` runs in: a lock file of this test's own."""
    return {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "recover.lock")}


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Live]]:
    """Start a simulator whose log is INCIDENT/logs/vllm.log; kills it and whatever recovery relaunched."""
    started: list[Live] = []

    def run(*flags: str, ready: bool = True, name: str = "INC", extra_env: dict[str, str] | None = None) -> Live:
        incident = tmp_path / name
        (incident / "logs").mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", *flags]
        with open(incident / "logs" / "vllm.log", "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                    start_new_session=True, env={**os.environ, **(extra_env or {})})
        live = Live(incident, proc)
        started.append(live)
        if ready:
            live.url = _wait_url(live)
        return live

    yield run
    for live in started:
        kill_group(live.proc.pid)
        for launched in relaunched(live.incident):
            kill_group(launched["pid"])


def _wait_url(live: Live) -> str:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        m = _URL.search(live.log.read_text(errors="replace")) if live.log.exists() else None
        if m and get(m.group(1) + "/health") == 200:
            return m.group(1)
        if live.proc.poll() is not None:
            pytest.fail(f"simulator exited {live.proc.returncode}:\n{live.log.read_text()[-2000:]}")
        time.sleep(0.05)
    pytest.fail("simulator did not start serving in time")


def recover(incident: Path, env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", "recover", str(incident), *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=timeout)


def trusting(incident: Path, env: dict[str, str], *args: str) -> list[str]:
    """`--trust-bundle-launch DIGEST` for each command from the bundle that the dry run shows (what an
    operator does after reading the plan: --yes alone does not run such a command)."""
    plan = recover(incident, env, *args, "--json")
    assert plan.returncode == 0, plan.stderr
    return [arg for b in json.loads(plan.stdout)["bundle_commands"] for arg in ("--trust-bundle-launch", b["digest"])]


def records(incident: Path) -> list[dict]:
    path = incident / "actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def relaunched(incident: Path) -> list[dict]:
    return [r["data"]["launched"] for r in records(incident)
            if r.get("phase") == "end" and isinstance((r.get("data") or {}).get("launched"), dict)
            and r["data"]["launched"].get("pid")]


def ends(incident: Path) -> dict[str, str]:
    """step id -> result of its last end record."""
    return {r["step"]: r["result"] for r in records(incident) if r["phase"] == "end" and r.get("step")}


def cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def flags(argv: list[str]) -> dict[str, str | None]:
    """--flag -> its value (None for a bare switch)."""
    out: dict[str, str | None] = {}
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def gpu_check() -> str:
    """What `check_gpu_free` records on this machine for an idle card: skipped without an NVIDIA
    driver (the note says so), ok with one (the simulator holds no GPU memory)."""
    return "skipped" if isinstance(read_gpus(), NoNvml) else "ok"


def audit_ok(incident: Path, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "triage", "audit", "verify", str(incident)], capture_output=True,
                          text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "chain intact" in done.stdout


def new_server(incident: Path) -> tuple[int, str]:
    launched = relaunched(incident)[-1]
    url = next(r["data"]["url"] for r in reversed(records(incident))
               if r["phase"] == "end" and r["action"] == "wait_healthy")
    return launched["pid"], url


def until_failure(url: str, prompt_of: Callable[[int], str], max_tokens: int, limit: int) -> int:
    for i in range(1, limit + 1):
        if complete(url, prompt_of(i), max_tokens) != 200:
            return i
    pytest.fail(f"no failure after {limit} requests")


def concurrently(url: str, n: int, tag: str, tokens: int, max_tokens: int) -> list[int]:
    results: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        status = complete(url, words(tokens, f"{tag}{i}"), max_tokens, timeout=30)   # a loaded CI box is slow
        with lock:
            results.append(status)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    return results


# --- one recovery per OOM class ---------------------------------------------------------------------

def test_startup_relaunches_with_the_estimated_max_model_len(start, env):
    live = start("--scenario", "startup", ready=False)
    assert live.proc.wait(timeout=START_S) == 1
    estimate = int(re.search(r"estimated maximum model length is (\d+)", live.log.read_text()).group(1))
    # The server is gone, so its command line comes from the bundle (what `triage collect` records).
    (live.incident / "incident.yaml").write_text(yaml.safe_dump({
        "id": "INC-startup", "title": "start-up OOM", "timezone": "UTC",
        "launch": {"argv": [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0",
                            "--scenario", "startup"]}}))

    done = recover(live.incident, env, "--execute", "--yes", *SHORT, *trusting(live.incident, env, *SHORT))
    assert done.returncode == 0, done.stderr
    pid, url = new_server(live.incident)
    argv = cmdline(pid)
    assert argv[argv.index("--max-model-len") + 1] == str(estimate)
    assert complete(url, "hello after the fix", 2) == 200
    assert ends(live.incident) == {"stop-leftovers": "ok", "gpu-free": gpu_check(), "relaunch": "ok",
                                   "healthy": "ok", "steady": "ok"}
    audit_ok(live.incident, env)


def test_burst_relaunches_with_capped_concurrency_and_takes_the_same_spike(start, env):
    live = start("--scenario", "burst", "--max-num-batched-tokens", "8192", *SMALL_CARD)
    assert 500 in concurrently(live.url, 12, "b", 3200, 100)
    assert get(live.url + "/health") == 503
    api, engine = live.pid_of("APIServer"), live.pid_of("EngineCore_DP0")
    before = cmdline(api)

    done = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert done.returncode == 0, done.stderr
    assert not alive(api) and not alive(engine)
    pid, url = new_server(live.incident)
    after = cmdline(pid)
    changed = {k for k in set(flags(before)) | set(flags(after)) if flags(before).get(k) != flags(after).get(k)}
    # the sampler failed on a crowded step: fewer sequences per step, and the budget cut by the shortfall
    assert changed <= {"--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization"} \
        and "--max-num-seqs" in changed
    assert int(flags(after)["--max-num-seqs"]) <= 8 and int(flags(after)["--max-num-batched-tokens"]) <= 8192
    assert concurrently(url, 12, "c", 3200, 5) == [200] * 12
    recs = records(live.incident)
    stop = next(r for r in recs if r["step"] == "stop" and r["phase"] == "start")
    assert {p["pid"] for p in stop["args"]["pids"]} == {api}
    assert ends(live.incident)["shed-load"] == "handed"        # the manual step: --yes hands it to a person
    audit_ok(live.incident, env)


def test_chronic_relaunches_with_expandable_segments(start, env):
    live = start("--scenario", "chronic")
    sent = until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)

    done = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert done.returncode == 0, done.stderr
    pid, url = new_server(live.incident)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in environ
    assert all(complete(url, words(50, f"f{i}"), 2) == 200 for i in range(sent + 5))
    audit_ok(live.incident, env)


def test_a_server_that_logs_to_a_file_is_found_when_relaunched(start, env, tmp_path):
    """`--log FILE` (a real server run with `> server.log`): the relaunched server prints no
    serving line on its own output; recovery finds it through the log file its command line names."""
    log = tmp_path / "INC" / "logs" / "vllm.log"
    live = start("--scenario", "chronic", "--log", str(log))
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)

    began = time.monotonic()
    done = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 90           # not the relaunch step's 900 s timeout
    relaunch = next(r for r in records(live.incident) if r["step"] == "relaunch" and r["phase"] == "end")
    assert relaunch["result"] == "ok"
    assert f"from its log, {log}" in relaunch["output_tail"]
    assert "Starting vLLM API server" not in next((live.incident / "recovery").glob("relaunch-*.log")).read_text()
    pid, url = new_server(live.incident)
    assert cmdline(pid)[-2:] == ["--log", str(log)] and complete(url, "found by its log", 2) == 200
    audit_ok(live.incident, env)


def test_a_relaunched_server_is_found_by_the_port_its_own_process_listens_on(tmp_path):
    """Nothing announced anywhere (its log goes to /dev/null): the port its process tree holds,
    answering /health, is the server."""
    from triage.recovery.actions.relaunch_find import listening_urls

    proc = subprocess.Popen([sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--log", os.devnull],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert wait_until(lambda: any(get(u + "/health") == 200 for u in listening_urls(proc.pid)), START_S)
        assert all(u.startswith("http://127.0.0.1:") for u in listening_urls(proc.pid))
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
        try:
            assert listening_urls(idle.pid) == []          # a process that listens on nothing
        finally:
            kill_group(idle.pid)
    finally:
        kill_group(proc.pid)


def test_the_launch_collect_captured_is_relaunched_when_the_server_is_gone(start, env):
    """`process: argv:` in incident.yaml (what `triage collect` read from /proc) is the command
    relaunched — the logs would only rebuild `vllm serve ...` — and only once its digest is confirmed."""
    live = start("--scenario", "startup", ready=False)
    assert live.proc.wait(timeout=START_S) == 1
    captured = [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--scenario", "startup"]
    (live.incident / "incident.yaml").write_text(yaml.safe_dump({
        "id": "INC-collected", "title": "start-up OOM", "timezone": "UTC",
        "process": {"pid": live.proc.pid, "found_by": "listening on port 8000", "argv": captured,
                    "env": {"VLLM_API_KEY": "***", "TZ": "UTC"}}}))

    plan = recover(live.incident, env, *SHORT, "--json")
    assert plan.returncode == 0, plan.stderr
    assert "incident.yaml process.argv" in plan.stdout and "captured by triage collect" in plan.stdout
    refused = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert refused.returncode == 1 and not relaunched(live.incident)     # --yes alone does not run it

    done = recover(live.incident, env, "--execute", "--yes", *SHORT, *trusting(live.incident, env, *SHORT))
    assert done.returncode == 0, done.stderr
    pid, url = new_server(live.incident)
    argv = cmdline(pid)
    assert argv[:len(captured)] == captured and "--max-model-len" in argv
    assert Path(f"/proc/{pid}/environ").read_bytes().count(b"VLLM_API_KEY=***") == 0
    assert complete(url, "hello after the fix", 2) == 200


@pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "ps")), reason="the README's stop step uses bash and ps")
def test_the_readme_drill_stops_exactly_the_relaunched_server(start, env):
    """The last step of the README's drill: the server recovery relaunched is stopped by the PID
    its relaunch record holds, and nothing else is."""
    live = start("--scenario", "chronic")
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)
    done = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert done.returncode == 0, done.stderr
    pid, _ = new_server(live.incident)
    relaunch_log = next((live.incident / "recovery").glob("relaunch-*.log"))
    engine = int(re.search(r"\(EngineCore_DP0 pid=(\d+)\)", relaunch_log.read_text(errors="replace")).group(1))
    assert alive(pid) and alive(engine)
    bystander = start("--scenario", "healthy", name="OTHER")      # another simulator: must be left alone

    block = re.search(r"^A drill without a GPU.*?```bash\n(.*?)^```", README.read_text(encoding="utf-8"),
                      re.MULTILINE | re.DOTALL).group(1)
    stop = block[block.index("PID=$("):]
    assert "/tmp/drill/actions.jsonl" in stop and "kill $PID" in stop
    stop = stop.replace(".venv/bin/python", f'"{sys.executable}"').replace("/tmp/drill", str(live.incident))
    ran = subprocess.run(["bash", "-c", stop], capture_output=True, text=True, timeout=30, env=env)
    assert ran.returncode == 0, ran.stderr
    assert re.search(rf"^\s*{pid} .*sim serve", ran.stdout, re.MULTILINE), ran.stdout    # ps showed what is stopped
    assert wait_until(lambda: not alive(pid) and not alive(engine), 5)
    assert "Finished server process" in relaunch_log.read_text(errors="replace")      # a graceful SIGTERM stop
    assert alive(bystander.proc.pid) and get(bystander.url + "/health") == 200


def test_prefix_cache_relaunches_without_prefix_caching(start, env):
    live = start("--scenario", "prefix_cache", "--enable-prefix-caching", *SMALL_CARD)
    until_failure(live.url, lambda i: words(2400, f"p{i}"), 25, 30)

    done = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert done.returncode == 0, done.stderr
    pid, url = new_server(live.incident)
    argv = cmdline(pid)
    assert "--no-enable-prefix-caching" in argv and "--enable-prefix-caching" not in argv
    assert all(complete(url, words(2400, f"q{i}"), 1) == 200 for i in range(16))
    audit_ok(live.incident, env)


def test_rollback_relaunches_the_last_command_that_served(start, env):
    live = start("--scenario", "burst", "--max-num-batched-tokens", "8192", *SMALL_CARD)
    original = cmdline(live.pid_of("APIServer"))
    assert 500 in concurrently(live.url, 12, "b", 3200, 100)
    assert recover(live.incident, env, "--execute", "--yes", *SHORT).returncode == 0
    fixed, _ = new_server(live.incident)

    rollback = ("--runbook", "rollback")        # its command is read from actions.jsonl: confirmed by digest
    done = recover(live.incident, env, *rollback, "--execute", "--yes", *trusting(live.incident, env, *rollback))
    assert done.returncode == 0, done.stderr
    assert not alive(fixed)
    pid, url = new_server(live.incident)
    assert cmdline(pid) == original and pid != fixed
    assert complete(url, "rolled back", 2) == 200
    audit_ok(live.incident, env)


# --- the hard cases ---------------------------------------------------------------------------------

def test_a_server_that_ignores_sigterm_gets_sigkill_after_the_grace(start, env):
    live = start("--scenario", "ignore_sigterm")
    api = live.pid_of("APIServer")
    done = recover(live.incident, env, "--execute", "--yes", "--runbook", "chronic", "--force",
                   "--param", "stop.grace_s=1", *SHORT)
    assert done.returncode == 0, done.stderr
    assert not alive(api)
    stop = next(r for r in records(live.incident) if r["step"] == "stop" and r["phase"] == "end")
    assert stop["result"] == "ok" and f"SIGKILL {api}" in stop["output_tail"]
    assert stop["data"]["killed"] == [api]


def test_an_orphaned_worker_is_found_from_the_log_and_stopped(start, env):
    live = start("--scenario", "orphan_worker")
    worker, api = live.pid_of("Worker_TP0"), live.pid_of("APIServer")
    os.kill(api, signal.SIGKILL)                       # the crash leaves the worker holding the GPU
    assert wait_until(lambda: not alive(api), 5) and alive(worker)
    done = recover(live.incident, env, "--execute", "--yes", "--runbook", "chronic", *SHORT,
                   "--launch-command", f"{sys.executable} -m triage.sim serve {MODEL} --port 0")
    assert done.returncode == 0, done.stderr
    assert not alive(worker)
    stop = next(r for r in records(live.incident) if r["step"] == "stop" and r["phase"] == "start")
    (entry,) = [p for p in stop["args"]["pids"] if p["pid"] == worker]
    assert entry["role"] == "Worker_TP0" and "named in logs/vllm.log" in entry["why"]


# --- safety -------------------------------------------------------------------------------------------

@pytest.fixture
def decoy() -> Iterator[Callable[..., subprocess.Popen]]:
    procs: list[subprocess.Popen] = []

    def spawn(*argv: str) -> subprocess.Popen:
        code = "import time; time.sleep(120)"
        proc = subprocess.Popen([sys.executable, "-c", code, *argv], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield spawn
    for p in procs:
        kill_group(p.pid)


def test_an_unrelated_vllm_process_is_never_signalled(start, env, decoy):
    # Same model, "vllm serve" in its command line: exactly what `pkill -f vllm` would hit.
    neighbour = decoy("vllm", "serve", MODEL, "--port", "8001")
    live = start("--scenario", "chronic")
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)
    done = recover(live.incident, env, "--execute", "--yes", *SHORT)
    assert done.returncode == 0, done.stderr
    assert neighbour.poll() is None and alive(neighbour.pid)
    # As a whole number: the digits may well occur inside a hash or a MAC.
    assert not re.search(rf"(?<!\w){neighbour.pid}(?!\w)", (live.incident / "actions.jsonl").read_text())


FAKE_NVML = """
import json, os
_GPUS = json.loads(os.environ["FAKE_NVML_GPUS"])      # [[pid, ...] per GPU]
class _Proc:
    def __init__(self, pid): self.pid = pid; self.usedGpuMemory = 0
class _Mem:
    total = 80 * 2**30; used = 2**30; free = total - used
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return len(_GPUS)
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetMemoryInfo(h): return _Mem()
def nvmlDeviceGetComputeRunningProcesses(h): return [_Proc(p) for p in _GPUS[h]]
def nvmlDeviceGetGraphicsRunningProcesses(h): return []
def nvmlDeviceGetName(h): return "NVIDIA H100 80GB HBM3"
def nvmlDeviceGetUUID(h): return "GPU-%d" % h
"""


def test_a_neighbour_replica_listed_by_nvml_is_never_signalled(start, env, decoy, tmp_path):
    """On a GPU host NVML lists every server's processes: a neighbour replica on GPU 1 runs the same
    model, and its engine carries vLLM's process title. Neither may be touched."""
    replica = decoy("vllm", "serve", MODEL, "--port", "8001")
    engine = subprocess.Popen(["bash", "-c", 'exec -a "VLLM::EngineCore_DP0" sleep 120'], start_new_session=True)
    try:
        (tmp_path / "fakenvml").mkdir()
        (tmp_path / "fakenvml" / "pynvml.py").write_text(FAKE_NVML)
        nvml_env = {**env, "PYTHONPATH": str(tmp_path / "fakenvml"),
                    "FAKE_NVML_GPUS": json.dumps([[], [replica.pid, engine.pid]])}
        live = start("--scenario", "chronic", extra_env={"CUDA_VISIBLE_DEVICES": "0"})
        until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)
        plan = json.loads(recover(live.incident, nvml_env, "--json").stdout)
        refused = {p["pid"]: p["status"] for p in plan["pids"] if p["status"].startswith("refused")}
        assert set(refused) == {replica.pid, engine.pid} and all("another server" in r for r in refused.values())

        done = recover(live.incident, nvml_env, "--execute", "--yes", *SHORT)
        assert done.returncode == 0, done.stderr
        assert alive(replica.pid) and alive(engine.pid)
        stop = next(r for r in records(live.incident) if r["step"] == "stop" and r["phase"] == "start")
        assert {p["pid"] for p in stop["args"]["pids"]} == {live.pid_of("APIServer")}   # its engine died with the OOM
        assert ends(live.incident)["gpu-free"] == "ok"           # GPU 0, the server's own, is free
        audit_ok(live.incident, env)
    finally:
        kill_group(engine.pid)


def test_a_reused_pid_is_not_signalled(tmp_path, env, decoy):
    """The log names PID N; N now belongs to a program started after that line was written."""
    stranger = decoy("vllm", "serve", MODEL)          # even its command line looks right
    time.sleep(0.2)
    incident = tmp_path / "INC"
    (incident / "logs").mkdir(parents=True)
    (incident / "logs" / "vllm.log").write_text("\n".join([
        f"(APIServer pid={stranger.pid}) INFO 03-12 14:10:00 [api_server.py:1839] vLLM API server version 0.11.0",
        f"(APIServer pid={stranger.pid}) INFO 03-12 14:10:00 [utils.py:233] non-default args: "
        f"{{'model_tag': '{MODEL}', 'model': '{MODEL}'}}",
        f"(APIServer pid={stranger.pid}) INFO 03-12 14:10:30 [api_server.py:1911] Starting vLLM API server 0 on "
        "http://127.0.0.1:9",
        "(EngineCore_DP0 pid=77) ERROR 03-12 14:17:03 [core.py:710] EngineCore encountered a fatal error.",
        "(EngineCore_DP0 pid=77) ERROR 03-12 14:17:03 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Of the "
        "allocated memory 75.20 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.",
    ]) + "\n")
    plan = recover(incident, env, "--runbook", "burst", "--json")
    assert plan.returncode == 0, plan.stderr
    (entry,) = [p for p in json.loads(plan.stdout)["pids"] if p["pid"] == stranger.pid]
    assert entry["status"].startswith("refused") and "reused" in entry["status"]

    # No command to relaunch a server never seen: refused before anything is done.
    refused = recover(incident, env, "--execute", "--yes", "--runbook", "burst", "--param", "drain.max_wait_s=1")
    assert refused.returncode == 1 and "--launch-command" in refused.stderr and "nothing was done" in refused.stderr
    assert not (incident / "actions.jsonl").exists()

    done = recover(incident, env, "--execute", "--yes", "--runbook", "burst", "--param", "drain.max_wait_s=1",
                   "--launch-command", "/nonexistent/vllm serve x")
    assert stranger.poll() is None and alive(stranger.pid)
    stop = next(r for r in records(incident) if r["step"] == "stop" and r["phase"] == "end")
    assert stop["data"]["signalled"] == [] and "reused" in stop["output_tail"]
    assert done.returncode == 1                          # the relaunch: no such program


def test_a_second_recovery_is_refused_while_one_holds_the_lock(start, env):
    live = start("--scenario", "chronic")
    with HostLock(env["TRIAGE_LOCK_FILE"]):
        done = recover(live.incident, env, "--execute", "--yes", "--runbook", "chronic", "--force", *SHORT)
    assert done.returncode == 1
    assert f"pid {os.getpid()}" in done.stderr and "Traceback" not in done.stderr
    assert not (live.incident / "actions.jsonl").exists()
    assert alive(live.pid_of("APIServer"))


def test_a_step_timeout_fires_and_is_recorded(start, env, tmp_path):
    live = start("--scenario", "hang")                   # /health 200, completions never finish
    books = tmp_path / "books"
    books.mkdir()
    (books / "probe.yaml").write_text(yaml.safe_dump({
        "id": "probe", "title": "probe only", "applies_to": ["probe"], "summary": "prove it serves",
        "steps": [{"id": "healthy", "title": "serve a completion", "action": "wait_healthy",
                   "params": {"retries": 3, "backoff_s": 0.1, "completion_deadline_s": 60}, "timeout_s": 2,
                   "on_failure": "stop", "verify": "a 1-token completion returns"}]}))
    began = time.monotonic()
    done = recover(live.incident, env, "--execute", "--yes", "--runbook-dir", str(books), "--runbook", "probe",
                   "--url", live.url)
    assert done.returncode == 1 and time.monotonic() - began < 15
    end = next(r for r in records(live.incident) if r["step"] == "healthy" and r["phase"] == "end")
    assert end["result"] == "timeout" and "step timeout of 2 s" in end["output_tail"]
    audit_ok(live.incident, env)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "sighup"])
def test_an_interrupt_mid_step_leaves_a_valid_audit_log(start, env, signum):
    live = start("--scenario", "healthy")
    proc = subprocess.Popen([sys.executable, "-m", "triage", "recover", str(live.incident), "--execute", "--yes",
                             "--runbook", "chronic", "--force", "--param", "steady.window_s=60",
                             "--param", "steady.timeout_s=90"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_until(lambda: any(r["step"] == "steady" and r["phase"] == "start"
                                      for r in records(live.incident)), 60)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "Traceback" not in err and "re-run to resume" in err
    recs = records(live.incident)
    assert [(r["step"], r["result"]) for r in recs[-2:]] == [("steady", "interrupted"), (None, "interrupted")]
    audit_ok(live.incident, env)


def test_a_rerun_resumes_after_the_last_completed_step(start, env):
    live = start("--scenario", "chronic")
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)
    first = recover(live.incident, env, "--execute", "--yes", *SHORT, "--launch-command", "/nonexistent/vllm serve x")
    assert first.returncode == 1 and "cannot start '/nonexistent/vllm'" in first.stderr
    assert ends(live.incident) == {"drain": "ok", "stop": "ok", "gpu-free": gpu_check(), "relaunch": "failed"}

    second = recover(live.incident, env, "--execute", "--yes", *SHORT,
                     "--launch-command", f"{sys.executable} -m triage.sim serve {MODEL} --port 0 --scenario chronic")
    assert second.returncode == 0, second.stderr
    assert "steps drain, stop, gpu-free already completed" in second.stderr
    runs = [r for r in records(live.incident) if r["action"] == "run" and r["phase"] == "start"]
    assert runs[1]["args"]["resumes"] == runs[0]["run_id"]
    assert [r["step"] for r in records(live.incident) if r["run_id"] == runs[1]["run_id"] and r["phase"] == "start"
            and r["step"]] == ["relaunch", "healthy", "steady", "schedule-restarts"]
    _, url = new_server(live.incident)
    assert complete(url, "back", 2) == 200
    audit_ok(live.incident, env)


def test_a_server_left_running_by_an_interrupted_relaunch_is_stopped_not_doubled(start, env):
    """Ctrl-C while the relaunched server is still starting: the server keeps running (its own
    session), so the end record must name it, and the re-run must stop it before relaunching."""
    live = start("--scenario", "chronic")
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)
    slow = f"{sys.executable} -c 'import time; time.sleep(120)'"          # never announces its URL
    proc = subprocess.Popen([sys.executable, "-m", "triage", "recover", str(live.incident), "--execute", "--yes",
                             *SHORT, "--launch-command", slow],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_until(lambda: any(r["step"] == "relaunch" and r["phase"] == "start"
                                      for r in records(live.incident)), 60)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    end = next(r for r in records(live.incident) if r["step"] == "relaunch" and r["phase"] == "end")
    assert end["result"] == "interrupted"
    stuck = end["data"]["launched"]["pid"]
    assert alive(stuck)

    done = recover(live.incident, env, "--execute", "--yes", *SHORT,
                   "--launch-command", f"{sys.executable} -m triage.sim serve {MODEL} --port 0")
    assert done.returncode == 0, done.stderr
    assert "runs again" in done.stderr and not alive(stuck)
    second = [r for r in records(live.incident) if r["run_id"] == records(live.incident)[-1]["run_id"]]
    stop = next(r for r in second if r["step"] == "stop" and r["phase"] == "start")
    assert [p["pid"] for p in stop["args"]["pids"]] == [stuck]
    _, url = new_server(live.incident)
    assert complete(url, "back", 2) == 200
    audit_ok(live.incident, env)


def test_dry_run_writes_nothing_and_signals_nothing(start, env):
    live = start("--scenario", "chronic")
    until_failure(live.url, lambda i: f"request {i} " + words(50, f"r{i}"), 2, 40)
    before = {p.relative_to(live.incident): p.read_bytes() for p in live.incident.rglob("*") if p.is_file()}
    entries = sorted(live.incident.rglob("*"))
    done = recover(live.incident, env)
    assert done.returncode == 0, done.stderr
    assert "dry run" in done.stdout and f"signal: {live.pid_of('APIServer')} APIServer" in done.stdout
    after = {p.relative_to(live.incident): p.read_bytes() for p in live.incident.rglob("*") if p.is_file()}
    log = Path("logs/vllm.log")        # the live server keeps appending its stats lines
    assert sorted(live.incident.rglob("*")) == entries and after[log].startswith(before[log])
    after.pop(log), before.pop(log)
    assert after == before and alive(live.pid_of("APIServer"))
    assert not Path(env["TRIAGE_LOCK_FILE"]).exists()


def test_a_server_that_serves_again_is_left_alone(start, env):
    live = start("--scenario", "healthy")
    done = recover(live.incident, env, "--execute", "--yes", "--runbook", "chronic", *SHORT)
    assert done.returncode == 1 and "serves again" in done.stderr
    assert alive(live.pid_of("APIServer"))
    assert ends(live.incident) == {"drain": "aborted"}
