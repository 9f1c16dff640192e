"""`triage watch --act`: the sidecar acts on OOM precursors only, through the recovery executor.

The rules on crafted readings (which risks are precursors, the hold, the rate limit), then the
command end to end against `triage sim serve` on loopback: a saturated server (KV pinned, a
queue) triggers nothing; memory outside the engine's budget held past --hold gives a dry-run
plan, and with --execute a drained restart whose audit log verifies. Only NVML is faked (the
stand-in pynvml of tests/test_watch.py); the server, its processes, the executor, the audit log
and the lock are real. No assertion reads a wall clock: the loop stops after --readings readings.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from triage.live.watch.act import Actor, Policy, precursors
from triage.live.watch.readings import Fragmentation, GpuView, Reading, Source
from triage.live.watch.risk import assess

from .simkit import MODEL, SMALL_CARD, START_S, alive, complete, get, kill_group, wait_until, words
from .test_watch import FakeNvml, GiB, server
from .test_watch import Sim as WatchSim

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="the simulator's process tree needs fork")

RUN_S = 60          # the most any watch command here may take
T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)


def gpu(used_share: float) -> GpuView:
    return GpuView(0, "H100", "GPU-0", int(used_share * 80 * GiB), 80 * GiB, None)


def judged(view, gpus):
    return replace(view, risks=assess(view, gpus))


# --- which risks are precursors ---------------------------------------------------------------------

def test_saturation_is_no_precursor():
    view = judged(server(kv_cache_usage=0.99, running=8.0, waiting=20.0, preemptions_per_s=0.5,
                         prefix_caching=False), [gpu(0.89)])
    assert [r.oom_class for r in view.risks] == ["burst"]
    assert precursors(view, [gpu(0.89)]) == []


def test_memory_outside_the_budget_is_a_precursor_and_a_tight_budget_alone_is_not():
    view = judged(server(), [gpu(0.95)])                       # 5 points over the 0.90 budget
    assert [r.oom_class for r in precursors(view, [gpu(0.95)])] == ["startup"]
    tight = judged(server(gpu_memory_utilization=0.97), [gpu(0.96)])    # util_no_headroom, inside its budget
    assert [r.oom_class for r in tight.risks] == ["startup"]
    assert precursors(tight, [gpu(0.96)]) == []


def test_fragmentation_is_a_precursor():
    frag = Fragmentation(0.4, 16 * GiB, 40 * GiB, "dump.json", None, 60.0, 1234, True)
    view = judged(server(fragmentation=frag), [])
    assert [r.oom_class for r in precursors(view, [])] == ["chronic"]


# --- hold and rate limit (a stand-in restart, a stepped clock) ---------------------------------------

def test_hold_then_one_action_per_window(tmp_path):
    clock = {"t": 0.0}
    done: list[str] = []

    def restart(view, found):
        done.append(view.url)
        return "planned", f"{view.url}: planned"

    actor = Actor(Policy(hold_s=120, max_actions=1, window_s=600), tmp_path, clock=lambda: clock["t"],
                  restart=restart)
    over = judged(server(), [gpu(0.95)])
    saturated = judged(server(kv_cache_usage=0.99, waiting=30.0), [gpu(0.89)])

    def at(t, view, used):
        clock["t"] = t
        return [d.kind for d in actor.observe(Reading(T0, 1.0, 0.8, (view,), (gpu(used),), Source(True, "ok")))]

    assert at(0, saturated, 0.89) == [] and at(500, saturated, 0.89) == []      # saturation: never
    assert at(1000, over, 0.95) == ["precursor"]
    assert at(1100, over, 0.95) == []                        # not held long enough
    assert at(1110, saturated, 0.89) == ["cleared"]
    assert at(1200, over, 0.95) == ["precursor"]             # the hold restarted after it cleared
    assert at(1320, over, 0.95) == ["planned"]               # held 120 s
    assert at(1330, over, 0.95) == ["precursor"] and at(1450, over, 0.95) == ["rate_limited"]
    assert at(1460, over, 0.95) == []                        # said once
    assert at(1930, over, 0.95) == ["planned"]               # the window passed
    assert done == [over.url, over.url]
    notes = [json.loads(line) for line in (tmp_path / "notes.jsonl").read_text().splitlines()]
    assert [n["author"] for n in notes] == ["triage watch"] * len(notes)
    assert any(n["text"].startswith("triage watch: act: planned: ") for n in notes)


# --- end to end on the simulator ------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sim(WatchSim):
    """A simulator on a port fixed before it starts: a restart relaunches it on the same one."""

    def __init__(self, log: Path, *flags: str) -> None:
        super().__init__(log, *flags, port=free_port())


@pytest.fixture
def nvml(tmp_path) -> FakeNvml:
    return FakeNvml(tmp_path)


def act(sim: Sim, incident: Path, nvml: FakeNvml, *extra: str, readings: int = 8) -> subprocess.CompletedProcess:
    env = {**os.environ, **nvml.env(), "TRIAGE_LOCK_FILE": str(incident.parent / "recover.lock")}
    return subprocess.run([sys.executable, "-m", "triage", "watch", "--vllm-url", f"{sim.url}=0", "--act",
                           "--incident", str(incident), "--interval", "0.2", "--hold", "0.5",
                           "--readings", str(readings), *extra],
                          capture_output=True, text=True, timeout=RUN_S, stdin=subprocess.DEVNULL, env=env)


def acted(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if " act " in line]


def _quietly(url: str, prompt: str, max_tokens: int) -> None:
    try:
        complete(url, prompt, max_tokens, timeout=60)
    except Exception:
        pass


def test_saturation_only_triggers_nothing(tmp_path, nvml):
    """KV pinned above 95% with requests queued, GPU memory inside the budget: burst risk, no act."""
    nvml.set(0.89)
    # A 29,488-token pool; two 14,200-token prompts fill 96% of it and their 500 tokens each fit in
    # the rest (no preemption): KV stays above 95% while two more requests wait.
    sim = Sim(tmp_path / "sat.log", "--max-num-seqs", "2", "--sim-gpu-gib", "24", "--sim-weights-gib", "16",
              "--max-model-len", "16384")
    try:
        for i in range(4):
            threading.Thread(target=_quietly, args=(sim.url, words(14200, f"s{i}"), 500), daemon=True).start()
        assert wait_until(lambda: (m := sim.metrics()).get("vllm:kv_cache_usage_perc", 0) > 0.95
                          and m.get("vllm:num_requests_waiting", 0) > 0, 20)
        done = act(sim, tmp_path / "inc", nvml, "--json", readings=10)
        assert done.returncode == 0, done.stderr
        servers = [json.loads(line)["servers"][0] for line in done.stdout.splitlines()]
        # The readings keep a schedule that never catches up: reading 5 starts at least 4 intervals
        # (0.8 s) after the first, past the 0.5 s hold, every one of them saturated.
        assert all(s["kv_cache_usage"] > 0.95 and s["requests_waiting"] > 0 for s in servers[:5]), \
            [(s["kv_cache_usage"], s["requests_running"], s["requests_waiting"]) for s in servers]
        assert all(s["risk"]["class"] == "burst" and s["risk"]["level"] == "critical" for s in servers[:5])
        assert " act " not in done.stderr, done.stderr
        assert not (tmp_path / "inc" / "actions.jsonl").exists() and not (tmp_path / "inc" / "watch-act").exists()
        assert sim.proc.poll() is None
    finally:
        sim.stop()


def test_precursor_held_gives_a_dry_run_plan(tmp_path, nvml):
    nvml.set(0.95)                                   # 5 points outside the 0.90 budget
    sim = Sim(tmp_path / "dry.log")
    try:
        incident = tmp_path / "inc"
        done = act(sim, incident, nvml, readings=14)
        assert done.returncode == 0, done.stderr
        kinds = [line.split(" act ", 1)[1].split(":", 1)[0] for line in acted(done)]
        assert kinds[:2] == ["precursor", "planned"], done.stdout
        assert "rate_limited" in kinds                # at most one per window, plans included
        [plan_file] = (incident / "watch-act").iterdir()
        plan = json.loads(plan_file.read_text())
        assert plan["runbook"] == "watch-restart" and plan["server_url"] == sim.url
        assert [s["id"] for s in plan["steps"]] == ["drain", "stop", "relaunch", "healthy"]
        assert plan["new_argv"] == plan["current_argv"] == sim.argv
        assert {p["pid"] for p in plan["pids"] if p["status"] == "confirmed"} >= {sim.proc.pid}
        assert not (incident / "actions.jsonl").exists()                 # a dry run touches nothing
        assert sim.proc.poll() is None and get(sim.url + "/health") == 200
        timeline = subprocess.run([sys.executable, "-m", "triage", "timeline", str(incident)], capture_output=True,
                                  text=True, timeout=RUN_S)
        assert timeline.returncode == 0 and "act: planned" in timeline.stdout, timeline.stdout + timeline.stderr
    finally:
        sim.stop()


def test_execute_runs_a_drained_restart_whose_audit_log_verifies(tmp_path, nvml):
    nvml.set(0.95)
    sim = Sim(tmp_path / "exec.log")
    incident = tmp_path / "inc"
    launched = None
    try:
        old = sim.proc.pid
        done = act(sim, incident, nvml, "--execute", readings=14)
        assert done.returncode == 0, done.stderr
        kinds = [line.split(" act ", 1)[1].split(":", 1)[0] for line in acted(done)]
        assert kinds[:2] == ["precursor", "restarted"], done.stdout + done.stderr
        assert kinds.count("restarted") == 1 and "rate_limited" in kinds          # once per window
        records = [json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()]
        ends = {r["step"]: r["result"] for r in records if r.get("phase") == "end" and r.get("step")}
        assert ends == {"drain": "ok", "stop": "ok", "relaunch": "ok", "healthy": "ok"}, ends
        launched = [r["data"]["launched"] for r in records if (r.get("data") or {}).get("launched")][-1]
        assert launched["argv"] == sim.argv
        assert wait_until(lambda: not alive(old), 5)
        assert get(sim.url + "/health") == 200 and complete(sim.url, "after the restart", 2) == 200
        verify = subprocess.run([sys.executable, "-m", "triage", "audit", "verify", str(incident)],
                                capture_output=True, text=True, timeout=RUN_S)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        sim.stop()
        if launched:
            kill_group(launched["pid"])


def test_act_refuses_what_it_must(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "triage", "watch", *args], capture_output=True, text=True,
                              timeout=RUN_S, stdin=subprocess.DEVNULL)
    remote = run("--act", "--vllm-url", "http://10.1.2.3:8000", "--incident", str(tmp_path / "i"), "--no-nvml")
    assert remote.returncode == 2 and "not a loopback address" in remote.stderr
    assert run("--act", "--vllm-url", "http://127.0.0.1:1", "--no-nvml").returncode == 2      # no --incident
    assert run("--execute", "--vllm-url", "http://127.0.0.1:1", "--no-nvml").returncode == 2  # no --act
    assert run("--act", "--once", "--vllm-url", "http://127.0.0.1:1", "--incident", str(tmp_path / "i"),
               "--no-nvml").returncode == 2
    assert not (tmp_path / "i").exists()
