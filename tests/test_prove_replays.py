"""`triage prove` replays beyond the burst drill (tests/test_prove_sim.py): a chronic and a
start-up-limited incident, each made for real on the simulator, then proved against the old
settings and against the ones the verdict recommends. Real processes on loopback; every wait is
bounded; no assertion is about how long anything took.

- chronic: every request leaves allocator fragments until a small allocation fails. Its load is
  a number of requests, not a peak: the replay sends a bounded count of short requests
  (--max-requests), and the prompt length is given, so the result speaks of "the given load".
- start-up: the old settings never start, so there is no server to load: prove says so and sends
  nothing. The advised max_model_len starts, and holds prompts near that length.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from triage.api import classify_paths
from triage.model import OomClass

from .simkit import MODEL, START_S, complete, get, kill_group, wait_until, words

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the simulator's process tree needs fork")

CARD = ("--sim-gpu-gib", "24", "--sim-weights-gib", "16")     # a 3.6 GiB KV cache: 29,488 tokens
_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")


class Sims:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []

    def spawn(self, *flags: str, port: int = 0, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
        log = self.root / f"sim-{len(self.procs)}.log"
        proc = subprocess.Popen([sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", str(port), "--log",
                                 str(log), *flags], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}, start_new_session=True)
        self.procs.append(proc)
        return proc, log

    def start(self, *flags: str, env: dict[str, str] | None = None) -> tuple[str, Path]:
        proc, log = self.spawn(*flags, env=env)
        assert wait_until(lambda: proc.poll() is not None or (log.exists() and _URL.search(log.read_text())),
                          START_S) and proc.poll() is None, "the simulator did not serve"
        url = _URL.search(log.read_text()).group(1)
        assert wait_until(lambda: get(url + "/health") == 200, START_S)
        return url, log

    def stop(self) -> None:
        for proc in self.procs:
            kill_group(proc.pid)


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sims]:
    s = Sims(tmp_path_factory.mktemp("replays"))
    yield s
    s.stop()


def bundle(root: Path, log: Path) -> Path:
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "vllm.log").write_bytes(log.read_bytes())
    return root


def prove(*args: str) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, "-m", "triage", "prove", *args, "--no-nvml"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    doc = json.loads(done.stdout) if "--json" in args and done.stdout.strip() else {}
    if doc:
        import jsonschema

        from triage.paths import data_file
        jsonschema.validate(doc, json.loads(data_file("prove.schema.json").read_text()))
    return done.returncode, doc, done.stderr


def test_the_chronic_incident_fails_at_its_request_count_and_holds_well_past_it_with_expandable_segments(
        sims, tmp_path):
    url, log = sims.start("--scenario", "chronic")
    crashed_at = next((i for i in range(1, 41) if complete(url, words(50, f"r{i}"), 2) != 200), None)
    assert crashed_at is not None and crashed_at > 1
    incident = bundle(tmp_path / "chronic", log)
    verdict, _ = classify_paths([str(incident)])
    assert verdict.oom_class is OomClass.CHRONIC, verdict.summary
    env = {r.setting: str(r.to_value) for r in verdict.recommendations if r.env}
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}

    # The incident's load is a count of short requests: given (its log has no stats lines to read a peak from).
    bound = 3 * crashed_at
    load = ("--prompt-tokens", "50", "--output-tokens", "2", "--max-requests", str(bound), "--duration", "120",
            "--ramp", "0", "--request-timeout", "30", "--json")
    url, log = sims.start("--scenario", "chronic")
    code, doc, err = prove(str(incident), "--url", url, *load, "--server-log", str(log), "--no-record")
    assert code == 1 and doc, err[-2000:]
    assert doc["result"] == "failed" and not doc["profile"]["from_incident"]
    assert "the incident's peak" not in doc["summary"] and doc["summary"].startswith("failed under the given load")
    first = doc["first_failure"]
    assert first["kind"] == "http_status" and first["status"] == 500 and first["time_s"] >= 0
    assert f"first failure at {first['time_s']:.1f} s" in doc["summary"]
    assert doc["requests"]["sent"] == crashed_at and doc["requests"]["served"] == crashed_at - 1
    assert doc["reproduced"]["class"] == "chronic" == doc["incident"]["class"]

    url, _ = sims.start("--scenario", "chronic", env=env)
    code, doc, err = prove(str(incident), "--url", url, *load)
    assert code == 0, (doc.get("summary"), err[-2000:])
    assert doc["result"] == "held" and doc["first_failure"] is None
    assert doc["requests"] == {"sent": bound, "served": bound, "failed": 0, "cut": 0, "request_bound_hit": True}
    assert doc["summary"].startswith(f"fix proven under the given load: 1 concurrent requests of 50 prompt + 2 "
                                     f"output tokens held {bound} requests (the request bound)")
    records = [json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()]
    assert [(r["action"], r["phase"], r.get("result")) for r in records][-1] == ("prove", "end", "ok")
    assert "the incident's peak" not in json.dumps(records)


def test_the_startup_incident_never_serves_on_the_old_settings_and_the_advised_length_holds_long_prompts(
        sims, tmp_path):
    proc, log = sims.spawn("--scenario", "startup", *CARD)
    assert proc.wait(timeout=START_S) == 1
    incident = bundle(tmp_path / "startup", log)
    verdict, _ = classify_paths([str(incident)])
    assert verdict.oom_class is OomClass.STARTUP, verdict.summary
    length = next(r.to_value for r in verdict.recommendations if r.setting == "max_model_len")
    assert isinstance(length, int) and 1000 < length < 1 << 20

    # The old settings, relaunched on a known port: the engine never starts, nothing listens there.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, _ = sims.spawn("--scenario", "startup", *CARD, port=port)
    assert proc.wait(timeout=START_S) == 1
    # Requests long enough to span several /metrics samples (every 0.5 s), so the KV peak is seen
    # even on a loaded machine: a prompt just under the advised length and output that fills the rest.
    load = ("--concurrency", "2", "--prompt-tokens", str(length - 128), "--output-tokens", "96", "--max-requests", "4",
            "--duration", "120", "--ramp", "0", "--request-timeout", "60", "--no-record")
    code, doc, err = prove(str(incident), "--url", f"http://127.0.0.1:{port}", *load, "--json")
    assert code == 1 and doc == {}
    assert f"http://127.0.0.1:{port}: server not reachable (GET /v1/models: " in err and "nothing was sent" in err
    assert "sent," not in err                                   # no load progress: not one request went out

    # The advised max_model_len: it starts, and prompts just under that length are served.
    url, _ = sims.start("--scenario", "startup", *CARD, "--max-model-len", str(length))
    code, doc, err = prove(str(incident), "--url", url, *load, "--json")
    assert code == 0, (doc.get("summary"), err[-2000:])
    assert doc["result"] == "held" and not doc["profile"]["from_incident"]
    assert doc["profile"]["prompt_tokens"] == length - 128 and not any("exceed" in n for n in doc["notes"])
    assert doc["requests"]["served"] == 4 and doc["requests"]["failed"] == 0
    assert doc["server"]["peak_kv_usage"] > 0.9
    assert doc["summary"].startswith("fix proven under the given load")
