"""`triage classify --prometheus URL`: a fleet classified from a real Prometheus's series.

Two kinds of test, both against Debian's `prometheus` (skipped, saying so, only where the
prometheus/promtool binaries are missing):
* series written as OpenMetrics (tests/fleetkit.py: one server per OOM class, and a fleet of 16
  in which 13 crash-loop at start-up after a rollout), turned into TSDB blocks by `promtool tsdb
  create-blocks-from openmetrics` and served by a real Prometheus; the same server behind a
  loopback proxy that checks credentials or stalls some queries, and behind TLS;
* a real Prometheus scraping `triage sim serve` instances every second while they are driven
  into their failures (the end-to-end test).
Every process runs in its own session and is killed as a process group; every wait is bounded.
"""
from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

import jsonschema
import pytest
from referencing import Registry, Resource

from triage.cli import main
from triage.live.fleet.cli import schema_path
from triage.paths import verdict_schema_path

from . import fleetkit as fk
from .simkit import MODEL, SMALL_CARD, START_S, complete, get, kill_group, wait_until, words

pytestmark = pytest.mark.skipif(fk.tools_missing() is not None, reason=fk.tools_missing() or "")

ZOO_T0 = 1773320400.0            # 2026-03-12T13:00:00Z: three hours, one server per class
FLEET_T0 = 1773324000.0          # 2026-03-12T14:00:00Z: one hour, a rollout at 14:16
ZOO = ["--selector", '{job="zoo"}', "--start", "2026-03-12T13:00:00Z", "--end", "2026-03-12T16:00:00Z"]
FLEET_A = ["--selector", '{job="fleet-a"}', "--start", str(FLEET_T0), "--end", str(FLEET_T0 + 3600)]


def zoo(f: fk.Fleet) -> None:
    ts = fk.times(ZOO_T0, ZOO_T0 + 3 * 3600, 15)
    fail = ZOO_T0 + 2 * 3600
    fk.healthy(f.server("zoo-healthy:8000", "zoo"), ts)
    fk.burst(f.server("zoo-burst:8000", "zoo"), ts, fail)
    fk.burst(f.server("zoo-burst-kv:8000", "zoo"), ts, fail + 300, gpu=False, back_after=None)
    fk.chronic(f.server("zoo-chronic:8000", "zoo"), ts, ZOO_T0 + 2.5 * 3600)
    fk.prefix_stall(f.server("zoo-prefix:8000", "zoo"), ts[-80:])
    fk.startup_loop(f.server("zoo-startup:8000", "zoo"), ts, fail + 600)
    fk.never_up(f.server("zoo-down:8000", "zoo"), ts)
    fk.oomkilled(f.server("10.0.0.8:8000", "zoo", pod="vllm-7", namespace="llm"), ts, fail + 900)
    fk.xid_fault(f.server("zoo-xid:8000", "zoo"), ts, fail + 1200)
    fk.never_up(f.server("gone-a:8000", "gone"), ts)
    fk.never_up(f.server("gone-b:8000", "gone"), ts)


def incident_a(f: fk.Fleet) -> None:
    """16 nodes; a rollout at 14:16; 13 crash-loop at start-up filling the card, 3 come back."""
    ts = fk.times(FLEET_T0, FLEET_T0 + 3600, 15)
    rollout = FLEET_T0 + 16 * 60
    for i in range(1, 17):
        server = f.server(f"gpu-node-{i:02d}:8000", "fleet-a")
        if i in (3, 9, 14):
            fk.rolled(server, ts, rollout)
        else:
            fk.startup_loop(server, ts, rollout, cycle=80 + 2 * i)


@pytest.fixture(scope="module")
def tsdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    f = fk.Fleet()
    zoo(f)
    incident_a(f)
    return fk.build_tsdb(fk.write_openmetrics(f, root / "fleet.om"), root / "data")


@pytest.fixture(scope="module")
def prom(tsdb: Path) -> Iterator[fk.Prometheus]:
    with fk.Prometheus(tsdb) as p:
        yield p.wait_ready()


def registry() -> Registry:
    schemas = [json.loads(p.read_text()) for p in (verdict_schema_path(), schema_path())]
    return Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in schemas])


def validate(doc: dict) -> None:
    jsonschema.Draft202012Validator(json.loads(schema_path().read_text()), registry=registry()).validate(doc)


def fleet_json(runner, url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict | None, str]:
    res = runner.invoke(main, ["classify", "--prometheus", url, *args, "--json"], env=env)
    doc = json.loads(res.stdout) if res.stdout.strip() else None
    if doc is not None:
        validate(doc)
    return res.exit_code, doc, res.stderr


def by_instance(doc: dict) -> dict[str, dict]:
    return {i["instance"]: i for i in doc["instances"]}


# --- the classes, from the series ---------------------------------------------------------------

def test_each_class_from_its_series(runner, prom):
    code, doc, err = fleet_json(runner, prom.url, *ZOO)
    assert code == 0, err
    got = by_instance(doc)
    assert {k: v["class"] for k, v in got.items()} == {
        "zoo-healthy:8000": "no_oom", "zoo-burst:8000": "burst", "zoo-burst-kv:8000": "burst",
        "zoo-chronic:8000": "chronic", "zoo-prefix:8000": "no_oom", "zoo-startup:8000": "startup",
        "zoo-down:8000": "unknown", "10.0.0.8:8000": "not_gpu_oom", "zoo-xid:8000": "not_gpu_oom"}
    # The card at its limit confirms an OOM; KV pressure alone makes it likely, not certain.
    assert got["zoo-burst:8000"]["confidence"] >= 0.6
    assert got["zoo-burst-kv:8000"]["confidence"] < 0.5
    assert "no GPU memory series" in got["zoo-burst-kv:8000"]["summary"]
    assert got["zoo-burst:8000"]["deciding"]["series"] == 'vllm:kv_cache_usage_perc{instance="zoo-burst:8000"}'
    chronic = got["zoo-chronic:8000"]
    assert chronic["deciding"]["series"].startswith('DCGM_FI_DEV_FB_USED{instance="zoo-chronic:9400"')
    assert "memory_leak" in {c["id"] for c in chronic["verdict"]["causes"]}
    startup = got["zoo-startup:8000"]
    assert startup["failure"]["phase"] == "starting" and startup["verdict"]["runbook"] == "startup"
    assert got["10.0.0.8:8000"]["deciding"]["series"].startswith("kube_pod_container_status_last_terminated_reason{")
    assert "host_oom" in {c["id"] for c in got["10.0.0.8:8000"]["verdict"]["causes"]}
    assert got["zoo-xid:8000"]["deciding"]["value"] == "79"
    # Every citation is a series reading, never a file and line.
    for item in doc["instances"]:
        for e in item["verdict"]["evidence"]:
            assert e["line"] is None and "@" in e["text"] and "=" in e["text"]


def test_unknown_names_the_log_to_pull(runner, prom):
    _, doc, _ = fleet_json(runner, prom.url, *ZOO)
    down = by_instance(doc)["zoo-down:8000"]
    assert down["failure"]["what"].startswith("never answered a scrape in the window")
    assert "triage collect --vllm-url http://zoo-down:8000" in down["verdict"]["attach"][0]
    pod = by_instance(doc)["10.0.0.8:8000"]["verdict"]["attach"][0]
    assert "kubectl logs --previous -n llm vllm-7" in pod


def test_rollout_fleet_summary_and_table(runner, prom):
    code, doc, _ = fleet_json(runner, prom.url, *FLEET_A)
    assert code == 0
    assert doc["summary"] == "13/16 instances: startup OOM after the 14:16 rollout; 3 healthy"
    assert doc["counts"] == {"startup": 13, "no_oom": 3}
    assert doc["rollout"] == "2026-03-12T14:16:00Z"
    res = runner.invoke(main, ["classify", "--prometheus", prom.url, *FLEET_A], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[-1] == "Summary: 13/16 instances: startup OOM after the 14:16 rollout; 3 healthy"
    row = next(ln for ln in lines if "gpu-node-07:8000" in ln)
    assert "startup" in row and "DCGM_FI_DEV_FB_USED{" in row and "@14:1" in row


def test_every_instance_unknown_exits_3(runner, prom):
    code, doc, _ = fleet_json(runner, prom.url, "--selector", '{job="gone"}', "--start", str(ZOO_T0),
                              "--end", str(ZOO_T0 + 3600))
    assert code == 3 and doc["counts"] == {"unknown": 2}


def test_nothing_matches_is_one_line_exit_1(runner, prom):
    res = runner.invoke(main, ["classify", "--prometheus", prom.url, "--selector", '{job="nope"}', "--since", "1h"])
    assert res.exit_code == 1 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and "no vLLM instance matches" in res.stderr


def test_unreachable_prometheus_is_one_line_exit_1(runner):
    res = runner.invoke(main, ["classify", "--prometheus", f"http://127.0.0.1:{fk.free_port()}", "--timeout", "2"])
    assert res.exit_code == 1
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("triage: http://127.0.0.1:")
    assert "cannot connect" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("args, message", [
    (["--prometheus", "http://127.0.0.1:9", "--since", "1h", "--start", "2026-03-12T13:00:00Z"], "not both"),
    (["--prometheus", "http://127.0.0.1:9", "--since", "soon"], "is not a duration"),
    (["--prometheus", "http://127.0.0.1:9", "--since", "30d", "--step", "1s"], "Prometheus allows 11,000"),
    (["--prometheus", "http://127.0.0.1:9", "--selector", 'job="vllm"'], "label matchers in braces"),
    (["--prometheus", "http://127.0.0.1:9", "some.log"], "give no PATH"),
    (["some.log", "--selector", '{job="x"}'], "go with --prometheus"),
])
def test_usage_errors(runner, args, message):
    res = runner.invoke(main, ["classify", *args])
    assert res.exit_code == 2 and message in res.stderr


def test_fleet_schema_command(runner):
    res = runner.invoke(main, ["schema", "--fleet"])
    assert res.exit_code == 0 and json.loads(res.stdout)["title"] == "triage.fleet/v1"
    jsonschema.Draft202012Validator.check_schema(json.loads(res.stdout))


# --- credentials, partial answers, TLS ------------------------------------------------------------

class Proxy:
    """A loopback HTTP server in front of Prometheus: refuses requests without the expected
    Authorization header; stalls the queries that contain `stall` (a slow shard)."""

    def __init__(self, upstream: str, authorization: str | None = None, stall: str | None = None,
                 stall_s: float = 4.0):
        proxy = self
        self.seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                got = self.headers.get("Authorization")
                proxy.seen.append(got or "")
                if authorization is not None and got != authorization:
                    return self._send(401, b"Unauthorized\n")
                if stall and stall in urllib.request.unquote(self.path):
                    time.sleep(stall_s)
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=30) as resp:
                        return self._send(resp.status, resp.read())
                except urllib.error.HTTPError as err:
                    return self._send(err.code, err.read())
                except OSError:                  # the test is over and Prometheus gone
                    return self._send(502, b"upstream gone\n")

            def _send(self, status: int, body: bytes):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(prom) -> Iterator[Callable[..., Proxy]]:
    made: list[Proxy] = []

    def make(**kwargs) -> Proxy:
        made.append(Proxy(prom.url, **kwargs))
        return made[-1]

    yield make
    for p in made:
        p.close()


TOKEN = "s3cr3t-fleet-token-0123456789"


def test_bearer_token_from_the_environment(runner, proxy):
    p = proxy(authorization=f"Bearer {TOKEN}")
    code, doc, err = fleet_json(runner, p.url, *FLEET_A, env={"TRIAGE_PROMETHEUS_TOKEN": TOKEN})
    assert code == 0 and doc["counts"]["startup"] == 13
    assert p.seen and all(h == f"Bearer {TOKEN}" for h in p.seen)
    assert TOKEN not in json.dumps(doc) + err


def test_basic_auth_from_the_environment_and_a_wrong_token(runner, proxy):
    import base64

    p = proxy(authorization="Basic " + base64.b64encode(b"oncall:hunter2-pass").decode())
    env = {"TRIAGE_PROMETHEUS_USER": "oncall", "TRIAGE_PROMETHEUS_PASSWORD": "hunter2-pass"}
    assert fleet_json(runner, p.url, *FLEET_A, env=env)[0] == 0
    res = runner.invoke(main, ["classify", "--prometheus", p.url, *FLEET_A], env={"TRIAGE_PROMETHEUS_TOKEN": TOKEN})
    assert res.exit_code == 1 and len(res.stderr.splitlines()) == 1
    assert "HTTP 401: the bearer token from TRIAGE_PROMETHEUS_TOKEN was refused" in res.stderr
    assert TOKEN not in res.stderr + res.stdout
    both = runner.invoke(main, ["classify", "--prometheus", p.url, *FLEET_A], env={**env, "TRIAGE_PROMETHEUS_TOKEN": TOKEN})
    assert both.exit_code == 1 and "not both" in both.stderr


def test_a_stalled_query_fails_its_instance_only(runner, proxy):
    p = proxy(stall='instance="zoo-chronic:8000"')
    started = time.monotonic()
    code, doc, err = fleet_json(runner, p.url, *ZOO, "--timeout", "1", "--parallel", "4")
    assert time.monotonic() - started < 20
    assert code == 0, err
    got = by_instance(doc)
    assert got["zoo-chronic:8000"]["class"] == "unknown"
    assert "no answer within 1s" in got["zoo-chronic:8000"]["error"]
    assert got["zoo-burst:8000"]["class"] == "burst" and got["zoo-healthy:8000"]["class"] == "no_oom"


def test_the_deadline_bounds_the_whole_pull(runner, proxy):
    p = proxy(stall="query_range", stall_s=3.0)
    started = time.monotonic()
    code, doc, _ = fleet_json(runner, p.url, *FLEET_A, "--timeout", "10", "--deadline", "2", "--parallel", "2")
    assert time.monotonic() - started < 15
    assert code == 3 and all(i["class"] == "unknown" for i in doc["instances"])
    assert any("deadline" in (i["error"] or "") for i in doc["instances"])


@pytest.fixture(scope="module")
def tls_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[fk.Prometheus, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a certificate")
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True, timeout=60)
    f = fk.Fleet()
    fk.healthy(f.server("tls-a:8000", "vllm"), fk.times(FLEET_T0, FLEET_T0 + 600, 15))
    data = fk.build_tsdb(fk.write_openmetrics(f, root / "tls.om"), root / "data")
    web = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    with fk.Prometheus(data, web_config=web) as p:
        yield p.wait_ready(tls=True), cert


def test_tls_is_verified_unless_told_otherwise(runner, tls_prom):
    p, cert = tls_prom
    url = p.url.replace("http://", "https://")
    window = ["--start", str(FLEET_T0), "--end", str(FLEET_T0 + 600)]
    refused = runner.invoke(main, ["classify", "--prometheus", url, *window])
    assert refused.exit_code == 1 and "TLS verification failed" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    code, doc, _ = fleet_json(runner, url, *window, env={"TRIAGE_PROMETHEUS_CA_BUNDLE": str(cert)})
    assert code == 0 and doc["counts"] == {"no_oom": 1}
    insecure = runner.invoke(main, ["classify", "--prometheus", url, *window, "--insecure", "--json"])
    assert insecure.exit_code == 0 and "are not verified (--insecure)" in insecure.stderr
    missing = runner.invoke(main, ["classify", "--prometheus", url, *window],
                            env={"TRIAGE_PROMETHEUS_CA_BUNDLE": str(cert) + ".nope"})
    assert missing.exit_code == 1 and "no such file" in missing.stderr


# --- end to end: a real Prometheus scraping simulators -------------------------------------------

class SimFleet:
    """`triage sim serve` processes on fixed loopback ports, each in its own session."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}

    def port(self, name: str) -> int:
        return self.ports.setdefault(name, fk.free_port())

    def start(self, name: str, *flags: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", str(self.port(name)),
                "--log", str(self.root / f"{name}.log"), *flags]
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        return self.procs[name]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def wait_health(self, name: str) -> None:
        assert wait_until(lambda: get(self.url(name) + "/health") == 200, START_S), f"{name} did not start"

    def kill(self, name: str) -> None:
        """What vLLM does after its engine died (without VLLM_KEEP_ALIVE_ON_ENGINE_DEATH): it exits."""
        kill_group(self.procs[name].pid)
        try:
            self.procs[name].wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[SimFleet]:
    fleet = SimFleet(tmp_path)
    yield fleet
    fleet.close()


def _send(url: str, prompt: str, max_tokens: int) -> int:
    """One completion; 0 when the server went away under it."""
    try:
        return complete(url, prompt, max_tokens, timeout=60)
    except (OSError, http.client.HTTPException):
        return 0


def _kv(url: str) -> float:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    line = next((ln for ln in text.splitlines() if ln.startswith("vllm:kv_cache_usage_perc{")), "x 0")
    return float(line.rsplit(" ", 1)[1])


def _burst(url: str) -> None:
    """Seven long prompts fill the KV cache past 90% as they generate; seconds later one more
    (short) request makes a step of eight, over --burst-concurrency 7 at 90% KV: out of memory."""
    for i in range(7):
        threading.Thread(target=_send, args=(url, words(3500, f"s{i}"), 580), daemon=True).start()
        time.sleep(0.1)
    assert wait_until(lambda: _kv(url) >= 0.9, 20), "the KV cache never filled"
    time.sleep(1.5)                                            # scraped at 90% and more
    _send(url, "one more", 4)


def _until_dead(url: str, prompt_of: Callable[[int], str], max_tokens: int, limit: int = 60) -> None:
    for i in range(1, limit + 1):
        if _send(url, prompt_of(i), max_tokens) != 200:
            return
        time.sleep(0.5)                                        # a scrape between requests


def test_real_prometheus_scraping_simulators(runner, sims, tmp_path):
    names = ("healthy", "burst", "chronic", "prefix", "startup")
    for name in names:
        sims.port(name)
    config = fk.scrape_config({"vllm": [f"127.0.0.1:{sims.ports[n]}" for n in names]}, interval="500ms")
    (tmp_path / "prom").mkdir()
    with fk.Prometheus(tmp_path / "prom", config) as prom:
        prom.wait_ready()
        began = time.time()
        sims.start("healthy")
        sims.start("burst", "--scenario", "burst", *SMALL_CARD, "--burst-concurrency", "7")
        sims.start("chronic", "--scenario", "chronic")
        sims.start("prefix", "--scenario", "prefix_cache", "--enable-prefix-caching", *SMALL_CARD)
        sims.start("startup", "--scenario", "startup")          # exits 1 at once: a target that is down
        for name in ("healthy", "burst", "chronic", "prefix"):
            sims.wait_health(name)
        time.sleep(2)                                          # a few scrapes of every server at rest
        drivers = {"burst": lambda: _burst(sims.url("burst")),
                   "chronic": lambda: _until_dead(sims.url("chronic"), lambda i: words(50, f"r{i}"), 2),
                   "prefix": lambda: _until_dead(sims.url("prefix"), lambda i: words(2400, f"p{i}"), 25),
                   "healthy": lambda: [_send(sims.url("healthy"), words(40, "h"), 8) for _ in range(10)]}
        threads = {name: threading.Thread(target=run, daemon=True) for name, run in drivers.items()}
        for t in threads.values():
            t.start()
        for name in ("burst", "chronic", "prefix"):
            # vLLM exits once its engine died (no VLLM_KEEP_ALIVE_ON_ENGINE_DEATH); the simulator stays
            # up answering 503, so it is stopped the moment it does.
            assert wait_until(lambda: get(sims.url(name) + "/health", timeout=1) == 503, 45), f"{name} did not fail"
            sims.kill(name)
        for t in threads.values():
            t.join(30)
        time.sleep(2)                                          # Prometheus sees them gone
        code, doc, err = fleet_json(runner, prom.url, "--selector", '{job="vllm"}', "--start", str(began - 2),
                                    "--end", str(time.time()), "--step", "500ms")
    assert code == 0, err
    got = {i["instance"].rsplit(":", 1)[1]: i for i in doc["instances"]}
    assert {name: got[str(sims.ports[name])]["class"] for name in ("healthy", "burst")} == \
        {"healthy": "no_oom", "burst": "burst"}, doc["summary"]
    burst = got[str(sims.ports["burst"])]
    assert burst["deciding"]["series"].startswith("vllm:kv_cache_usage_perc{") and burst["confidence"] < 0.5
    # From series alone the prefix-cache server's death shows no tie to the cache (the block pool's
    # error is in its log, not its metrics): a low hit rate costs no memory, so the flowchart names a
    # burst and says the hit rate it saw without counting it against the cache.
    prefix = got[str(sims.ports["prefix"])]
    assert prefix["class"] == "burst", prefix["summary"]
    steps = {s["question"]: s["why"] for s in prefix["verdict"]["path"]}
    assert "prefix caching is on (hit rate" in steps["Does the evidence fit a prefix-cache OOM?"]
    assert "nothing ties the failure to the cache" in steps["Does the evidence fit a prefix-cache OOM?"]
    # A death with no memory sign in the series, and a server that never answered: unknown, with the log to pull.
    for name in ("chronic", "startup"):
        item = got[str(sims.ports[name])]
        assert item["class"] == "unknown", item["summary"]
        assert f"triage collect --vllm-url http://127.0.0.1:{sims.ports[name]}" in item["verdict"]["attach"][0]
    assert got[str(sims.ports["startup"])]["failure"]["what"].startswith("never answered a scrape")
    assert got[str(sims.ports["chronic"])]["failure"]["phase"] == "serving"


def test_one_instance_around_a_moment(prom):
    from triage.live.fleet.fleet import classify_around
    from triage.live.fleet.promapi import PromClient

    client = PromClient(prom.url)
    try:
        one = classify_around(client, "zoo-burst:8000", ZOO_T0 + 2 * 3600, before_s=1800, after_s=120)
        missing = classify_around(client, "nowhere:8000", ZOO_T0 + 2 * 3600)
    finally:
        client.close()
    assert one.oom_class == "burst" and one.failure is not None and one.failure.phase == "serving"
    assert missing.oom_class == "unknown" and missing.error


def test_credentials_never_in_the_url(runner):
    res = runner.invoke(main, ["classify", "--prometheus", "https://oncall:hunter2@127.0.0.1:9"])
    assert res.exit_code == 1 and "hunter2" not in res.stderr
    assert "credentials go in TRIAGE_PROMETHEUS_USER/TRIAGE_PROMETHEUS_PASSWORD" in res.stderr
