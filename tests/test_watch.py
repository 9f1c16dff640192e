"""`triage watch`: the risk rules on crafted readings, and the command end to end against
`triage sim serve` processes on loopback driven near each failure.

Only NVML is faked (this machine has no GPU): a stand-in `pynvml` module, written to a folder on
PYTHONPATH, reads its GPUs from a JSON file the test rewrites. Everything else is real: the
simulator's /metrics, prometheus-client's parser, the exporter's HTTP server, notes.jsonl and
`triage timeline`. Every wait is bounded.
"""
from __future__ import annotations

import http.client
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from triage.live.watch import risk as risk_mod
from triage.live.watch.alerts import Tracker
from triage.live.watch.readings import (SCHEMA, Condition, Fragmentation, GpuView, Load, Reading, Scrape, ServerView,
                                  Source, Trend)
from triage.live.watch.risk import LIMITS, Limits, assess
from triage.live.watch.scrape import ServerFetch, parse_metrics
from triage.live.watch.trend import MAX_POINTS, Window
from triage.thresholds import TABLE, Threshold

from .simkit import MODEL, SMALL_CARD, START_S, complete, get, kill_group, wait_until, words

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the simulator's process tree needs fork")

ROOT = Path(__file__).resolve().parent.parent
SPEC = yaml.safe_load((ROOT / "triage" / "data" / "exporter_metrics.yaml").read_text())["metrics"]
GiB = 1 << 30
RUN_S = 30          # the most any watch command here may take


# --- the risk rules, from crafted readings -------------------------------------------------------

def server(**kw) -> ServerView:
    base = dict(url="http://10.0.0.7:8000", gpus=(0,), sources={"metrics": Source(True, "ok"), "health": Source(True, "ok")},
                healthy=True, kv_cache_usage=0.4, running=4.0, waiting=0.0, preemptions_per_s=0.0,
                prefix_caching=True, prefix_hit_ratio_window=0.6, hit_window_s=300.0, gpu_memory_utilization=0.9,
                kv_capacity_tokens=29488, max_model_len=4096)
    base.update(kw)
    return ServerView(**base)


def gpu(used_share: float, trend: Trend | None = None, total: int = 80 * GiB, index: int = 0) -> GpuView:
    return GpuView(index, "NVIDIA H100 80GB HBM3", f"GPU-{index}", int(used_share * total), total, trend)


def classes(risks) -> list[tuple[str, str]]:
    return [(r.oom_class, r.level) for r in risks]


def test_a_quiet_server_is_heading_nowhere():
    assert assess(server(), [gpu(0.88)]) == ()


@pytest.mark.parametrize("kv, waiting, preempt, expected", [
    (0.97, 2, 0.0, ("burst", "critical")),        # kv_critical
    (0.91, 0, 0.0, ("burst", "warning")),         # kv_high
    (0.85, 14, 0.0, ("burst", "warning")),        # kv_busy with a queue of waiting_high
    (0.85, 0, 0.5, ("burst", "warning")),         # kv_busy while requests are preempted
    (0.85, 3, 0.0, None),                         # busy, but nothing held back
    (0.50, 40, 0.0, None),                        # a long queue with room in the pool: a concurrency cap
])
def test_burst_from_kv_pressure(kv, waiting, preempt, expected):
    risks = assess(server(kv_cache_usage=kv, running=8.0, waiting=float(waiting), preemptions_per_s=preempt,
                          prefix_hit_ratio_window=0.0), [])
    assert classes(risks) == ([expected] if expected else [])
    if expected:
        assert any(f"{kv:.0%}" in reason for reason in risks[0].reasons)


def test_prefix_cache_when_the_pool_holds_more_than_the_running_requests_can():
    s = server(kv_cache_usage=0.93, running=1.0, prefix_hit_ratio_window=0.04, hit_window_s=120.0)
    [risk] = assess(s, [])
    assert (risk.oom_class, risk.level) == ("prefix_cache", "warning")     # 93%: past kv_high, not kv_critical
    assert "27,424 of 29,488 tokens" in risk.reasons[0] and "at most 4,096" in risk.reasons[0]
    assert "hit rate 4% over the last 120 s, below prefix_hit_low 30%" in risk.reasons[1]
    # The same pool with eight requests running is their load: burst, not the cache.
    assert classes(assess(server(kv_cache_usage=0.93, running=8.0, prefix_hit_ratio_window=0.04), [])) == \
        [("burst", "warning")]
    # Caching off: the pool is the requests' whatever its size.
    assert classes(assess(server(kv_cache_usage=0.96, running=1.0, prefix_caching=False), [])) == \
        [("burst", "critical")]


def leak_trend(gib_per_h: float, hours: float) -> Trend:
    return Trend(gib_per_h * GiB, hours * 3600, 500)


@pytest.mark.parametrize("trend, load, leak", [
    (leak_trend(4.0, 1.5), Load(500, 6.0, True), True),      # +6 GiB (7.5% of the card) over 1.5 h, flat load
    (leak_trend(4.0, 1.5), Load(500, 6.0, False), False),    # the same rise with the load climbing: load
    (leak_trend(2.0, 1.5), Load(500, 6.0, True), False),     # +3 GiB: under leak_min_rise (5%)
    (leak_trend(12.0, 0.5), Load(500, 6.0, True), False),    # half an hour: under leak_min_span_s
    (leak_trend(-4.0, 1.5), Load(500, 6.0, True), False),    # falling
])
def test_flat_load_with_rising_memory_is_a_chronic_leak(trend, load, leak):
    risks = assess(server(load=load), [gpu(0.80, trend)])
    assert classes(risks) == ([("chronic", "warning")] if leak else [])
    if leak:
        assert "GPU 0 memory rising 4.00 GiB/h over 1.5 h" in risks[0].reasons[0]
        assert "while running requests stayed flat" in risks[0].reasons[0]


def frag(ratio: float, reserved: int = 40 * GiB, current: bool = True) -> Fragmentation:
    return Fragmentation(ratio, int(ratio * reserved), reserved, "memory_stats-x.json", None, 60.0, 4242, current)


@pytest.mark.parametrize("f, chronic", [
    (frag(0.40), True),
    (frag(0.25), False),                         # under inactive_split_share (a real H100 capture: 25%)
    (frag(0.40, reserved=512 << 20), False),     # under fragmentation_min_bytes: allocator slack
    (frag(0.40, current=False), False),          # the process that wrote it is gone
])
def test_fragmentation_from_a_hooks_dump(f, chronic):
    risks = assess(server(fragmentation=f), [])
    assert classes(risks) == ([("chronic", "warning")] if chronic else [])


@pytest.mark.parametrize("used, expected", [
    (0.925, None),                          # 2.5 points over the budget: within `discrepancy`
    (0.94, ("startup", "warning")),         # 4 points: memory the engine does not see
    (0.99, ("startup", "critical")),        # and under free_margin left on the card
])
def test_discrepancy_over_three_points(used, expected):
    risks = assess(server(), [gpu(used)])
    assert classes(risks) == ([expected] if expected else [])
    if expected:
        assert f"{(used - 0.9) * 100:.1f} points outside its accounting (discrepancy 3 points)" in risks[0].reasons[0]
    # A GPU that is not this server's says nothing about its budget.
    assert assess(server(gpus=()), [gpu(used)]) == () or expected is None


def test_no_headroom_budget_and_ordering():
    s = server(gpu_memory_utilization=0.96, kv_cache_usage=0.96, running=8.0, fragmentation=frag(0.5))
    risks = assess(s, [gpu(0.995)])
    # critical first, then the more specific class
    assert classes(risks) == [("startup", "critical"), ("burst", "critical"), ("chronic", "warning")]
    assert any("util_no_headroom 0.95" in r for r in risks[0].reasons)


def test_the_rules_read_the_thresholds_table():
    assert LIMITS == Limits.from_table(TABLE)
    assert LIMITS.kv_high == TABLE["kv_high"].value and LIMITS.discrepancy == TABLE["discrepancy"].value
    lowered = dict(TABLE, kv_high=Threshold(0.30, "share", "test", "test"))
    assert classes(assess(server(kv_cache_usage=0.4), [], Limits.from_table(lowered))) == [("burst", "warning")]
    # No number of the rules is written in the module itself.
    source = Path(risk_mod.__file__).read_text()
    code = source.split('"""', 2)[2]
    assert not re.search(r"(?<![\w.])0\.\d*[1-9]", code), "a threshold copied into risk.py"


# --- the pieces the loop is made of --------------------------------------------------------------

def test_trend_window_is_bounded_and_fits_a_line():
    w = Window(window_s=2 * 3600)
    for t in range(0, 6 * 3600, 1):                 # six hours of one reading a second
        w.add(float(t), 1e9 + 1000.0 * t)            # 1000 bytes a second
    fit = w.fit()
    assert len(w.points) <= MAX_POINTS + 2
    assert fit is not None and abs(fit.slope_per_s - 1000.0) < 1e-6
    assert w.points[-1][0] == 6 * 3600 - 1 and 2 * 3600 - 20 <= fit.span_s <= 2 * 3600
    day = Window()                                  # watch's own: a day, so a slow leak stands out
    for t in range(0, 30 * 3600, 10):
        day.add(float(t), 1e9)
    assert len(day.points) <= MAX_POINTS + 2 and 24 * 3600 - 200 <= day.fit().span_s <= 24 * 3600


def test_tracker_says_a_condition_once_and_again_only_after_it_cleared():
    t0 = datetime(2026, 3, 12, 14, 0, tzinfo=timezone.utc)
    c = Condition(("risk", "u", "burst"), "u: OOM risk burst", "u: OOM risk burst (warning): KV cache 93% full")
    tracker = Tracker(clear_after=3)
    seen = []
    pattern = [c, c, None, c, c, None, None, None, c, c]     # a one-reading gap is no clear
    for n, cond in enumerate(pattern):
        seen += [(n, e.kind, e.text) for e in tracker.update([cond] if cond else [], t0 + timedelta(seconds=n))]
    assert seen == [(0, "raised", c.text), (7, "cleared", "cleared after 7 s: u: OOM risk burst"), (8, "raised", c.text)]


V0_SCRAPE = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.42
vllm:num_requests_running{model_name="m"} 7.0
vllm:num_requests_waiting{model_name="m"} 3.0
vllm:num_preemptions_total{model_name="m"} 12.0
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.21
vllm:request_success_total{finished_reason="stop",model_name="m"} 90.0
vllm:request_success_total{finished_reason="length",model_name="m"} 10.0
vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 4.0
vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.95",num_gpu_blocks="27910"} 1.0
"""


def test_v0_and_v1_names_read_as_one_vocabulary():
    v0 = parse_metrics(V0_SCRAPE)
    assert (v0.kv_cache_usage, v0.running, v0.waiting, v0.preemptions_total, v0.success_total) == \
        (0.42, 7.0, 3.0, 12.0, 100.0)
    assert (v0.prefix_hit_rate_gauge, v0.prefix_caching, v0.gpu_memory_utilization) == (0.21, True, 0.95)
    assert (v0.num_gpu_blocks, v0.block_size) == (27910, 16)
    v1 = parse_metrics('vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3\n'
                       'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.8\n'
                       'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0\n'
                       'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 20.0\n'
                       'vllm:cache_config_info{enable_prefix_caching="False",engine="0"} 1.0\n')
    assert v1.kv_cache_usage == 0.8           # the fullest engine, not the sum
    assert (v1.prefix_queries_total, v1.prefix_hits_total, v1.prefix_caching) == (100.0, 20.0, False)
    with pytest.raises(ValueError):
        parse_metrics("vllm:num_requests_running{oops 1\n")


def test_a_dropped_keep_alive_connection_is_no_failure():
    """A server that closes its idle connections (uvicorn after 5 s) without saying so: the next
    reading goes out on a fresh connection instead of reporting the server down."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from triage.live.watch.scrape import Endpoint

    class ClosesSilently(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = b'vllm:num_requests_running{model_name="m"} 1.0\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ClosesSilently)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        endpoint = Endpoint(f"http://127.0.0.1:{httpd.server_address[1]}")
        for _ in range(3):
            assert endpoint.get("/metrics", 2.0).status == 200
            time.sleep(0.05)
        endpoint.close()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_json_fields_are_documented():
    from triage.live.watch import readings

    reading = Reading(datetime(2026, 3, 12, tzinfo=timezone.utc), 1.0, 0.8,
                      (server(fragmentation=frag(0.4), load=Load(3, 2.0, True)),), (gpu(0.5, leak_trend(1, 1)),),
                      Source(True, "ok"))
    doc = reading.to_json()
    keys = set(doc) | set(doc["servers"][0]) | set(doc["gpus"][0]) | set(doc["gpus"][0]["trend"]) \
        | set(doc["servers"][0]["fragmentation"]) | set(doc["servers"][0]["load"])
    undocumented = sorted(k for k in keys if not re.search(rf"\b{k}\b", readings.__doc__))
    assert not undocumented, f"fields missing from the triage.watch/v1 docstring: {undocumented}"


@pytest.mark.parametrize("args, message", [
    (["--vllm-url", "localhost:8000"], "is not an http(s) URL with a host"),
    (["--vllm-url", "http://a:1", "--hooks-dir", "x", "--hooks-dir", "y"], "give one per --vllm-url"),
    (["--no-nvml"], "nothing to watch"),
    (["--vllm-url", "http://a:1", "--once", "--exporter", "0"], "leave out --once"),
])
def test_usage_errors_exit_2(runner, args, message):
    from triage.cli import main

    result = runner.invoke(main, ["watch", *args])
    assert result.exit_code == 2 and message in result.stderr, result.stderr


# --- fake NVML ---------------------------------------------------------------------------------------

FAKE_PYNVML = '''
"""A stand-in for nvidia-ml-py: GPUs from the JSON file $FAKE_NVML_FILE, read at every call."""
import json, os, types


class NVMLError(Exception):
    pass


def _gpus():
    with open(os.environ["FAKE_NVML_FILE"]) as fh:
        return json.load(fh)


def nvmlInit():
    if not os.path.exists(os.environ.get("FAKE_NVML_FILE", "")):
        raise NVMLError("Driver Not Loaded")
    with open(os.environ["FAKE_NVML_FILE"] + ".inits", "a") as fh:
        fh.write("1")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetMemoryInfo(i):
    g = _gpus()[i]
    return types.SimpleNamespace(total=g["total"], used=g["used"], free=g["total"] - g["used"])


def nvmlDeviceGetComputeRunningProcesses(i):
    return [types.SimpleNamespace(pid=p) for p in _gpus()[i].get("pids", [])]


def nvmlDeviceGetGraphicsRunningProcesses(i):
    return []


def nvmlDeviceGetName(i):
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUUID(i):
    return "GPU-fake-%d" % i
'''


class FakeNvml:
    def __init__(self, root: Path) -> None:
        self.dir = root / "fake-nvml"
        self.dir.mkdir()
        (self.dir / "pynvml.py").write_text(FAKE_PYNVML)
        self.file = root / "gpus.json"

    def set(self, *used_shares: float, total: int = 80 * GiB) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"total": total, "used": int(s * total)} for s in used_shares]))
        tmp.replace(self.file)                  # a reader never sees half a file

    def env(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(self.dir), os.environ.get("PYTHONPATH", "")) if p)
        return {"PYTHONPATH": path, "FAKE_NVML_FILE": str(self.file)}

    def inits(self) -> int:
        path = Path(str(self.file) + ".inits")
        return len(path.read_text()) if path.exists() else 0


@pytest.fixture
def fake_nvml(tmp_path, monkeypatch) -> FakeNvml:
    fake = FakeNvml(tmp_path)
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(fake.dir))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    return fake


def test_watcher_trend_turns_flat_load_and_rising_memory_into_a_leak(fake_nvml, monkeypatch):
    """Two simulated hours, one reading a minute: the GPU gains 4 GiB an hour while four
    requests keep running; the slope comes from the readings, the risk from the slope."""
    from triage.live.watch import watcher as watcher_mod

    clock = {"t": 0.0}
    scrape = Scrape(kv_cache_usage=0.5, running=4.0, waiting=0.0, gpu_memory_utilization=0.9,
                    num_gpu_blocks=1843, block_size=16)
    monkeypatch.setattr(watcher_mod, "fetch", lambda endpoint, timeout, models: ServerFetch(
        Source(True, "ok"), Source(True, "ok"), scrape, True, 4096))
    w = watcher_mod.Watcher([watcher_mod.ServerSpec("http://10.0.0.7:8000")], 60.0, clock=lambda: clock["t"],
                            now=lambda: datetime(2026, 3, 12, tzinfo=timezone.utc) + timedelta(seconds=clock["t"]))
    try:
        for minute in range(121):
            clock["t"] = 60.0 * minute
            fake_nvml.set(0.70 + (4 * GiB / (80 * GiB)) * minute / 60)
            reading = w.read()
            if minute == 30:
                assert reading.servers[0].risks == ()        # rising, but not for long enough yet
    finally:
        w.close()
    [g] = reading.gpus
    assert g.trend is not None and abs(g.trend.slope_bytes_per_hour - 4 * GiB) < 0.01 * GiB
    assert reading.servers[0].load.steady and reading.servers[0].gpus == (0,)
    assert classes(reading.servers[0].risks) == [("chronic", "warning")]
    assert fake_nvml.inits() == 1                   # NVML opened once for the whole watch


# --- the command against simulators --------------------------------------------------------------

_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")


class Sim:
    def __init__(self, log: Path, *flags: str, port: int = 0) -> None:
        self.argv = argv = [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", str(port), "--log", str(log),
                            *flags]
        self.log = log
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        found = wait_until(lambda: log.exists() and _URL.search(log.read_text()) is not None, START_S)
        assert found, f"the simulator did not start:\n{log.read_text()[-2000:] if log.exists() else ''}"
        self.url = _URL.search(log.read_text()).group(1)
        assert wait_until(lambda: get(self.url + "/health") == 200, START_S)

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}

    def stop(self) -> None:
        kill_group(self.proc.pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class SimPool:
    """Simulators started on first use and shared by the tests of this module (each is only read
    once driven where it should be)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[str, Sim] = {}

    def get(self, name: str, *flags: str, drive=None) -> Sim:
        if name not in self.started:
            self.started[name] = sim = Sim(self.root / f"{name}.log", *flags)
            if drive:
                drive(sim)
        return self.started[name]


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> Iterator[SimPool]:
    pool = SimPool(tmp_path_factory.mktemp("sims"))
    try:
        yield pool
    finally:
        for sim in pool.started.values():
            sim.stop()


def healthy(sims) -> Sim:
    return sims.get("healthy")


def prefix_near_failure(sims) -> Sim:
    """12 distinct 2,400-token prompts: the never-evicted cache holds 98% of the 29,488-token
    pool; a 13th would fail (tests/test_sim.py drives the same server to the OOM)."""
    def drive(sim: Sim) -> None:
        for i in range(12):
            assert complete(sim.url, words(2400, f"p{i}"), 25, timeout=30) == 200
    return sims.get("prefix", "--scenario", "prefix_cache", "--enable-prefix-caching", *SMALL_CARD,
                             drive=drive)


def watch(*args: str, env: dict[str, str] | None = None, timeout: float = RUN_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", "watch", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def once(*args: str, env: dict[str, str] | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    done = watch("--once", "--json", *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout), done


def test_once_json_on_a_healthy_server(sims):
    sim = healthy(sims)
    assert complete(sim.url, "hello " + words(40, "h"), 4) == 200
    doc, done = once("--vllm-url", sim.url, "--no-nvml")
    assert done.returncode == 0, done.stderr
    assert doc["schema"] == SCHEMA and doc["nvml"] is None and doc["warnings"] == []
    [s] = doc["servers"]
    assert s["url"] == sim.url and s["healthy"] is True and s["risk"] is None
    assert s["sources"]["metrics"]["ok"] and s["sources"]["health"]["ok"]
    assert (s["gpu_memory_utilization"], s["prefix_caching"], s["max_model_len"]) == (0.9, True, 131072)
    assert s["kv_capacity_tokens"] > 0 and s["kv_cache_usage"] == 0.0
    assert s["prefix_cache_hit_ratio_window"] is not None and s["hit_window_s"] is None   # since the start


def test_prefix_cache_server_near_failure(sims, tmp_path):
    sim = prefix_near_failure(sims)
    doc, done = once("--vllm-url", sim.url, "--no-nvml", "--incident", str(tmp_path))
    assert done.returncode == 0
    risk = doc["servers"][0]["risk"]
    assert risk["class"] == "prefix_cache" and risk["level"] == "critical", risk
    assert "while no request is running: cached prefixes hold the rest" in risk["reasons"][0]
    assert "hit rate 0% since the server started" in risk["reasons"][1]
    assert doc["warnings"][0].startswith(f"{sim.url}: OOM risk prefix_cache (critical): KV cache 98% full")
    [note] = [json.loads(line) for line in (tmp_path / "notes.jsonl").read_text().splitlines()]
    assert note["text"] == "triage watch: " + doc["warnings"][0] and note["author"] == "triage watch"


def _quietly(url: str, prompt: str, max_tokens: int) -> None:
    """A completion whose outcome does not matter: the server is stopped under it."""
    try:
        complete(url, prompt, max_tokens, timeout=60)
    except (OSError, http.client.HTTPException):
        pass


def test_burst_server_near_failure(tmp_path):
    """The burst scenario with the concurrency capped at what it survives (8), and 12 long
    prompts: the pool fills, requests queue and get preempted, nothing fails yet."""
    sim = Sim(tmp_path / "burst.log", "--scenario", "burst", "--max-num-batched-tokens", "8192", "--max-num-seqs",
              "8", *SMALL_CARD)
    try:
        for i in range(12):
            threading.Thread(target=_quietly, args=(sim.url, words(3500, f"b{i}"), 500), daemon=True).start()
        assert wait_until(lambda: sim.metrics().get("vllm:kv_cache_usage_perc", 0) >= 0.9, 20)
        doc, done = once("--vllm-url", sim.url, "--no-nvml")
        assert done.returncode == 0
        s = doc["servers"][0]
        assert s["risk"]["class"] == "burst" and s["requests_running"] <= 8, s
        assert "KV cache" in s["risk"]["reasons"][0] and "(kv_" in s["risk"]["reasons"][0]
        assert [r["class"] for r in s["risks"]] == ["burst"]        # the pool is the requests': no prefix_cache
        assert get(sim.url + "/health") == 200                      # near failure, not failed
    finally:
        sim.stop()


FRAGMENTED = {"reserved_bytes.all.current": 40 * GiB, "reserved_bytes.all.peak": 41 * GiB,
              "allocated_bytes.all.current": 22 * GiB, "inactive_split_bytes.all.current": 16 * GiB,
              "num_alloc_retries": 9, "num_ooms": 0}


def hooks_dump(directory: Path, stats: dict, monkeypatch) -> list[str]:
    """A dump written by triage.hooks itself, from a stand-in torch with these memory_stats."""
    from triage import hooks

    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, device_count=lambda: 1,
                                 current_device=lambda: 0, memory_stats=lambda device=None: dict(stats),
                                 memory_summary=lambda device=None, abbreviated=False: "summary")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda, __version__="2.11.0+fake"))
    written = hooks.dump("signal", directory=directory)
    monkeypatch.delitem(sys.modules, "torch")
    return written


def test_chronic_server_near_failure_with_a_fragmented_hooks_dump(tmp_path, monkeypatch):
    sim = Sim(tmp_path / "chronic.log", "--scenario", "chronic")
    try:
        # Each request leaves 512 MiB of fragments; the eighth would leave no room: stop at six.
        assert all(complete(sim.url, f"request {i} " + words(50, f"r{i}"), 2) == 200 for i in range(6))
        hooks_dir = tmp_path / "hooks"
        real = json.loads((ROOT / "tests/real_gpu/h100/oom-fragmented/memory_stats.json").read_text())
        assert hooks_dump(hooks_dir, real, monkeypatch)             # an H100's: 25%, shown, not a risk
        doc, _ = once("--vllm-url", sim.url, "--no-nvml", env={"TRIAGE_HOOKS_DIR": str(hooks_dir)})
        s = doc["servers"][0]
        assert s["fragmentation"]["ratio"] == pytest.approx(0.2498, abs=1e-3) and s["risk"] is None
        time.sleep(0.01)                                            # the next dump has a later name
        assert hooks_dump(hooks_dir, FRAGMENTED, monkeypatch)
        doc, done = once("--vllm-url", sim.url, "--no-nvml", "--hooks-dir", str(hooks_dir))
        s = doc["servers"][0]
        assert done.returncode == 0 and s["sources"]["hooks"]["ok"]
        assert s["fragmentation"]["ratio"] == 0.4 and s["fragmentation"]["current"] is True
        assert s["risk"]["class"] == "chronic", s
        assert "allocator fragmentation 40%: inactive_split 16.00 GiB of 40.00 GiB reserved" in s["risk"]["reasons"][0]
    finally:
        sim.stop()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_and_silent_servers_are_reported_per_source(sims):
    sim = healthy(sims)
    dead = f"http://127.0.0.1:{closed_port()}"
    doc, done = once("--vllm-url", dead, "--no-nvml")
    assert done.returncode == 1                                     # nothing at all could be read
    assert done.stderr.strip() == "triage: nothing could be read: every server unreachable and no GPU reading"
    assert doc["servers"][0]["sources"]["metrics"] == {"ok": False, "detail": "GET /metrics: connection refused",
                                                       "took_s": None}
    assert doc["warnings"] == [f"{dead}: not answering: GET /metrics: connection refused"]
    # unreachable is unknown, said as such: never "none seen"
    assert doc["servers"][0]["risk"] is None
    assert doc["servers"][0]["risk_unknown"] == "/metrics not read (GET /metrics: connection refused)"
    shown = watch("--once", "--vllm-url", dead, "--no-nvml", env={"COLUMNS": "200"})
    assert "OOM risk       unknown: /metrics not read" in shown.stdout and "none seen" not in shown.stdout

    with socket.socket() as silent:                 # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mute = f"http://127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        doc, done = once("--vllm-url", sim.url, "--vllm-url", mute, "--vllm-url", dead, "--interval", "1")
    assert time.monotonic() - began < 10
    assert done.returncode == 0                     # the healthy one was read
    ok, quiet, refused = doc["servers"]
    assert ok["sources"]["metrics"]["ok"] and ok["gpus"] == [] and ok["risk_unknown"] is None
    assert quiet["risk_unknown"].startswith("/metrics not read")
    assert quiet["sources"]["metrics"]["detail"] == "GET /metrics: timed out after 0.8 s"
    assert refused["sources"]["health"]["detail"] == "GET /health: connection refused"
    assert doc["nvml"]["ok"] is False and "no GPU readings" in doc["nvml"]["detail"]


def test_nvml_present_discrepancy_over_three_points(sims, fake_nvml):
    sim = healthy(sims)
    fake_nvml.set(0.95, 0.50)                        # GPU 0 at 95% against a 0.90 budget; GPU 1 not the server's
    doc, done = once("--vllm-url", f"{sim.url}=0", env=fake_nvml.env())
    assert done.returncode == 0 and doc["nvml"]["ok"]
    assert [(g["index"], g["used_share"]) for g in doc["gpus"]] == [(0, 0.95), (1, 0.5)]
    s = doc["servers"][0]
    assert s["gpus"] == [0] and s["discrepancy_points"] == {"0": 5.0}
    assert s["risk"]["class"] == "startup"
    assert "GPU 0: NVML 95.0% used vs the engine's budget 90%: 5.0 points" in s["risk"]["reasons"][0]


def start_watch(*args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "triage", "watch", *args],
                            env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL, **popen)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[str, str]:
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"watch did not stop on signal {sig}:\n{err}")
    return out, err


def test_exporter_serves_the_yaml_gauges(sims, fake_nvml, tmp_path, monkeypatch):
    sim = prefix_near_failure(sims)
    fake_nvml.set(0.95)
    hooks_dir = tmp_path / "hooks"
    hooks_dump(hooks_dir, FRAGMENTED, monkeypatch)
    proc = start_watch("--vllm-url", sim.url, "--interval", "0.3", "--exporter", "0", "--hooks-dir", str(hooks_dir),
                       env=fake_nvml.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()               # "triage watch: every 0.3 s; exporter http://...; ..."
        m = re.search(r"exporter (http://127\.0\.0\.1:\d+/metrics)", first)
        assert m, first
        text = ""

        def scraped_twice() -> bool:                 # rates need two readings
            nonlocal text
            with urllib.request.urlopen(m.group(1), timeout=5) as resp:
                text = resp.read().decode()
            return "triage_preemptions_per_second{" in text
        assert wait_until(scraped_twice, 15)
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0 and "Traceback" not in err
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == set(SPEC), "every gauge of the yaml, and nothing else"
    values = {}
    for name, fam in families.items():
        assert fam.type == "gauge" and fam.documentation == " ".join(SPEC[name]["help"].split())
        for sample in fam.samples:
            assert set(sample.labels) == set(SPEC[name]["labels"]), (name, sample.labels)
            values[(name, tuple(sorted(sample.labels.items())))] = sample.value
    srv = ("server", sim.url)
    assert values[("triage_kv_cache_usage_ratio", (srv,))] == pytest.approx(0.9767, abs=1e-3)
    assert values[("triage_engine_memory_budget_ratio", (srv,))] == 0.9
    assert values[("triage_allocator_fragmentation_ratio", (srv,))] == 0.4
    assert values[("triage_nvml_engine_discrepancy_points", (("gpu", "0"), srv))] == pytest.approx(5.0)
    assert values[("triage_gpu_memory_used_bytes", (("gpu", "0"), ("uuid", "GPU-fake-0")))] == int(0.95 * 80 * GiB)
    assert values[("triage_gpu_memory_total_bytes", (("gpu", "0"), ("uuid", "GPU-fake-0")))] == 80 * GiB
    risk = {cls: values[("triage_oom_risk", (("class", cls), srv))] for cls in ("startup", "burst", "chronic",
                                                                              "prefix_cache")}
    assert risk == {"startup": 1.0, "burst": 0.0, "chronic": 1.0, "prefix_cache": 1.0}
    up = {src: values[("triage_source_up", (("server", sim.url if src != "nvml" else ""), ("source", src)))]
          for src in ("metrics", "health", "hooks", "nvml")}
    assert up == {"metrics": 1.0, "health": 1.0, "hooks": 1.0, "nvml": 1.0}
    # Plain output on a pipe: one line per raised condition, each once.
    raised = [line for line in out.splitlines() if " raised: " in line]
    assert sorted(re.search(r"OOM risk (\w+)", line).group(1) for line in raised) == \
        ["chronic", "prefix_cache", "startup"]


def test_incident_gets_each_warning_once_beside_concurrent_notes(sims, tmp_path):
    sim = prefix_near_failure(sims)
    incident = tmp_path / "INC"
    incident.mkdir()
    (incident / "incident.yaml").write_text('id: INC-7\ncreated: "2026-03-12T14:00:00Z"\ntimezone: UTC\n')
    proc = start_watch("--vllm-url", sim.url, "--no-nvml", "--interval", "0.2", "--incident", str(incident),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for i in range(4):                            # people noting things while watch writes
            done = subprocess.run([sys.executable, "-m", "triage", "note", str(incident), f"looked at KV {i}",
                                   "--author", "dana"], capture_output=True, text=True, timeout=RUN_S)
            assert done.returncode == 0, done.stderr
        notes = incident / "notes.jsonl"
        assert wait_until(lambda: notes.exists() and "triage watch:" in notes.read_text(), 15)
        time.sleep(1.0)                               # several more readings of the same condition
    finally:
        _, err = stop(proc)
    assert proc.returncode == 0 and "Traceback" not in err
    records = [json.loads(line) for line in (incident / "notes.jsonl").read_text().splitlines()]
    ours = [r for r in records if r["author"] == "triage watch"]
    assert len(ours) == 1 and len(records) == 5
    assert ours[0]["text"].startswith(f"triage watch: {sim.url}: OOM risk prefix_cache (critical): KV cache 98%")
    timeline = subprocess.run([sys.executable, "-m", "triage", "timeline", str(incident), "--json"],
                              capture_output=True, text=True, timeout=RUN_S)
    assert timeline.returncode == 0, timeline.stderr
    events = [e for e in json.loads(timeline.stdout)["events"] if "triage watch:" in e["text"]]
    assert len(events) == 1
    event = events[0]
    assert event["time"] == ours[0]["time"]
    assert (event["category"], event["kind"]) == ("signal", "monitor_warning")     # not a person's response
    assert any(src.startswith("notes.jsonl:") for src in event["sources"])


def test_sigint_stops_the_plain_watch_cleanly(sims):
    sim = healthy(sims)
    proc = start_watch("--vllm-url", sim.url, "--no-nvml", "--interval", "0.2", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert proc.stderr.readline().startswith("triage watch: every 0.2 s")
    time.sleep(0.5)
    out, err = stop(proc, signal.SIGINT)
    assert proc.returncode == 130 and err.strip() == "triage: interrupted", err
    assert "Traceback" not in out + err


def test_sigint_stops_the_live_dashboard_on_a_terminal(sims):
    sim = healthy(sims)
    master, slave = pty.openpty()
    proc = start_watch("--vllm-url", sim.url, "--no-nvml", "--interval", "0.2", stdout=slave, stderr=slave,
                       env={"COLUMNS": "100", "TERM": "xterm"})
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and seen.count(b"OOM risk") < 2:       # drawn at least twice
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        proc.send_signal(signal.SIGINT)
        end = time.monotonic() + RUN_S
        while proc.poll() is None and time.monotonic() < end:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = seen.decode("utf-8", "replace")
    assert seen.count(b"OOM risk") >= 2 and sim.url in text and "serving" in text
    assert proc.returncode == 130 and "Traceback" not in text
    assert "triage: interrupted" in text
