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
import urllib.request
from datetime import datetime, timedelta, timezone
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


# --- the drills: a leak and a long healthy run, in simulated time (triage/sim/watch_drill.py) ---------

def test_a_leak_is_restarted_before_the_card_fills():
    """2 GiB/h under a flat load on the simulator's card (80 GiB, budget 0.90): the card would be full
    3.7 h in. With the budget on /metrics, memory outside it is the first precursor; without it,
    the leak trend (an hour of readings) is; either way the restart comes hours early."""
    from triage.sim import watch_drill

    seen = {}
    for known in (True, False):
        run = watch_drill.leak(2.0, budget_known=known)
        assert run.first_action_s is not None and run.first_action_s < run.oom_at_s, (known, run.actions)
        assert run.lead_s > 3600, (known, run.lead_s)
        seen[known] = run.actions[0][2]
    assert seen == {True: "startup", False: "chronic"}


def test_a_slow_leak_waits_until_it_would_fill_the_card_within_the_horizon():
    """0.5 GiB/h, the budget unknown: detected hours before the card fills, acted on only once the
    card would be full within --leak-horizon (the next scheduled restart would come first otherwise)."""
    from triage.sim import watch_drill

    run = watch_drill.leak(0.5, budget_known=False, policy=Policy(execute=True, leak_horizon_s=6 * 3600))
    assert run.first_action_s is not None and run.actions[0][2] == "chronic"
    assert 6 * 3600 - 240 <= run.lead_s <= 6 * 3600, run.lead_s / 3600     # less the hold and a reading
    early = watch_drill.leak(0.5, budget_known=False, policy=Policy(execute=True, leak_horizon_s=24 * 3600))
    assert early.lead_s > run.lead_s + 3 * 3600          # detected well before that horizon


def test_a_busy_healthy_server_for_two_days_triggers_nothing():
    """A daily cycle from 5 to 60 running requests, KV pinned above 95% with a queue at each peak,
    memory flat: burst risk at the peaks, no precursor and no action in two days of readings."""
    from triage.sim import watch_drill

    run = watch_drill.healthy(48.0)
    assert run.readings == 48 * 60 + 1
    assert run.risks["burst"] > 60                 # the peaks really were saturated
    assert run.actions == [] and run.precursors == []


def test_at_most_the_fleet_share_of_servers_is_acted_on_per_window(tmp_path):
    """Four servers, all past the hold at once: a fleet share of 0.5 acts on two, holds the others."""
    clock = {"t": 0.0}
    done = []
    actor = Actor(Policy(hold_s=60, fleet_share=0.5), tmp_path, clock=lambda: clock["t"],
                  restart=lambda server, found: (done.append(server.url) or ("planned", f"{server.url}: planned")))
    urls = [f"http://127.0.0.1:{8000 + i}" for i in range(4)]
    for minute in range(4):
        clock["t"] = 60.0 * minute
        views = tuple(judged(server(url=url), [gpu(0.95)]) for url in urls)      # 5 points over the budget
        actor.observe(Reading(T0, 60.0, 1.0, views, (gpu(0.95),), Source(True, "ok")))
    assert done == urls[:2]
    kinds = [(d.url, d.kind) for d in actor.decisions]
    assert (urls[2], "fleet_limited") in kinds and (urls[3], "fleet_limited") in kinds
    assert kinds.count((urls[2], "fleet_limited")) == 1            # said once per hold, not every reading
    assert Policy(fleet_share=0.1).fleet_limit(3) == 1 and Policy(fleet_share=0.25).fleet_limit(8) == 2


def test_the_exporter_serves_the_decisions(tmp_path):
    from triage.live.watch.exporter import Exporter

    clock = {"t": 0.0}
    actor = Actor(Policy(hold_s=60), tmp_path, clock=lambda: clock["t"],
                  restart=lambda server, found: ("planned", f"{server.url}: planned"))
    url = "http://127.0.0.1:8000"
    exporter = Exporter("127.0.0.1", 0)
    exporter.add_act(actor)
    try:
        for minute in range(3):
            clock["t"] = 30.0 * minute
            view = judged(server(url=url), [gpu(0.95)])
            actor.observe(Reading(T0 + timedelta(seconds=clock["t"]), 60.0, 1.0, (view,), (gpu(0.95),),
                                  Source(True, "ok")))
        text = urllib.request.urlopen(exporter.url, timeout=5).read().decode()
    finally:
        exporter.close()
    assert f'triage_act_decisions_total{{decision="planned",server="{url}"}} 1.0' in text
    assert f'triage_act_decisions_total{{decision="precursor",server="{url}"}} 1.0' in text
    assert f'triage_act_precursor_held_seconds{{server="{url}"}} 0.0' in text      # a new hold after the action
    [last] = [line for line in text.splitlines() if line.startswith("triage_act_last_action_timestamp_seconds{")]
    assert float(last.split()[-1]) == (T0 + timedelta(seconds=60)).timestamp()
