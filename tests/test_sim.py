"""End-to-end: the vLLM simulator as real processes on loopback, driven over HTTP, its log classified.

Every test starts `python -m triage.sim serve` in its own session (so the fixture can kill the
whole process group, orphan worker included), waits for /health, drives the scenario with
urllib, and checks what `triage` concludes from the log the simulator wrote. Every wait is
bounded.
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
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from triage.api import classify_paths
from triage.model import OomClass

from .chartkit import check_chart
from .simkit import MODEL, SMALL_CARD, START_S, alive, complete, get, wait_until, words

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the simulator's process tree needs fork")

_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")


@dataclass
class Sim:
    proc: subprocess.Popen
    log: Path
    url: str = ""

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def pid_of(self, name: str) -> int:
        m = re.search(rf"\({name} pid=(\d+)\)", self.log_text())
        assert m, f"no {name} line in the log"
        return int(m.group(1))


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    started: list[Sim] = []

    def start(*flags: str, ready: bool = True, env: dict[str, str] | None = None) -> Sim:
        log = tmp_path / f"vllm-{len(started)}.log"
        argv = [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--log", str(log), *flags]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        sim = Sim(proc, log)
        started.append(sim)
        if ready:
            sim.url = _wait_url(sim)
            _wait_health(sim.url)
        return sim

    yield start
    for sim in started:
        _kill_group(sim.proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)       # API server, engine core and any worker left behind
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _wait_url(sim: Sim) -> str:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if sim.log.exists():
            m = _URL.search(sim.log_text())
            if m:
                return m.group(1)
        if sim.proc.poll() is not None:
            pytest.fail(f"simulator exited {sim.proc.returncode} before serving:\n{sim.log_text()[-3000:]}")
        time.sleep(0.05)
    pytest.fail("simulator did not start serving in time")


def _wait_health(url: str) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if get(url + "/health") == 200:
            return
        time.sleep(0.05)
    pytest.fail("/health never answered 200")


def until_failure(url: str, prompt_of: Callable[[int], str], max_tokens: int, limit: int) -> int:
    """Sequential completions until one fails; the number sent."""
    for i in range(1, limit + 1):
        status = complete(url, prompt_of(i), max_tokens)
        if status != 200:
            assert status == 500
            return i
    pytest.fail(f"no failure after {limit} requests")


def classify(sim: Sim):
    verdict, _ = classify_paths([str(sim.log)])
    return verdict


# --- the OOM classes -------------------------------------------------------------------------------

def test_startup_kv_blowout_then_healthy_with_the_advised_max_model_len(start_sim):
    sim = start_sim("--scenario", "startup", ready=False)
    assert sim.proc.wait(timeout=START_S) == 1
    text = sim.log_text()
    estimate = int(re.search(r"the estimated maximum model length is (\d+)\.", text).group(1))
    assert "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): " \
           "{'EngineCore_DP0': 1}" in text

    verdict = classify(sim)
    assert verdict.oom_class is OomClass.STARTUP
    assert "kv_cache_blowout" in {c.id for c in verdict.causes}
    rec = next(r for r in verdict.recommendations if r.setting == "max_model_len")
    assert rec.to_value == estimate

    fixed = start_sim("--scenario", "startup", "--max-model-len", str(estimate))
    assert complete(fixed.url, "hello world", 2) == 200


def test_startup_utilisation_over_free_memory_exits_1(start_sim):
    sim = start_sim("--gpu-memory-utilization", "0.97", ready=False)
    assert sim.proc.wait(timeout=START_S) == 1
    assert "on startup is less than desired GPU memory utilization (0.97, 77.60 GiB)" in sim.log_text()
    assert classify(sim).oom_class is OomClass.STARTUP


def test_burst_over_the_concurrency_limit_kills_the_engine(start_sim):
    sim = start_sim("--scenario", "burst", "--max-num-batched-tokens", "8192", *SMALL_CARD)
    statuses: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        status = complete(sim.url, words(3200, f"b{i}"), max_tokens=100, timeout=30)   # a loaded CI box is slow
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert len(statuses) == 12 and 500 in statuses
    assert get(sim.url + "/health") == 503
    assert complete(sim.url, "after the crash", 2) == 500
    text = sim.log_text()
    assert "EngineCore encountered a fatal error." in text and "EngineDeadError" in text

    verdict = classify(sim)
    assert verdict.oom_class is OomClass.BURST, verdict.summary
    seqs = next(r for r in verdict.recommendations if r.setting == "max_num_seqs")
    assert seqs.to_value <= 8

    fixed = start_sim("--scenario", "burst", "--max-num-batched-tokens", "8192", "--max-num-seqs",
                      str(seqs.to_value), *SMALL_CARD)
    results: list[int] = []
    threads = [threading.Thread(target=lambda i=i: results.append(complete(fixed.url, words(3200, f"c{i}"), 5,
                                                                           timeout=30)),
                                daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert results == [200] * 12


def test_chronic_fragmentation_until_oom(start_sim):
    sim = start_sim("--scenario", "chronic")
    sent = until_failure(sim.url, lambda i: f"request {i} " + words(50, f"r{i}"), max_tokens=2, limit=40)
    assert sent > 1
    assert get(sim.url + "/health") == 503
    verdict = classify(sim)
    assert verdict.oom_class is OomClass.CHRONIC, verdict.summary
    assert "allocator_fragmentation" in {c.id for c in verdict.causes}
    env = next(r for r in verdict.recommendations if r.env)
    assert (env.setting, env.to_value) == ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

    fixed = start_sim("--scenario", "chronic", env={env.setting: env.to_value})
    assert all(complete(fixed.url, words(50, f"f{i}"), 2) == 200 for i in range(sent + 5))


def test_prefix_cache_pressure_until_oom(start_sim):
    sim = start_sim("--scenario", "prefix_cache", "--enable-prefix-caching", *SMALL_CARD)
    until_failure(sim.url, lambda i: words(2400, f"p{i}"), max_tokens=25, limit=30)
    rates = [float(x) for x in re.findall(r"Prefix cache hit rate: ([\d.]+)%", sim.log_text())]
    assert rates and max(rates) < 10
    verdict = classify(sim)
    assert verdict.oom_class is OomClass.PREFIX_CACHE, verdict.summary
    assert any(r.setting == "enable_prefix_caching" and r.to_value is False for r in verdict.recommendations)

    fixed = start_sim("--scenario", "prefix_cache", "--no-enable-prefix-caching", *SMALL_CARD)
    assert all(complete(fixed.url, words(2400, f"q{i}"), 1) == 200 for i in range(16))


def test_healthy_serves_and_stops_on_sigterm(start_sim):
    sim = start_sim()
    assert all(complete(sim.url, f"hello {i} " + words(40, "shared"), 8) == 200 for i in range(3))
    with urllib.request.urlopen(sim.url + "/metrics", timeout=2) as resp:
        metrics = resp.read().decode()
    for name in ("vllm:num_requests_running{", "vllm:kv_cache_usage_perc{", "vllm:prefix_cache_hits_total{",
                 "vllm:request_success_total{", "vllm:cache_config_info{"):
        assert name in metrics
    with urllib.request.urlopen(sim.url + "/v1/models", timeout=2) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == MODEL
    engine_pid = sim.pid_of("EngineCore_DP0")

    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=5) == 0
    assert wait_until(lambda: not alive(engine_pid), 3)
    verdict = classify(sim)
    assert verdict.oom_class is OomClass.NO_OOM, verdict.summary


# --- the hard cases ---------------------------------------------------------------------------------

def test_hang_answers_health_but_never_completes(start_sim):
    sim = start_sim("--scenario", "hang")
    assert get(sim.url + "/health") == 200
    began = time.monotonic()
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        complete(sim.url, "are you there", 2, timeout=2.0)
    assert time.monotonic() - began < 4
    assert get(sim.url + "/health") == 200


def test_ignore_sigterm_needs_sigkill(start_sim):
    sim = start_sim("--scenario", "ignore_sigterm")
    sim.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        sim.proc.wait(timeout=1.0)
    assert get(sim.url + "/health") == 200
    sim.proc.send_signal(signal.SIGKILL)
    assert sim.proc.wait(timeout=5) == -signal.SIGKILL


def test_orphan_worker_survives_a_sigkilled_server(start_sim):
    sim = start_sim("--scenario", "orphan_worker")
    worker, engine = sim.pid_of("Worker_TP0"), sim.pid_of("EngineCore_DP0")
    assert alive(worker) and alive(engine)
    try:
        sim.proc.send_signal(signal.SIGKILL)
        assert sim.proc.wait(timeout=5) == -signal.SIGKILL
        assert wait_until(lambda: not alive(engine), 3), "the engine core exits with its server, like vLLM's"
        time.sleep(0.3)
        assert alive(worker), "the worker outlived its parent"
        comm = Path(f"/proc/{worker}/comm")
        if comm.exists():
            assert comm.read_text().strip().startswith("VLLM::Worker")
    finally:
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert wait_until(lambda: not alive(worker), 3)


def test_click_command_passes_the_flags_through(tmp_path):
    log = tmp_path / "cli.log"
    code = "import sys; from triage.sim.cli import sim; sim(sys.argv[1:])"
    argv = [sys.executable, "-c", code, "serve", MODEL, "--gpu-memory-utilization", "0.97", "--log", str(log)]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=START_S)
    assert done.returncode == 1
    assert "'gpu_memory_utilization': 0.97" in log.read_text()
    helped = subprocess.run([sys.executable, "-c", code, "serve", "--help"], capture_output=True, text=True,
                            timeout=START_S)
    assert helped.returncode == 0 and "--scenario" in helped.stdout


# --- how it exits, how it names itself -------------------------------------------------------------

@pytest.mark.parametrize("flags, why", [
    (("--scenario", "startup"), "ValueError: To serve at least one request with the models's max seq len (1048576)"),
    (("--gpu-memory-utilization", "0.97"), "ValueError: Free memory on device (76.00/80.00 GiB) on startup is less "
                                            "than desired GPU memory utilization (0.97, 77.60 GiB)"),
])
def test_a_start_up_failure_says_why_on_stderr(tmp_path, flags, why):
    log = tmp_path / "vllm.log"
    done = subprocess.run([sys.executable, "-m", "triage", "sim", "serve", MODEL, "--port", "0", "--log", str(log),
                           *flags], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_S)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("triage.sim: exit 1: simulated start-up OOM, EngineCore failed to start: ")
    assert why in lines[0] and lines[0].endswith(f"(the vLLM log is {log})")
    assert "EngineCore failed to start." in log.read_text()      # the log has vLLM's own lines
    assert "triage.sim" not in log.read_text()


def test_without_log_the_start_up_failure_is_vllms_own_stderr(tmp_path):
    done = subprocess.run([sys.executable, "-m", "triage", "sim", "serve", MODEL, "--scenario", "startup"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_S)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("Failed core proc(s): {'EngineCore_DP0': 1}")   # as vLLM ends
    assert "triage.sim:" not in done.stderr                     # the log is evidence: nothing of ours in it


def test_a_port_in_use_says_why_on_stderr(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "vllm.log"
        done = subprocess.run([sys.executable, "-m", "triage", "sim", "serve", MODEL, "--port", str(port), "--log",
                               str(log)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_S)
    assert done.returncode == 1
    assert done.stderr.startswith(f"triage.sim: exit 1: cannot listen on 127.0.0.1:{port}: ")
    assert done.stderr.rstrip().endswith(f"(the vLLM log is {log})") and len(done.stderr.splitlines()) == 1


def test_help_names_the_command_as_invoked(runner):
    from triage.cli import main

    helped = runner.invoke(main, ["sim", "serve", "--help"], prog_name="triage")
    assert helped.exit_code == 0
    assert helped.stdout.startswith("Usage: triage sim serve ") and "--scenario" in helped.stdout
    # as every click command shows them: each default, short metavars, Options:
    for line in ("--port N ", "[default: 0]", "--max-num-seqs N ", "[default: 256]", "[default: healthy]"):
        assert line in helped.stdout, line
    assert "\nOptions:\n" in helped.stdout and "MAX_NUM_SEQS" not in helped.stdout
    bad = runner.invoke(main, ["sim", "serve", MODEL, "--max-num-seqs", "0"], prog_name="triage")
    assert bad.exit_code == 2 and "triage sim serve: error: --max-num-seqs must be at least 1" in bad.stderr
    direct = subprocess.run([sys.executable, "-m", "triage.sim", "serve", "--help"], capture_output=True, text=True,
                            timeout=START_S)
    assert direct.stdout.startswith("Usage: python -m triage.sim serve ")
    script = Path(sys.executable).with_name("triage")
    if script.exists():      # the console script of this environment
        out = subprocess.run([str(script), "sim", "serve", "--help"], capture_output=True, text=True, timeout=START_S)
        assert out.stdout.startswith("Usage: triage sim serve ")


# --- the README's burst drill, as written -----------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_block(marker: str) -> str:
    """The fenced block that follows `<!-- drill: NAME ...-->` in the README."""
    m = re.search(rf"^<!-- drill: {re.escape(marker)}\b.*?-->\n```bash\n(.*?)^```", README.read_text(encoding="utf-8"),
                  re.MULTILINE | re.DOTALL)
    assert m, f"no '{marker}' drill in README.md"
    return m.group(1)


@pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "curl", "seq")), reason="the drill needs bash and curl")
def test_readme_burst_drill_yields_burst_and_the_advised_cap_takes_the_spike(tmp_path, start_sim):
    script = readme_block("burst")
    assert "/tmp/burst" in script and ".venv/bin/triage" in script
    script = script.replace("/tmp/burst", str(tmp_path / "burst")).replace(".venv/bin/triage",
                                                                         f'"{sys.executable}" -m triage')
    log = tmp_path / "burst" / "logs" / "vllm.log"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "100"}, start_new_session=True)
    api = int(re.search(r"\(APIServer pid=(\d+)\)", log.read_text()).group(1))
    try:
        statuses = re.findall(r"\b([2-5]\d\d)\b", done.stdout.split("\n", 2)[1])
        assert len(statuses) == 100 and "500" in statuses, done.stdout[:2000]
        assert "BURST" in done.stdout, done.stdout
        verdict, _ = classify_paths([str(log)])
        assert verdict.oom_class is OomClass.BURST, verdict.summary
        assert "KV-cache usage reached" in verdict.summary
        assert wait_until(lambda: not alive(api), 5), "the drill's `kill $SIM` stops the simulator"
        text = log.read_text()
        assert "Finished server process" in text and "torch.OutOfMemoryError" in text
    finally:
        try:
            os.kill(api, signal.SIGKILL)
        except ProcessLookupError:
            pass

    drill_chart(tmp_path / "burst", "drill-burst")

    # The drill's flags plus the advised cap, the same spike (Python instead of curl): all served.
    flags = re.search(r"sim serve \S+ (.*?) --port 0", script.replace("\\\n", " ")).group(1).split()
    seqs = next(r for r in verdict.recommendations if r.setting == "max_num_seqs")
    fixed = start_sim(*flags, "--max-num-seqs", str(seqs.to_value))
    prompt = " ".join(str(n) for n in range(1, 1001))
    results: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        status = complete(fixed.url, f"request {i}: {prompt}", 100, timeout=60)
        with lock:
            results.append(status)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(70)
    assert results == [200] * 100


def drill_chart(bundle: Path, name: str) -> None:
    """The drill's postmortem chart, rendered to PNG: time labels, labels clear, data painted."""
    from triage.postmortem import render_postmortem

    pm = render_postmortem(bundle, output=bundle / "postmortem.md")
    assert pm.chart_svg is not None, f"{name}: no chart"
    check_chart(pm.chart_svg, name)


def run_drill(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """The README's drill block NAME as written, its /tmp folder moved under tmp_path."""
    script = readme_block(name)
    folder = re.search(r"mkdir -p (/tmp/\w+)/logs", script).group(1)
    assert ".venv/bin/triage" in script and "kill $SIM" in script
    bundle = tmp_path / Path(folder).name
    script = script.replace(folder, str(bundle)).replace(".venv/bin/triage", f'"{sys.executable}" -m triage')
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "COLUMNS": "100"}, start_new_session=True)
    return done, bundle


@pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "curl", "seq")), reason="the drill needs bash and curl")
@pytest.mark.parametrize("name, oom_class, statuses", [
    ("chronic", OomClass.CHRONIC, 20), ("prefix_cache", OomClass.PREFIX_CACHE, 30)])
def test_readme_drill_yields_its_class(tmp_path, name, oom_class, statuses):
    done, bundle = run_drill(name, tmp_path)
    log = bundle / "logs" / "vllm.log"
    try:
        codes = re.findall(r"\b([2-5]\d\d)\b", done.stdout.split("\n", 2)[1])
        assert len(codes) == statuses and codes[0] == "200" and codes[-1] == "500", done.stdout[:2000]
        assert oom_class.value.upper() in done.stdout, done.stdout
        verdict, _ = classify_paths([str(log)])
        assert verdict.oom_class is oom_class, verdict.summary
    finally:
        api = int(re.search(r"\(APIServer pid=(\d+)\)", log.read_text()).group(1))
        try:
            os.kill(api, signal.SIGKILL)
        except ProcessLookupError:
            pass
    drill_chart(bundle, f"drill-{name}")
