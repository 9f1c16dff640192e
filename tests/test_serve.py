"""`triage serve`, the Alertmanager webhook receiver, run as a process on a loopback port.

Payloads are posted the way Alertmanager posts them (and, in the last tests, by a real
`prometheus-alertmanager` and over a real Prometheus); a small HTTP sink in the test takes the
verdicts the receiver posts. Every wait is bounded, every process is stopped with its group.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import ROOT, SAMPLES
from tests.fleetkit import free_port

STARTUP_AT = "2025-10-14T09:13:12Z"      # the startup sample's own date: its year-less log times read right
BURST_AT = "2024-11-06T14:16:21Z"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


# -- helpers --------------------------------------------------------------------------------------

class Sink:
    """Takes the receiver's posts: each JSON body in order; `delay` holds every answer back."""

    def __init__(self, delay: float = 0.0) -> None:
        self.posts: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.arrived.set()
                time.sleep(sink.delay)
                sink.posts.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.delay = delay
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def firing(self) -> dict[str, dict[str, Any]]:
        return {p["alert"]["fingerprint"]: p for p in self.posts if p.get("event") == "firing"}


class Serve:
    """`triage serve` as a process in a session of its own."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None, incidents: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.incidents = incidents or tmp / "incidents"
        self.stderr = tmp / f"serve-{self.port}.log"
        argv = [sys.executable, "-m", "triage", "serve", "--listen", f"127.0.0.1:{self.port}",
                "--incidents", str(self.incidents), *args]
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         start_new_session=True, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"triage serve exited {self.proc.returncode}: {self.log()}")
            try:
                if http("GET", self.url + "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"triage serve did not answer /healthz within 30 s: {self.log()}")

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")[-3000:]

    def post(self, doc: Any, token: str | None = None) -> tuple[int, dict[str, Any]]:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        code, raw = http("POST", self.url + "/alertmanager", body, headers)
        return code, json.loads(raw) if raw.strip() else {}

    def metrics(self, token: str | None = None) -> str:
        return http("GET", self.url + "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})[1]

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        stop_group(self.proc)

    def bundles(self) -> list[Path]:
        if not self.incidents.is_dir():
            return []
        return sorted(p for p in self.incidents.iterdir() if not p.name.startswith("."))


def stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the process and everything it started; waited for, within bounds."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def alert(fingerprint: str, instance: str, starts: str, *, status: str = "firing", ends: str | None = None,
          name: str = "VLLMServerDown") -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": name, "instance": instance, "job": "vllm",
                                         "severity": "critical"},
            "annotations": {"summary": f"vLLM on {instance} is down"}, "startsAt": starts,
            "endsAt": ends or "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": fingerprint}


def payload(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="VLLMServerDown"}', "truncatedAlerts": 0,
            "status": status, "receiver": "triage", "groupLabels": {"alertname": "VLLMServerDown"},
            "commonLabels": {"alertname": "VLLMServerDown"}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}


def incident_yaml(bundle: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((bundle / "incident.yaml").read_text())


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    """Per-instance logs: gpu-node-01 failed at start-up, gpu-node-02 under a burst."""
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(SAMPLES / "startup-kv-blowout-v1" / "logs" / "vllm.log", d / "gpu-node-01.log")
    (d / "gpu-node-02").mkdir()
    shutil.copy(SAMPLES / "burst-long-prompts-v0" / "logs" / "vllm.log", d / "gpu-node-02" / "vllm.log")
    return d


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.close()


# -- the receiver on its own ----------------------------------------------------------------------

def test_alerts_become_bundles_and_posted_verdicts_once_and_resolved_closes(tmp_path, logs_dir, sink):
    serve = Serve(tmp_path, "--logs-from", str(logs_dir), "--post", sink.url)
    try:
        group = payload(alert("a1startup", "gpu-node-01:8000", STARTUP_AT), alert("b2burst", "gpu-node-02:8000", BURST_AT))
        assert serve.post(group) == (200, {"status": "ok", "accepted": 2, "duplicates": 0, "resolved": 0})
        posted = wait_for("two verdicts posted", lambda: len(sink.firing()) == 2 and sink.firing())
        assert posted["a1startup"]["class"] == "startup" and posted["b2burst"]["class"] == "burst"
        msg = posted["a1startup"]
        assert msg["schema"] == "triage.alert/v1" and msg["verdict"]["schema"] == "triage.verdict/v1"
        assert msg["decided_by"] == "bundle" and msg["alert"]["startsAt"] == STARTUP_AT
        assert "[startup] VLLMServerDown on gpu-node-01:8000" in msg["text"] and "dry run" in msg["text"]
        bundle = Path(msg["incident"])
        assert msg["next"][0] == f"triage recover {bundle}" and f"triage timeline {bundle}" in msg["next"]
        assert sorted(serve.bundles()) == sorted(Path(p["incident"]) for p in posted.values())
        meta = incident_yaml(bundle)
        assert meta["created"] == STARTUP_AT and meta["alert"]["fingerprint"] == "a1startup"
        assert meta["alert"]["labels"]["instance"] == "gpu-node-01:8000" and meta["triage"]["class"] == "startup"
        assert [p.name for p in (bundle / "logs").iterdir()] == ["gpu-node-01.log"]
        fired = json.loads(next((bundle / "alerts").glob("*-firing.json")).read_text())
        assert fired["version"] == "4" and [a["fingerprint"] for a in fired["alerts"]] == ["a1startup"]
        burst = Path(posted["b2burst"]["incident"])
        assert [p.name for p in (burst / "logs").iterdir()] == ["vllm.log"]       # from the gpu-node-02/ folder
        # the bundle says the same as the receiver did
        done = subprocess.run([sys.executable, "-m", "triage", "classify", str(bundle), "--json"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert json.loads(done.stdout)["verdict"]["class"] == "startup"

        # a re-sent group opens nothing and posts nothing
        assert serve.post(group)[1]["duplicates"] == 2
        time.sleep(1.0)
        assert len(serve.bundles()) == 2 and len(sink.posts) == 2

        # resolved: the payload kept, the timeline closed at endsAt, a short post
        ends = "2025-10-14T10:02:00Z"
        resolved = payload(alert("a1startup", "gpu-node-01:8000", STARTUP_AT, status="resolved", ends=ends),
                           status="resolved")
        assert serve.post(resolved)[1]["resolved"] == 1
        closed = wait_for("the resolution posted", lambda: [p for p in sink.posts if p.get("event") == "resolved"])
        assert closed[0]["incident"] == str(bundle) and "[resolved]" in closed[0]["text"]
        note = json.loads((bundle / "notes.jsonl").read_text().splitlines()[-1])
        assert note["moment"] == "resolved" and note["time"].startswith("2025-10-14T10:02:00")
        assert list((bundle / "alerts").glob("*-resolved.json"))
        timeline = subprocess.run([sys.executable, "-m", "triage", "timeline", str(bundle), "--json"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=60)
        assert timeline.returncode == 0, timeline.stderr
        moments = json.loads(timeline.stdout)["moments"]
        assert "2025-10-14T10:02:00" in json.dumps(moments["resolved"])
        assert moments["resolved"]["how"].startswith("set by triage serve in notes.jsonl:1")   # not "by hand"
        # The payload arrived now, months after the back-dated startsAt: detection is the alert's start.
        assert moments["detected"]["time"].startswith(STARTUP_AT[:19])
        assert "taken as detection" in moments["detected"]["how"]
        ttd = json.loads(timeline.stdout)["durations"]["ttd"]
        assert ttd is not None and ttd < 60, ttd
        assert serve.post(resolved)[1] == {"status": "ok", "accepted": 0, "duplicates": 1, "resolved": 0}

        assert http("GET", serve.url + "/healthz") == (200, json.dumps({"status": "ok", "queue": 0}) + "\n")
        metrics = serve.metrics()
        for line in ('triage_serve_verdicts_total{class="startup"} 1.0', 'triage_serve_verdicts_total{class="burst"} 1.0',
                     'triage_serve_alerts_total{outcome="duplicate"} 3.0', "triage_serve_queue_depth 0.0",
                     'triage_serve_requests_total{code="200",path="/alertmanager"} 4.0',
                     'triage_serve_posts_total{result="ok"} 3.0'):
            assert line in metrics, metrics
        assert serve.terminate() == 0
    finally:
        serve.kill()

    # the index is on disk: after a restart the same group is still known
    again = Serve(tmp_path, "--logs-from", str(logs_dir), "--post", sink.url)
    try:
        assert again.post(group)[1]["duplicates"] == 2
        time.sleep(0.5)
        assert len(again.bundles()) == 2 and len(sink.posts) == 3
    finally:
        again.kill()


def test_malformed_payloads_are_refused_whole_and_nothing_is_written(tmp_path):
    serve = Serve(tmp_path, "--max-body", "64KiB")
    good = alert("ok1", "gpu-node-01:8000", STARTUP_AT)
    no_fp = {k: v for k, v in good.items() if k != "fingerprint"}
    cases = [
        (b"{not json", "not JSON"),
        (b"[]", "not a JSON object"),
        ({**payload(good), "version": "3"}, "version '3'"),
        ({k: v for k, v in payload(good).items() if k != "alerts"}, "'alerts' is missing"),
        (payload(good, no_fp), "alerts[1].fingerprint is missing"),      # one bad alert: the good one is not taken
        (payload({**good, "startsAt": "yesterday"}), "alerts[0].startsAt"),
        (payload({**good, "status": "pending"}), "alerts[0].status"),
        (payload({**good, "labels": {"alertname": 5}}), "alerts[0].labels"),
        (payload({**good, "status": "resolved"}), "resolved but has no endsAt"),
    ]
    try:
        for body, reason in cases:
            code, answer = serve.post(body)
            assert code == 400 and reason in answer["error"], (body, answer)
        code, answer = serve.post(b"{" + b" " * (65 << 10) + b"}")
        assert code == 413 and "at most 65536" in answer["error"]
        assert http("POST", serve.url + "/elsewhere", b"{}")[0] == 404
        assert http("GET", serve.url + "/alertmanager")[0] == 404
        time.sleep(0.5)
        assert serve.bundles() == []
        assert (serve.incidents / ".triage-serve" / "journal.jsonl").read_text() == ""
        assert 'triage_serve_requests_total{code="400",path="/alertmanager"} 9.0' in serve.metrics()
        assert "Traceback" not in serve.log()
    finally:
        serve.kill()


def test_full_queue_answers_429_and_sigterm_loses_nothing(tmp_path, logs_dir):
    slow = Sink(delay=4.0)
    first = Serve(tmp_path, "--logs-from", str(logs_dir), "--post", slow.url, "--workers", "1", "--queue", "2",
                  "--grace", "1")
    try:
        assert first.post(payload(alert("q1", "gpu-node-01:8000", STARTUP_AT)))[0] == 200
        wait_for("the first post under way", slow.arrived.is_set, 30)       # the only worker is now held
        assert first.post(payload(alert("q2", "gpu-node-02:8000", BURST_AT), alert("q3", "gpu-node-01:8000", "2025-10-14T09:13:13Z")))[0] == 200
        code, answer = first.post(payload(alert("q4", "gpu-node-01:8000", "2025-10-14T09:13:14Z")))
        assert code == 429 and "queue full" in answer["error"]
        assert "triage_serve_queue_depth 2.0" in first.metrics()
        assert 'triage_serve_alerts_total{outcome="rejected"} 1.0' in first.metrics()
        started = time.monotonic()
        assert first.terminate() == 0
        assert time.monotonic() - started < 15
        assert "2 alert(s) queued and 1 unfinished" in first.log()
    finally:
        first.kill()
        slow.close()
    fast = Sink()
    second = Serve(tmp_path, "--logs-from", str(logs_dir), "--post", fast.url, incidents=first.incidents)
    try:
        got = wait_for("q1's kept post and q2, q3 posted", lambda: {"q1", "q2", "q3"} <= set(fast.firing()) and fast.firing())
        assert got["q2"]["class"] == "burst" and got["q3"]["class"] == "startup"
        assert len(second.bundles()) == 3
        assert "re-queued 2 alert(s)" in second.log()
        assert second.post(payload(alert("q4", "gpu-node-01:8000", "2025-10-14T09:13:14Z")))[1]["accepted"] == 1
    finally:
        second.kill()
        fast.close()


def test_token_loopback_and_rate_limit(tmp_path):
    port = free_port()
    refused = subprocess.run([sys.executable, "-m", "triage", "serve", "--listen", f"0.0.0.0:{port}",
                              "--incidents", str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True,
                             timeout=60, env={k: v for k, v in os.environ.items() if k != "TRIAGE_SERVE_TOKEN"})
    assert refused.returncode == 1 and "TRIAGE_SERVE_TOKEN" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "x").exists()
    serve = Serve(tmp_path, "--rate", "0.5", env={"TRIAGE_SERVE_TOKEN": "s3cret-token"})
    try:
        assert serve.post(payload(alert("t1", "h:1", STARTUP_AT)))[0] == 401
        assert serve.post(payload(alert("t1", "h:1", STARTUP_AT)), token="wrong")[0] == 401
        assert http("GET", serve.url + "/metrics")[0] == 401
        assert http("GET", serve.url + "/healthz")[0] == 200
        assert serve.post(b"{", token="s3cret-token")[0] == 400        # takes the one request of the burst
        code, answer = serve.post(payload(alert("t1", "h:1", STARTUP_AT)), token="s3cret-token")
        assert code == 429 and "rate limit" in answer["error"]
        assert "triage_serve_queue_depth" in serve.metrics(token="s3cret-token")
    finally:
        serve.kill()


# -- over a real Prometheus -----------------------------------------------------------------------

def test_series_from_a_real_prometheus_decide_without_a_log(tmp_path, sink):
    from tests import fleetkit

    missing = fleetkit.tools_missing()
    if missing:
        pytest.skip(missing)
    now = time.time() // 60 * 60
    ts = fleetkit.times(now - 7200, now - 60, 15)
    fail_at = now - 3600
    fleet = fleetkit.Fleet()
    fleetkit.burst(fleet.server("gpu-node-05:8000"), ts, fail_at)
    data = fleetkit.build_tsdb(fleetkit.write_openmetrics(fleet, tmp_path / "fleet.om"), tmp_path / "tsdb")
    with fleetkit.Prometheus(data).wait_ready() as prom:
        serve = Serve(tmp_path, "--prometheus", prom.url, "--post", sink.url)
        try:
            starts = datetime.fromtimestamp(fail_at - 30, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            assert serve.post(payload(alert("p1", "gpu-node-05:8000", starts)))[0] == 200
            msg = wait_for("the verdict posted", lambda: sink.firing().get("p1"))
            assert msg["class"] == "burst" and msg["decided_by"] == "prometheus" and msg["series_class"] == "burst"
            bundle = Path(msg["incident"])
            assert [p.name for p in (bundle / "metrics").iterdir()] == ["prometheus-gpu-node-05_8000.prom"]
            assert incident_yaml(bundle)["collected"]["sources"]["prometheus"].startswith("ok:")
            # --lookback 1h + --after 10m over about 4000 points: a 2 s step, not the fleet's 15 s
            assert "points at a 2 s step" in incident_yaml(bundle)["collected"]["sources"]["prometheus"]
        finally:
            serve.kill()


def test_the_series_step_follows_the_window_and_is_an_option():
    from triage.live.serve.alert_sources import series_step

    assert series_step(3600 + 600) == 2.0          # a server that lived 15 s still leaves points
    assert series_step(60) == 1.0 and series_step(24 * 3600) == 22.0
    assert series_step(4200, 1.0) == 1.0
    done = subprocess.run([sys.executable, "-m", "triage", "serve", "--step", "0.1s"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "use a step of at least 1s" in done.stderr and "Traceback" not in done.stderr


# -- behind a real Alertmanager -------------------------------------------------------------------

class Alertmanager:
    def __init__(self, tmp: Path, receiver: str, token_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "alertmanager.yml"
        config.write_text(f"""
route:
  receiver: triage
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 2s
receivers:
  - name: triage
    webhook_configs:
      - url: {receiver}
        send_resolved: true
        http_config:
          authorization:
            credentials_file: {token_file}
""")
        self.log = tmp / "alertmanager.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp / 'am-data'}",
                                          f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                                          "--log.level=warn"], stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        try:
            wait_for("alertmanager ready", self._ready, 30, 0.2)
        except AssertionError:
            self.stop()
            raise AssertionError(f"alertmanager did not start: {self.log.read_text()[-2000:]}") from None

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"alertmanager exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            return http("GET", self.url + "/-/ready")[0] == 200
        except OSError:
            return False

    def fire(self, alerts: list[dict[str, Any]]) -> None:
        code, answer = http("POST", self.url + "/api/v2/alerts", json.dumps(alerts).encode())
        assert code == 200, answer

    def fingerprints(self) -> dict[str, str]:
        return {a["labels"]["instance"]: a["fingerprint"] for a in json.loads(http("GET", self.url + "/api/v2/alerts")[1])}

    def stop(self) -> None:
        stop_group(self.proc)


@pytest.mark.skipif(ALERTMANAGER is None, reason="prometheus-alertmanager is not installed "
                                                  "(Debian: apt-get install prometheus-alertmanager)")
def test_a_real_alertmanager_drives_the_receiver(tmp_path, logs_dir, sink):
    token = "am-to-triage-token"
    token_file = tmp_path / "token"
    token_file.write_text(token)
    serve = Serve(tmp_path, "--logs-from", str(logs_dir), "--post", sink.url, env={"TRIAGE_SERVE_TOKEN": token})
    am = Alertmanager(tmp_path, serve.url + "/alertmanager", token_file)
    try:
        def am_alert(instance: str, starts: str, ends: str | None = None) -> dict[str, Any]:
            doc = {"labels": {"alertname": "VLLMServerDown", "instance": instance, "job": "vllm", "severity": "critical"},
                   "annotations": {"summary": f"vLLM on {instance} stopped answering"}, "startsAt": starts,
                   "generatorURL": "http://prometheus:9090/graph"}
            return {**doc, "endsAt": ends} if ends else doc

        am.fire([am_alert("gpu-node-01:8000", STARTUP_AT), am_alert("gpu-node-02:8000", BURST_AT)])
        fingerprints = wait_for("both alerts in alertmanager", lambda: len(am.fingerprints()) == 2 and am.fingerprints(), 30)
        posted = wait_for("both verdicts posted", lambda: len(sink.firing()) == 2 and sink.firing(), 60)
        assert posted[fingerprints["gpu-node-01:8000"]]["class"] == "startup"
        assert posted[fingerprints["gpu-node-02:8000"]]["class"] == "burst"
        bundle = Path(posted[fingerprints["gpu-node-01:8000"]]["incident"])
        meta = incident_yaml(bundle)
        assert meta["alert"]["fingerprint"] == fingerprints["gpu-node-01:8000"] and meta["alert"]["startsAt"].startswith("2025-10-14T09:13:12")
        assert meta["alert"]["receiver"] == "triage"

        # Alertmanager repeats the groups (repeat_interval) and the alert is fired again: still two incidents
        am.fire([am_alert("gpu-node-01:8000", STARTUP_AT)])
        wait_for("a repeated notification", lambda: _count(serve.metrics(token), 'triage_serve_alerts_total{outcome="duplicate"}') >= 2, 60, 0.5)
        assert len(serve.bundles()) == 2 and len(sink.firing()) == 2

        # the alert ends: Alertmanager sends it resolved and the incident's timeline is closed
        ended = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        am.fire([am_alert("gpu-node-01:8000", STARTUP_AT, ends=ended)])
        closed = wait_for("the resolution posted", lambda: [p for p in sink.posts if p.get("event") == "resolved"], 60)
        assert closed[0]["incident"] == str(bundle)
        note = json.loads((bundle / "notes.jsonl").read_text().splitlines()[-1])
        assert note["moment"] == "resolved" and note["author"] == "triage serve"
        assert list((bundle / "alerts").glob("*-resolved.json"))
        assert len(serve.bundles()) == 2
        assert "Traceback" not in serve.log()
    finally:
        am.stop()
        serve.kill()


def _count(metrics: str, series: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0
