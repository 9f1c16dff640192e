"""`triage prove` end to end: real simulator processes on loopback, the prover as a real process.

The burst drill's incident is made for real (12 concurrent 3,200-token prompts kill a 24 GiB
simulated card), then replayed from its own evidence: against the old settings the server dies
the way the incident did (the new log classifies as burst), against the settings the verdict
recommends it holds, and the run lands in the incident's timeline. Durations are seconds; every
wait is bounded; no assertion is about how long anything took.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from triage.api import classify_paths
from triage.live.nvml import GpuReading
from triage.model import OomClass

from .simkit import MODEL, SMALL_CARD, START_S, complete, get, kill_group, wait_until, words

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the simulator's process tree needs fork")

BURST = ("--scenario", "burst", "--max-num-batched-tokens", "8192", *SMALL_CARD)
QUICK = ("--duration", "2", "--ramp", "0.5", "--request-timeout", "60")
_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")


class Sims:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.pgids: list[int] = []

    def start(self, *flags: str) -> tuple[str, Path]:
        log = self.root / f"sim-{len(self.pgids)}.log"
        proc = subprocess.Popen([sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--log", str(log),
                                 *flags], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.pgids.append(proc.pid)
        assert wait_until(lambda: log.exists() and _URL.search(log.read_text()) is not None, START_S), "no URL"
        url = _URL.search(log.read_text()).group(1)
        assert wait_until(lambda: get(url + "/health") == 200, START_S)
        return url, log

    def stop(self) -> None:
        for pgid in self.pgids:
            kill_group(pgid)


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sims]:
    s = Sims(tmp_path_factory.mktemp("sims"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def incident(sims: Sims, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The burst drill's incident: a bundle whose log holds the crash."""
    url, log = sims.start(*BURST)
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda i=i: statuses.append(complete(url, words(3200, f"b{i}"), 100, 30)),
                                daemon=True) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert 500 in statuses
    root = tmp_path_factory.mktemp("incident")
    (root / "logs").mkdir()
    (root / "logs" / "vllm.log").write_bytes(log.read_bytes())
    return root


def prove(*args: str, timeout: float = 120) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, "-m", "triage", "prove", *args, "--json", "--no-nvml"], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        pytest.fail(f"not JSON: {done.stdout[:2000]}\n{done.stderr[-2000:]}")
    return done.returncode, doc, done.stderr


def _schema_check(doc: dict) -> None:
    import jsonschema

    from triage.paths import data_file

    jsonschema.validate(doc, json.loads(data_file("prove.schema.json").read_text()))


def test_the_burst_incident_replayed_fails_on_the_old_settings_and_holds_on_the_advised_ones(sims, incident):
    verdict, _ = classify_paths([str(incident)])
    assert verdict.oom_class is OomClass.BURST
    advised = {r.setting: r.to_value for r in verdict.recommendations if r.to_value is not None}
    assert "max_num_seqs" in advised

    # The old settings, the incident's own peak: dies in the same way.
    url, log = sims.start(*BURST)
    code, doc, err = prove(str(incident), "--url", url, *QUICK, "--server-log", str(log), "--no-record")
    _schema_check(doc)
    assert code == 1, err
    assert doc["result"] == "failed" and doc["profile"]["from_incident"]
    assert doc["profile"]["concurrency"] >= 9 and doc["profile"]["prompt_tokens"] >= 3000
    first = doc["first_failure"]
    assert first["kind"] == "http_status" and first["status"] == 500
    assert doc["server"]["health_after"] == "GET /health -> 503"
    assert doc["reproduced"]["class"] == "burst" == doc["incident"]["class"]
    assert "as the incident" in doc["summary"]
    assert "prove:" in err and "sent" in err                   # progress on stderr

    # The advised settings, the same peak: holds, and the incident records it.
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in advised.items()
             if k in ("max_num_seqs", "gpu_memory_utilization", "max_num_batched_tokens", "max_model_len")]
    url, _ = sims.start(*BURST, *flags)
    code, doc, err = prove(str(incident), "--url", url, *QUICK)
    _schema_check(doc)
    assert code == 0, (doc.get("summary"), err[-2000:])
    assert doc["result"] == "held" and doc["first_failure"] is None
    assert doc["requests"]["failed"] == 0 and doc["requests"]["served"] >= 1
    assert doc["server"]["peak_running"] <= advised["max_num_seqs"]
    assert doc["latency_s"]["p50"] <= doc["latency_s"]["p99"] <= doc["latency_s"]["max"]
    assert doc["incident"]["recorded"] and doc["summary"].startswith("fix proven under the incident's peak")
    assert doc["gpu"] == {"read": False, "note": "--no-nvml: GPU memory not read"}

    from triage.recovery.audit import verify
    assert verify(incident / "actions.jsonl").ok
    records = [json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()]
    assert [(r["action"], r["phase"]) for r in records] == [("prove", "start"), ("prove", "end")]
    assert records[-1]["result"] == "ok"
    timeline = subprocess.run([sys.executable, "-m", "triage", "timeline", str(incident)], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert "fix proven under the incident's peak" in timeline.stdout, timeline.stdout


def test_recover_prove_plans_the_proof_as_the_last_step(incident, runner):
    from triage.cli import main

    result = runner.invoke(main, ["recover", str(incident), "--prove", "--json", "--param", "prove.duration_s=30"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output[result.output.index("{"):])
    last = plan["steps"][-1]
    assert last["action"] == "prove" and last["id"] == "prove" and last["on_failure"] == "stop"
    assert any("hold 30 s" in line for line in last["details"])


def test_the_prove_step_fails_a_recovery_whose_server_cannot_take_the_peak(sims, incident):
    """The recovery action itself, against a server still on the old settings."""
    from types import SimpleNamespace

    from triage.recovery.actions import REGISTRY
    from triage.recovery.context import Deadline, RunbookStep

    url, _ = sims.start(*BURST)
    step = RunbookStep("prove", "Prove", "prove", 120, "stop", "v", {"duration_s": 2, "ramp_s": 0.5})
    said: list[str] = []
    ctx = SimpleNamespace(url=url, incident=incident, options=SimpleNamespace(say=said.append))
    outcome = REGISTRY["prove"].run(step, ctx, Deadline(120))
    assert outcome.result == "failed" and "roll back" in (outcome.by_hand or "")
    assert outcome.lines[-1].startswith("failed under the incident's peak")
    assert outcome.data["first_failure"]["status"] == 500


def test_ctrl_c_stops_the_load_at_once_and_still_reports(sims, tmp_path):
    url, _ = sims.start("--scenario", "healthy")
    proc = subprocess.Popen([sys.executable, "-m", "triage", "prove", "--url", url, "--concurrency", "4",
                             "--prompt-tokens", "50", "--output-tokens", "200", "--duration", "300", "--ramp", "0",
                             "--json", "--no-nvml"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        first = ""
        deadline = time.monotonic() + 30
        while "sent" not in first and time.monotonic() < deadline:
            first = proc.stderr.readline()
        assert "sent" in first
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)       # bounded: the 300 s hold is not waited for
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    doc = json.loads(out)
    assert doc["result"] == "interrupted" and doc["requests"]["failed"] == 0


def test_the_request_bound_ends_the_run(sims):
    url, _ = sims.start("--scenario", "healthy")
    code, doc, _ = prove("--url", url, "--concurrency", "2", "--prompt-tokens", "20", "--output-tokens", "2",
                         "--max-requests", "5", "--duration", "60", "--ramp", "0")
    assert code == 0 and doc["requests"]["sent"] == 5 and doc["requests"]["request_bound_hit"]
    assert any("request bound (5)" in n for n in doc["notes"])


def test_nvml_gives_peak_memory_and_headroom(sims, monkeypatch):
    """NVML mocked (the only mock): the card's peak in use and the headroom it left, against --min-headroom."""
    from triage.prove import monitor
    from triage.prove.profile import Limits
    from triage.prove.run import ProveOptions, run_prove

    gib = 1 << 30
    used = iter(range(60, 1000))
    monkeypatch.setattr(monitor, "read_gpus", lambda timeout_s=None: [GpuReading(
        0, "NVIDIA H100 80GB HBM3", "GPU-x", 80 * gib, min(next(used), 76) * gib, 4 * gib)])
    url, _ = sims.start("--scenario", "healthy")
    limits = Limits(duration_s=1.5, ramp_s=0, request_timeout_s=30, interval_s=0.2)
    opts = ProveOptions(url=url, concurrency=2, prompt_tokens=20, output_tokens=20, limits=limits)
    result = run_prove(opts)
    gpu = result.json()["gpu"]
    assert gpu["read"] and gpu["total_bytes"] == 80 * gib and gpu["peak_used_bytes"] <= 76 * gib
    assert gpu["headroom_gib"] == round((80 * gib - gpu["peak_used_bytes"]) / gib, 2)
    assert gpu["budget_share"] == 0.9 and gpu["budget_bytes"] == int(0.9 * 80 * gib)
    assert result.result == "held"

    used = iter(range(70, 1000))
    opts.min_headroom_bytes = 20 * gib
    result = run_prove(opts)
    assert result.result == "failed" and result.failure()["kind"] == "headroom"
