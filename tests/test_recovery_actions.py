"""Recovery pieces one at a time: process identification and signalling, NVML checks, the
systemctl and kubectl drivers, runbook overrides.

Real processes throughout. Only what this machine cannot have is replaced: NVML (a fake
`pynvml` module) and the `systemctl`, `kubectl` and `nvidia-smi` programs (scripts on PATH that
record their argv and answer like the real ones).
"""
from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from triage.live.procs import read_proc
from triage.model import OomClass, Recommendation, Verdict
from triage.recovery.actions import RUNNERS, gpu, launch, stop
from triage.recovery.context import Deadline, ExecOptions, LaunchSpec, RunContext
from triage.recovery.identify import Candidate, Identification, identify
from triage.recovery.runbooks import ACTIONS, RunbookError, RunbookStep, load_runbooks, select, with_overrides
from triage.recovery.signals import Drifted, send

from .simkit import MODEL, alive, kill_group, wait_until

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture
def procs() -> Iterator:
    started: list[subprocess.Popen] = []

    def spawn(*argv: str, code: str = "import time; time.sleep(60)") -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code, *argv], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(p)
        assert wait_until(lambda: read_proc(p.pid) is not None and "-c" in read_proc(p.pid).cmdline, 5)
        return p

    yield spawn
    for p in started:
        kill_group(p.pid)
        p.wait(5)


def ctx_for(tmp_path: Path, ident: Identification | None = None, **options) -> RunContext:
    verdict = Verdict(OomClass.BURST, 0.8, "burst", facts={"engine": "vllm", "engine_version": "0.11.0"},
                      recommendations=[Recommendation("max_num_seqs", 256, 8, "cap"),
                                       Recommendation("PYTORCH_CUDA_ALLOC_CONF", None, "expandable_segments:True",
                                                      "fragmentation", env=True)])
    spec = LaunchSpec(["vllm", "serve", MODEL, "--max-num-seqs", "8"], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                      None, None, "test", ["vllm", "serve", MODEL, "--max-num-seqs", "256"])
    return RunContext(tmp_path, "burst", MODEL, None, ident or Identification(), spec, ExecOptions(yes=True, **options),
                      verdict=verdict)


def step(action: str, **params) -> RunbookStep:
    return RunbookStep("s", "a step", action, 30.0, "stop", "it worked", params)


# --- identification -----------------------------------------------------------------------------------

def test_a_pid_seen_before_its_process_started_is_refused_as_reused(procs):
    p = procs("vllm", "serve", MODEL)
    an_hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    result = identify([Candidate(p.pid, "APIServer", "logs/vllm.log:3", an_hour_ago)], MODEL)
    assert result.processes == []
    (refusal,) = result.refused
    assert refusal.pid == p.pid and "reused" in refusal.reason


def test_a_pid_running_another_model_is_refused(procs):
    p = procs("vllm", "serve", "some/other-model")
    result = identify([Candidate(p.pid, "--pid", "--pid")], MODEL)
    assert result.processes == [] and "not this server's" in result.refused[0].reason


def test_this_process_and_its_parents_are_never_candidates():
    result = identify([Candidate(os.getpid(), "--pid", "--pid"), Candidate(os.getppid(), "--pid", "--pid"),
                       Candidate(1, "APIServer", "log:1")], MODEL)
    assert result.processes == []
    assert all("init, this process or one of its parents" in r.reason for r in result.refused)


def test_a_confirmed_server_brings_its_whole_tree(procs):
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "time.sleep(60)")
    root = procs("vllm", "serve", MODEL, code=code)
    assert wait_until(lambda: any(Path(f"/proc/{c}/stat").exists() for c in _children(root.pid)), 5)
    result = identify([Candidate(root.pid, "APIServer", "logs/vllm.log:2", datetime.now(timezone.utc))], MODEL)
    assert result.pids[0] == root.pid and len(result.pids) == 2
    assert result.processes[1].why == f"child of APIServer {root.pid}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_send_refuses_a_pid_whose_start_time_changed(procs):
    p = procs("vllm", "serve", MODEL)
    now = read_proc(p.pid)
    stale = now.__class__(**{**now.__dict__, "start_ticks": now.start_ticks - 100})   # "the process we saw"
    with pytest.raises(Drifted, match="not the identified"):
        send(stale, signal.SIGTERM)
    assert alive(p.pid)
    assert send(now, signal.SIGTERM) is True
    assert wait_until(lambda: p.poll() is not None, 5)
    assert send(now, signal.SIGTERM) is False         # gone: nothing to signal, no error


def test_a_process_on_its_way_out_is_gone_not_a_reused_pid(monkeypatch, procs):
    # The kernel empties /proc/PID/cmdline before the process is a zombie: a SIGKILL sent right after
    # SIGTERM can read it so. Same PID and start time: the process exiting, not another one.
    p = procs("vllm", "serve", MODEL)
    now = read_proc(p.pid)
    exiting = now.__class__(**{**now.__dict__, "cmdline": ()})
    reused = now.__class__(**{**now.__dict__, "cmdline": (), "start_ticks": now.start_ticks + 100})
    assert now.exiting(exiting) and not now.exiting(reused) and not now.exiting(now)
    monkeypatch.setattr("triage.recovery.signals.read_proc", lambda pid: reused)
    with pytest.raises(Drifted):
        send(now, signal.SIGKILL)
    assert alive(p.pid)                                 # a reused PID is never signalled
    monkeypatch.setattr("triage.recovery.signals.read_proc", lambda pid: exiting)
    assert send(now, signal.SIGKILL) is True            # the same process, signalled
    assert wait_until(lambda: p.poll() is not None, 5)


def test_stop_server_aborts_before_any_signal_when_one_pid_drifted(procs, tmp_path):
    a, b = procs("vllm", "serve", MODEL), procs("vllm", "serve", MODEL)
    result = identify([Candidate(a.pid, "APIServer", "log:1"), Candidate(b.pid, "APIServer", "log:9")], MODEL)
    info = result.processes[1].info
    result.processes[1] = result.processes[1].__class__(info.__class__(**{**info.__dict__, "start_ticks": 1}),
                                                        "APIServer", "test")
    out = stop.stop_server(step("stop_server", grace_s=1), ctx_for(tmp_path, result), Deadline(10))
    assert out.result == "aborted" and "reused" in out.output
    assert alive(a.pid) and alive(b.pid)


# --- NVML ---------------------------------------------------------------------------------------------

class FakeNvml(SimpleNamespace):
    """Just enough of pynvml: one 80 GiB GPU whose memory and processes the test sets."""

    def __init__(self, used_gib: float = 1.0, pids: tuple[int, ...] = (), fail_init: bool = False):
        super().__init__(used=int(used_gib * 2**30), pids=list(pids), fail_init=fail_init)

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        total = 80 * 2**30
        return SimpleNamespace(total=total, used=self.used, free=total - self.used)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p) for p in self.pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return []

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-0000"


def test_without_a_driver_gpu_checks_say_so_instead_of_passing(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    out = gpu.check_free(step("check_gpu_free"), ctx_for(tmp_path), Deadline(5))
    assert out.result == "skipped" and "no NVIDIA driver" in out.output
    reset = gpu.reset(step("gpu_reset"), ctx_for(tmp_path, allow_gpu_reset=True), Deadline(5))
    assert reset.result == "failed" and "cannot prove that no process uses the GPU" in reset.output


def test_gpu_free_waits_for_other_processes_and_names_them(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(used_gib=40, pids=(4242,)))
    out = gpu.check_free(step("check_gpu_free", min_free_share=0.9), ctx_for(tmp_path), Deadline(0.5))
    assert out.result == "failed" and "4242" in out.output and "not this server's" in out.by_hand
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(used_gib=0.5))
    assert gpu.check_free(step("check_gpu_free"), ctx_for(tmp_path), Deadline(5)).result == "ok"


def test_gpu_reset_needs_the_flag_and_an_idle_gpu(monkeypatch, tmp_path, fake_bin):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(pids=(4242,)))
    assert gpu.reset(step("gpu_reset"), ctx_for(tmp_path), Deadline(5)).result == "skipped"
    busy = gpu.reset(step("gpu_reset"), ctx_for(tmp_path, allow_gpu_reset=True), Deadline(5))
    assert busy.result == "failed" and "in use by [4242]" in busy.output and fake_bin.calls() == []
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    idle = gpu.reset(step("gpu_reset"), ctx_for(tmp_path, allow_gpu_reset=True), Deadline(5))
    assert idle.result == "ok" and fake_bin.calls() == [["nvidia-smi", "--gpu-reset", "-i", "0"]]


def test_stop_server_waits_until_nvml_no_longer_lists_the_pids(monkeypatch, procs, tmp_path):
    p = procs("vllm", "serve", MODEL)
    fake = FakeNvml(used_gib=70, pids=(p.pid,))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ident = identify([Candidate(p.pid, "--pid", "--pid")], MODEL)
    out = stop.stop_server(step("stop_server", grace_s=2), ctx_for(tmp_path, ident), Deadline(3))
    assert out.result == "failed" and f"NVML still lists [{p.pid}]" in out.output   # the driver kept it
    assert not alive(p.pid)


# --- drivers ------------------------------------------------------------------------------------------

@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """systemctl, kubectl and nvidia-smi stand-ins that log their argv as JSON lines."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    deployment = {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "args": ["--model", MODEL, "--max-num-seqs", "256", "--port", "8000"]}]}}}}
    for name in ("systemctl", "kubectl", "nvidia-smi"):
        script = bin_dir / name
        script.write_text(f"""#!{sys.executable}
import json, os, sys
with open({str(calls)!r}, "a") as fh:
    fh.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["-n", "llm"] and "get" in sys.argv:
    print(json.dumps({deployment!r}))
""".replace("{deployment!r}", repr(deployment)))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return SimpleNamespace(calls=lambda: [json.loads(line) for line in calls.read_text().splitlines()]
                           if calls.exists() else [])


def test_systemctl_driver_writes_a_dropin_and_restarts_the_unit(tmp_path, monkeypatch, fake_bin):
    monkeypatch.setenv("TRIAGE_SYSTEMD_DIR", str(tmp_path / "systemd"))
    out = launch.restart(step("restart", driver="systemctl"), ctx_for(tmp_path, unit="vllm.service"), Deadline(10))
    assert out.result == "ok", out.output
    dropin = (tmp_path / "systemd" / "vllm.service.d" / "50-triage-recovery.conf").read_text()
    assert 'Environment="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"' in dropin
    assert f"ExecStart=\nExecStart=vllm serve {MODEL} --max-num-seqs 8\n" in dropin
    assert fake_bin.calls() == [["systemctl", "daemon-reload"], ["systemctl", "restart", "vllm.service"],
                                ["systemctl", "is-active", "vllm.service"]]


def test_kubectl_driver_patches_only_the_advised_args(tmp_path, fake_bin):
    out = launch.restart(step("restart", driver="kubectl"), ctx_for(tmp_path, deployment="llm/vllm-70b"), Deadline(10))
    assert out.result == "ok", out.output
    calls = fake_bin.calls()
    assert calls[0] == ["kubectl", "-n", "llm", "get", "deployment", "vllm-70b", "-o", "json"]
    assert calls[1] == ["kubectl", "-n", "llm", "set", "env", "deployment/vllm-70b",
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    assert calls[2][:6] == ["kubectl", "-n", "llm", "patch", "deployment", "vllm-70b"]
    (patch,) = json.loads(calls[2][-1])
    assert patch["value"] == ["--model", MODEL, "--max-num-seqs", "8", "--port", "8000"]
    assert calls[3][:5] == ["kubectl", "-n", "llm", "rollout", "status"]


def test_drivers_without_their_target_fail_with_the_flag_to_give(tmp_path):
    out = launch.restart(step("restart", driver="kubectl"), ctx_for(tmp_path), Deadline(5))
    assert out.result == "failed" and "--deployment NAMESPACE/NAME" in out.by_hand
    out = launch.restart(step("restart", driver="systemctl"), ctx_for(tmp_path), Deadline(5))
    assert out.result == "failed" and "--unit" in out.by_hand


def test_a_relaunch_that_exits_during_startup_fails_with_its_log(tmp_path):
    ctx = ctx_for(tmp_path)
    ctx.launch = LaunchSpec([sys.executable, "-c", "import sys; print('ValueError: no room'); sys.exit(1)"], {}, None,
                            None, "test")
    out = launch.restart(step("restart"), ctx, Deadline(10))
    assert out.result == "failed" and "exited with code 1" in out.output and "ValueError: no room" in out.output
    assert (tmp_path / out.data["launched"]["log"]).exists()


# --- runbooks -----------------------------------------------------------------------------------------

def test_every_runbook_action_has_a_runner():
    assert set(ACTIONS) == set(RUNNERS)


def test_param_overrides_are_validated_like_the_file():
    book = select(load_runbooks(), "chronic")
    short = with_overrides(book, ["steady.window_s=5", "stop.timeout_s=20"])
    steps = {s.id: s for s in short.steps}
    assert steps["steady"].params["window_s"] == 5 and steps["stop"].timeout_s == 20
    with pytest.raises(RunbookError, match="no step 'nope'"):
        with_overrides(book, ["nope.window_s=5"])
    with pytest.raises(RunbookError, match="unknown parameter for verify"):
        with_overrides(book, ["steady.windw_s=5"])
    with pytest.raises(RunbookError, match="expected a number"):
        with_overrides(book, ["steady.window_s=soon"])
    with pytest.raises(RunbookError, match="STEP.KEY=VALUE"):
        with_overrides(book, ["window_s=5"])


def test_deadline_cuts_waits():
    d = Deadline(0.2)
    began = time.monotonic()
    d.sleep(5)
    assert time.monotonic() - began < 1 and d.expired()


# --- the executor's questions -----------------------------------------------------------------------

def test_a_declined_step_ends_the_run_before_anything_is_done(tmp_path, monkeypatch):
    import shutil

    from tests.conftest import sample
    from triage.recovery.session import execute, open_session

    incident = tmp_path / "inc"
    shutil.copytree(sample("chronic-fragmentation"), incident)
    monkeypatch.setenv("TRIAGE_LOCK_FILE", str(tmp_path / "lock"))
    asked: list[str] = []
    session = open_session(str(incident))
    # The relaunch command is rebuilt from the logs (the bundle): asked about first, before any step.
    report = execute(session, ExecOptions(confirm=lambda q: asked.append(q) or q.startswith("Run this command")))
    assert report.result == "declined" and asked == ["Run this command from the bundle?", "Run step 1 (drain)?"]
    recs = [json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()]
    assert [(r["action"], r["phase"], r["result"]) for r in recs] == [("run", "start", None),
                                                                      ("run", "end", "declined")]


def test_execute_without_a_terminal_needs_yes(runner, tmp_path):
    import shutil

    from tests.conftest import sample
    from triage.cli import main

    incident = tmp_path / "inc"
    shutil.copytree(sample("chronic-fragmentation"), incident)
    result = runner.invoke(main, ["recover", str(incident), "--execute"])
    assert result.exit_code == 1 and "--yes" in result.stderr
    assert not (incident / "actions.jsonl").exists()


def test_in_a_fleet_bundle_only_this_hosts_log_names_pids():
    from triage.recovery.prepare import _this_host

    cands = [Candidate(11, "APIServer", "logs/gpu-node-03.log:2"), Candidate(22, "APIServer", "logs/gpu-node-07.log:2")]
    notes: list[str] = []
    assert [c.pid for c in _this_host(cands, notes, host="gpu-node-07.cluster.local")] == [22]
    assert _this_host(cands, notes, host="elsewhere") == cands and "several hosts" in notes[0]


# --- review hardening: who may be signalled ----------------------------------------------------------

def test_a_process_only_a_gpu_list_names_is_refused_unless_linked_to_this_server(procs, tmp_path):
    """NVML (or nvidia-smi in the bundle) lists every process on the host's GPUs: a neighbour replica
    runs the same model and its engine carries the same vLLM title. Neither is this server's."""
    title = subprocess.Popen(["bash", "-c", 'exec -a "VLLM::EngineCore_DP0" sleep 60'], start_new_session=True)
    try:
        same_model = procs("vllm", "serve", MODEL, "--port", "8001")
        assert wait_until(lambda: (read_proc(title.pid) or SimpleNamespace(cmdline=())).cmdline[:1]
                          == ("VLLM::EngineCore_DP0",), 5)
        result = identify([Candidate(title.pid, "GPU process", "NVML GPU 1", weak=True),
                           Candidate(same_model.pid, "GPU process", "NVML GPU 1", weak=True)], MODEL)
        assert result.processes == []
        assert {r.pid for r in result.refused} == {title.pid, same_model.pid}
        assert all("another server on this host" in r.reason for r in result.refused)
        # The server's own log naming the PID is what confirms it; a GPU list never overrides that.
        named = identify([Candidate(same_model.pid, "GPU process", "NVML GPU 1", weak=True),
                          Candidate(same_model.pid, "APIServer", "logs/vllm.log:2")], MODEL)
        assert named.pids == [same_model.pid]
    finally:
        kill_group(title.pid)
        title.wait(5)


def test_an_orphan_on_the_gpu_is_confirmed_through_the_session_of_the_server_the_log_named(tmp_path):
    # The API server (a session leader) dies; its worker, re-parented, keeps the session and the GPU.
    leader = subprocess.Popen(["bash", "-c", 'exec -a "VLLM::Worker_TP0" sleep 60 & echo $!'], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    worker = int(leader.stdout.readline())
    try:
        leader.wait(5)
        assert wait_until(lambda: (read_proc(worker) or SimpleNamespace(sid=0, cmdline=())).sid == leader.pid
                          and (read_proc(worker) or SimpleNamespace(cmdline=())).cmdline[:1] == ("VLLM::Worker_TP0",), 5)
        result = identify([Candidate(leader.pid, "APIServer", "logs/vllm.log:1"),
                           Candidate(worker, "GPU process", "NVML GPU 0", weak=True)], MODEL)
        assert result.pids == [worker] and "session" in result.processes[0].why
        # Without the log naming its session leader, the same orphan is anyone's.
        alone = identify([Candidate(worker, "GPU process", "NVML GPU 0", weak=True)], MODEL)
        assert alone.processes == [] and alone.refused[0].pid == worker
    finally:
        kill_group(leader.pid)


def test_nvml_candidates_are_marked_as_a_gpu_list(monkeypatch):
    from triage.recovery.prepare import _gpu_candidates

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(pids=(4242,)))
    (cand,) = _gpu_candidates([])
    assert cand.pid == 4242 and cand.weak


def test_stop_server_also_stops_children_started_since_identification(procs, tmp_path):
    code = ("import subprocess, sys, time; time.sleep(1); "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")
    root = procs("vllm", "serve", MODEL, code=code)
    ident = identify([Candidate(root.pid, "--pid", "--pid")], MODEL)
    assert ident.pids == [root.pid]                                  # no child yet
    assert wait_until(lambda: _children(root.pid), 5)
    (child,) = _children(root.pid)
    # A child seen between fork and exec still shows its parent's command line; stop_server rightly
    # refuses a pid whose identity changes under it, so the test waits for the exec to be done.
    assert wait_until(lambda: "subprocess" not in _cmdline(child), 5)
    out = stop.stop_server(step("stop_server", grace_s=2), ctx_for(tmp_path, ident), Deadline(10))
    assert out.result == "ok", out.output
    assert f"SIGTERM {child}" in out.output and "started since the server was identified" in out.output
    assert wait_until(lambda: not alive(child), 5)


@pytest.fixture
def answering_url() -> Iterator[str]:
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_stop_server_with_nothing_identified_fails_while_the_server_still_answers(tmp_path, answering_url):
    ctx = ctx_for(tmp_path)
    ctx.url, ctx.relaunch_driver = answering_url, "process"
    out = stop.stop_server(step("stop_server"), ctx, Deadline(10))
    assert out.result == "failed" and "still answers" in out.output and "--pid" in out.by_hand
    ctx.relaunch_driver = "systemctl"                   # systemd replaces the unit's process itself
    assert stop.stop_server(step("stop_server"), ctx, Deadline(10)).result == "ok"
    ctx.url, ctx.relaunch_driver = "http://127.0.0.1:9", "process"      # down: nothing to stop, fine
    assert stop.stop_server(step("stop_server"), ctx, Deadline(10)).result == "ok"


def test_a_relaunch_is_refused_while_the_server_still_runs(procs, tmp_path):
    p = procs("vllm", "serve", MODEL)
    ctx = ctx_for(tmp_path, identify([Candidate(p.pid, "--pid", "--pid")], MODEL))
    ctx.launch = LaunchSpec([sys.executable, "-c", "pass"], {}, None, None, "test")
    out = launch.restart(step("restart"), ctx, Deadline(10))
    assert out.result == "failed" and "still running" in out.output and str(p.pid) in out.output
    assert not (tmp_path / "recovery").exists() and alive(p.pid)


def test_a_relaunch_is_refused_when_the_working_directory_is_gone(tmp_path):
    ctx = ctx_for(tmp_path)
    ctx.launch = LaunchSpec([sys.executable, "-c", "pass"], {}, str(tmp_path / "gone"), None, "test")
    out = launch.restart(step("restart"), ctx, Deadline(10))
    assert out.result == "failed" and "working directory" in out.output and not (tmp_path / "recovery").exists()


def test_kubectl_needs_no_local_command_and_its_rollback_undoes_the_rollout(tmp_path, fake_bin):
    ctx = ctx_for(tmp_path, deployment="llm/vllm-70b")
    ctx.launch = None                                  # the server runs in a pod: nothing local to read
    assert launch.restart(step("restart", driver="kubectl"), ctx, Deadline(10)).result == "ok"
    before = len(fake_bin.calls())
    out = launch.rollback(step("rollback", driver="kubectl"), ctx, Deadline(10))
    assert out.result == "ok", out.output
    calls = fake_bin.calls()[before:]
    assert calls[0] == ["kubectl", "-n", "llm", "rollout", "undo", "deployment/vllm-70b"]
    assert calls[1][:5] == ["kubectl", "-n", "llm", "rollout", "status"] and len(calls) == 2


class FakeNvmlGpus(FakeNvml):
    """Several GPUs: `pids_by_gpu[i]` are the processes on GPU i."""

    def __init__(self, pids_by_gpu: list[tuple[int, ...]]):
        super().__init__()
        self.pids_by_gpu = pids_by_gpu

    def nvmlDeviceGetCount(self):
        return len(self.pids_by_gpu)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p) for p in self.pids_by_gpu[h]]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-000{h}"


def test_gpu_reset_checks_every_gpu_first_and_never_guesses_which(monkeypatch, tmp_path, fake_bin):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvmlGpus([(), (4242,)]))
    ctx = ctx_for(tmp_path, allow_gpu_reset=True)
    ctx.launch = LaunchSpec(["vllm"], {"CUDA_VISIBLE_DEVICES": "0,1"}, None, {}, "test")
    out = gpu.reset(step("gpu_reset"), ctx, Deadline(5))
    assert out.result == "failed" and "GPU 1 is in use by [4242]" in out.output
    assert fake_bin.calls() == []                      # GPU 0 was idle, and still not reset
    ctx.launch = LaunchSpec(["vllm"], {}, None, {}, "test")       # which GPU? unknown
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvmlGpus([(), ()]))
    out = gpu.reset(step("gpu_reset"), ctx, Deadline(5))
    assert out.result == "failed" and "not known" in out.output and fake_bin.calls() == []
    ctx.launch = LaunchSpec(["vllm"], {"CUDA_VISIBLE_DEVICES": "1"}, None, {}, "test")
    assert gpu.reset(step("gpu_reset"), ctx, Deadline(5)).result == "ok"
    assert fake_bin.calls() == [["nvidia-smi", "--gpu-reset", "-i", "1"]]


def test_a_wedged_nvml_call_is_bounded(monkeypatch):
    from triage.live import nvml

    class Wedged(FakeNvml):
        def nvmlInit(self):
            time.sleep(3)

    monkeypatch.setitem(sys.modules, "pynvml", Wedged())
    monkeypatch.setattr(nvml, "_STUCK", [])
    began = time.monotonic()
    first = nvml.read_gpus(timeout_s=0.3)
    assert isinstance(first, nvml.NoNvml) and "did not answer" in str(first)
    second = nvml.read_gpus(timeout_s=0.3)             # still stuck: no second thread piles up
    assert isinstance(second, nvml.NoNvml) and "has not answered" in str(second)
    assert time.monotonic() - began < 2


# --- review hardening: the executor and its audit trail --------------------------------------------

def _session_for(tmp_path, monkeypatch, name="chronic-fragmentation", **kwargs):
    import shutil

    from tests.conftest import sample
    from triage.recovery.session import open_session

    incident = tmp_path / "inc"
    if not incident.exists():
        shutil.copytree(sample(name), incident)
    monkeypatch.setenv("TRIAGE_LOCK_FILE", str(tmp_path / "lock"))
    return open_session(str(incident), **kwargs)


def _records(incident: Path) -> list[dict]:
    return [json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()]


def _confirmed(session, **options) -> ExecOptions:
    """--yes plus --trust-bundle-launch for the plan's commands from the bundle (the sample's launch
    command is rebuilt from its logs)."""
    return ExecOptions(yes=True, trusted_launches=tuple(b.digest for b in session.plan.bundle), **options)


def test_an_action_that_breaks_is_recorded_and_the_run_still_ends(tmp_path, monkeypatch):
    from triage.recovery import executor
    from triage.recovery.audit import verify
    from triage.recovery.session import execute

    def broken(step, ctx, deadline):
        raise TypeError("a bug in the action")

    monkeypatch.setitem(executor.RUNNERS, "stop_server", broken)
    session = _session_for(tmp_path, monkeypatch)
    report = execute(session, _confirmed(session, force=True), lock_path=str(tmp_path / "lock"))
    assert report.result == "failed" and report.steps[-1].result == "failed"
    recs = _records(session.incident)
    assert [(r["step"], r["phase"], r["result"]) for r in recs][-3:] == [
        ("stop", "start", None), ("stop", "end", "failed"), (None, "end", "failed")]
    assert "TypeError: a bug in the action" in recs[-2]["output_tail"] and verify(session.incident).ok


@pytest.mark.parametrize("cut", [KeyboardInterrupt, "timeout"])
def test_a_relaunch_cut_off_still_records_the_server_it_started(tmp_path, monkeypatch, cut):
    from triage.recovery import executor
    from triage.recovery.context import StepTimeout
    from triage.recovery.session import execute

    def starts_then_dies(step, ctx, deadline):
        ctx.launched.append({"pid": 4242, "start_ticks": 17, "argv": ["vllm"], "driver": "process"})
        raise StepTimeout("step timeout") if cut == "timeout" else cut()

    monkeypatch.setitem(executor.RUNNERS, "stop_server", starts_then_dies)
    session = _session_for(tmp_path, monkeypatch)
    options = _confirmed(session, force=True)
    if cut == "timeout":
        execute(session, options, lock_path=str(tmp_path / "lock"))
    else:
        with pytest.raises(KeyboardInterrupt):
            execute(session, options, lock_path=str(tmp_path / "lock"))
    end = next(r for r in _records(session.incident) if r["step"] == "stop" and r["phase"] == "end")
    assert end["result"] in ("timeout", "interrupted")
    assert end["data"]["launched"]["pid"] == 4242 and end["data"]["launched"]["start_ticks"] == 17


def test_a_run_of_another_runbook_in_between_means_starting_over(tmp_path, monkeypatch):
    from triage.recovery.audit import AuditLog
    from triage.recovery.executor import resume_point

    session = _session_for(tmp_path, monkeypatch)
    first = AuditLog(session.incident)
    first.append({"action": "run", "phase": "start", "args": {"runbook": "chronic"}})
    for sid in ("drain", "stop"):
        first.append({"action": "x", "step": sid, "phase": "end", "result": "ok"})
    assert resume_point(session.audit, session.plan) == (first.run_id, ["drain", "stop"])
    other = AuditLog(session.incident)
    other.append({"action": "run", "phase": "start", "args": {"runbook": "rollback"}})
    other.append({"action": "run", "phase": "end", "result": "ok", "args": {"runbook": "rollback"}})
    assert resume_point(session.audit, session.plan) == (None, [])


def test_a_resumed_run_stops_again_what_an_unfinished_relaunch_left_running(procs, tmp_path, monkeypatch):
    from triage.recovery.session import _redo_stop

    session = _session_for(tmp_path, monkeypatch)
    p = procs("vllm", "serve", MODEL)
    session.prepared.identification = identify([Candidate(p.pid, "relaunched server", "actions.jsonl:9")], MODEL)
    said: list[str] = []
    assert _redo_stop(session, ["drain", "stop", "gpu-free"], said.append) == ["drain"]
    assert "step 2 (stop)" in said[0]
    done = ["drain", "stop", "gpu-free", "relaunch"]     # the relaunch completed: wait for it, do not redo it
    assert _redo_stop(session, done, said.append) == done
    p.kill()
    p.wait(5)
    assert _redo_stop(session, ["drain", "stop", "gpu-free"], said.append) == ["drain", "stop", "gpu-free"]


def test_a_plan_made_before_another_run_wrote_the_log_is_not_executed(tmp_path, monkeypatch):
    from triage.errors import TriageError
    from triage.recovery.audit import AuditLog
    from triage.recovery.session import execute

    session = _session_for(tmp_path, monkeypatch)
    other = AuditLog(session.incident)                 # another recovery, finishing while we planned
    other.append({"action": "run", "phase": "start", "args": {"runbook": "chronic"}})
    other.append({"action": "run", "phase": "end", "result": "ok", "args": {"runbook": "chronic"}})
    with pytest.raises(TriageError, match="changed since this plan was made"):
        execute(session, ExecOptions(yes=True, force=True), lock_path=str(tmp_path / "lock"))
    assert len(_records(session.incident)) == 2


def test_preflight_refuses_before_anything_is_done(tmp_path, monkeypatch):
    from triage.errors import TriageError
    from triage.recovery.session import execute, preflight

    session = _session_for(tmp_path, monkeypatch)
    assert preflight(session, ExecOptions()) == []
    assert "--unit" in preflight(session, ExecOptions(driver="systemctl"))[0]
    assert "--deployment" in preflight(session, ExecOptions(driver="kubectl", deployment="no-namespace"))[0]
    assert preflight(session, ExecOptions(driver="kubectl", deployment="llm/vllm")) == []
    with pytest.raises(TriageError, match="nothing was done"):
        execute(session, ExecOptions(yes=True, driver="systemctl"), lock_path=str(tmp_path / "lock"))
    assert not (session.incident / "actions.jsonl").exists()
    rollback = _session_for(tmp_path, monkeypatch, runbook_name="rollback")
    rollback.prepared.known_good = None
    assert "no known-good launch" in preflight(rollback, ExecOptions())[0]
    assert preflight(rollback, ExecOptions(driver="kubectl", deployment="llm/vllm")) == []


def test_dry_run_warns_what_execute_would_refuse_and_rejects_a_bad_url(runner, tmp_path):
    import shutil

    from tests.conftest import sample
    from triage.cli import main

    incident = tmp_path / "inc"
    shutil.copytree(sample("chronic-fragmentation"), incident)
    dry = runner.invoke(main, ["recover", str(incident), "--driver", "systemctl", "--json"])
    assert dry.exit_code == 0 and "--execute would refuse to start" in dry.stderr and "--unit" in dry.stderr
    assert "--unit" in json.loads(dry.stdout)["refused_by_preflight"][0]
    for url in ("garbage", "http://[::1", "http://127.0.0.1:99999", "ftp://host"):
        bad = runner.invoke(main, ["recover", str(incident), "--url", url])
        assert bad.exit_code == 1 and "--url" in bad.stderr and "Traceback" not in bad.stderr, (url, bad.stderr)
    assert sorted(p.name for p in incident.iterdir()) == sorted(p.name for p in sample("chronic-fragmentation").iterdir())


def test_a_short_audit_write_is_taken_back_and_the_log_still_verifies(tmp_path, monkeypatch):
    from triage.recovery import audit as audit_mod

    log = audit_mod.AuditLog(tmp_path)
    log.append({"action": "run", "phase": "start"})
    real_write = os.write

    def half(fd, data):
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(audit_mod.os, "write", half)
    with pytest.raises(audit_mod.AuditError, match="taken back"):
        log.append({"action": "run", "phase": "end", "result": "ok"})
    monkeypatch.setattr(audit_mod.os, "write", real_write)
    report = audit_mod.verify(tmp_path)
    assert report.ok and report.records == 1
    log.append({"action": "run", "phase": "end", "result": "ok"})
    assert audit_mod.verify(tmp_path).records == 2


def test_another_hosts_records_are_not_resumed_nor_identified(tmp_path, monkeypatch):
    """A shared incident directory (a fleet bundle on NFS): host B must not resume host A's run,
    nor take A's relaunched PIDs for its own."""
    from triage.recovery import prepare as prepare_mod
    from triage.recovery.audit import AuditLog
    from triage.recovery.executor import resume_point

    session = _session_for(tmp_path, monkeypatch)
    log = AuditLog(session.incident)
    log.append({"action": "run", "phase": "start", "args": {"runbook": "chronic"}})
    log.append({"action": "restart", "step": "relaunch", "phase": "end", "result": "ok",
                "data": {"launched": {"pid": os.getpid(), "start_ticks": read_proc(os.getpid()).start_ticks,
                                      "argv": ["vllm"], "driver": "process"}}})
    assert resume_point(session.audit, session.plan)[0] == log.run_id
    assert [r["pid"] for r in prepare_mod._relaunched(prepare_mod.this_host(log.records()))] == [os.getpid()]
    monkeypatch.setattr(prepare_mod.socket, "gethostname", lambda: "another-host")
    notes: list[str] = []
    assert prepare_mod.this_host(log.records(), notes) == [] and "other hosts" in notes[0]
    assert resume_point(session.audit, session.plan) == (None, [])


def test_a_relaunch_recorded_before_a_reboot_names_no_process(tmp_path):
    from triage.recovery.prepare import _relaunched

    rec = {"phase": "end", "seq": 3, "data": {"launched": {"pid": 42, "start_ticks": 1, "driver": "process",
                                                           "boot_id": "an-earlier-boot"}}}
    assert _relaunched([rec]) == []
    rec["data"]["launched"].pop("boot_id")                  # older records: still read
    assert [r["pid"] for r in _relaunched([rec])] == [42]


def test_a_symlink_at_the_lock_path_is_not_followed(tmp_path):
    from triage.recovery.lock import HostLock

    target = tmp_path / "precious"
    target.write_text("do not truncate me")
    link = tmp_path / "recover.lock"
    link.symlink_to(target)
    from triage.errors import TriageError

    with pytest.raises(TriageError, match="cannot open the recovery lock"):
        HostLock(link).acquire()
    assert target.read_text() == "do not truncate me"


@pytest.mark.parametrize("override, problem", [
    ("stop.grace_s=-5", "grace_s: -5 is out of range"),          # an instant SIGKILL
    ("healthy.retries=0", "retries: 0 is out of range"),         # /health never probed
    ("steady.max_kv_usage=2", "max_kv_usage: 2 is out of range"),
    ("gpu-free.min_free_share=-0.1", "min_free_share: -0.1 is out of range"),
    ("relaunch.env={'A B': 1}", "params.env.A B: expected NAME: value"),
    ("relaunch.env={A: null}", "params.env.A: expected NAME: value"),
])
def test_parameters_out_of_range_are_refused(override, problem):
    with pytest.raises(RunbookError, match=re.escape(problem)):
        with_overrides(select(load_runbooks(), "chronic"), [override])


def test_a_whole_number_share_is_a_number_too():
    book = with_overrides(select(load_runbooks(), "chronic"), ["steady.max_kv_usage=1"])
    assert {s.id: s for s in book.steps}["steady"].params["max_kv_usage"] == 1


@pytest.mark.parametrize("launch, problem", [
    ({"argv": ["vllm"], "cwd": [1]}, "launch.cwd must be an absolute directory path"),
    ({"argv": ["vllm"], "cwd": "relative/dir"}, "launch.cwd must be an absolute directory path"),
    ({"argv": ["vllm"], "env": {"A": None}}, "launch.env must be a mapping of NAME: value"),
    ({"argv": ["vllm"], "argx": ["typo"]}, "launch.argx: unknown key"),
])
def test_a_broken_launch_in_incident_yaml_is_one_clear_line(runner, tmp_path, launch, problem):
    import shutil

    import yaml

    from tests.conftest import sample
    from triage.cli import main

    incident = tmp_path / "inc"
    shutil.copytree(sample("chronic-fragmentation"), incident)
    meta = incident / "incident.yaml"
    data = (yaml.safe_load(meta.read_text()) if meta.exists() else None) or {}
    meta.write_text(yaml.safe_dump({**data, "launch": launch}))
    result = runner.invoke(main, ["recover", str(incident)])
    assert result.exit_code == 1 and problem in result.stderr and "Traceback" not in result.stderr


def test_with_the_kubectl_driver_the_logs_pids_are_not_looked_up_here(runner, tmp_path):
    """A pod's log prints PIDs of the pod's namespace; on this host the same numbers are strangers."""
    from tests.conftest import sample
    from triage.cli import main

    plain = json.loads(runner.invoke(main, ["recover", str(sample("startup-other-tenant")), "--json"]).stdout)
    assert any(p["pid"] == 3817204 for p in plain["pids"])
    pod = runner.invoke(main, ["recover", str(sample("startup-other-tenant")), "--json", "--driver", "kubectl",
                               "--deployment", "llm/vllm"])
    plan = json.loads(pod.stdout)
    assert not any(p["pid"] == 3817204 for p in plan["pids"])
    assert any("pod's own" in n for n in plan["notes"])


def test_a_launch_that_served_after_a_resume_still_counts_as_known_good():
    from triage.recovery.prepare import _known_good

    verdict = Verdict(OomClass.BURST, 0.8, "burst")
    records = [
        {"seq": 1, "action": "restart", "phase": "start", "args": {"argv": ["vllm", "--max-num-seqs", "8"]}},
        {"seq": 2, "action": "restart", "phase": "end", "result": "ok"},
        # the run was interrupted; the resumed run only waited for that server
        {"seq": 3, "action": "wait_healthy", "phase": "end", "result": "ok", "data": {"serving_argv": None}},
        {"seq": 4, "action": "restart", "phase": "start", "args": {"argv": ["vllm", "--max-num-seqs", "4"]}},
    ]
    assert _known_good(verdict, records, None) == ["vllm", "--max-num-seqs", "8"]


def test_the_serves_again_check_cannot_be_held_by_a_trickling_server(tmp_path, monkeypatch):
    """A wedged front end that answers /health and then trickles a completion byte by byte never
    trips requests' per-read timeout; the check before the first destructive step is bounded anyway."""
    import socket
    import threading

    from triage.recovery import executor

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop_serving = threading.Event()

    def serve() -> None:
        while not stop_serving.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    def answer(conn: socket.socket) -> None:
        with conn:
            request = conn.recv(65536).decode(errors="replace")
            try:
                if request.startswith("GET /health"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                elif request.startswith("POST"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                    while not stop_serving.is_set():
                        conn.sendall(b" ")
                        time.sleep(0.2)
                else:
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        monkeypatch.setattr(executor, "PRECHECK_S", 1.0)
        ctx = ctx_for(tmp_path)
        ctx.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        runner = executor.Executor(SimpleNamespace(), ctx, None)
        began = time.monotonic()
        assert runner._still_failing() is None                # no answer in time: it does not serve
        assert time.monotonic() - began < 8
    finally:
        stop_serving.set()
        listener.close()


def test_an_interrupt_swallowed_by_a_finalizer_still_ends_the_run(tmp_path, monkeypatch, recwarn):
    """A SIGTERM whose KeyboardInterrupt fires inside a __del__ is printed as "Exception ignored" and
    dropped by Python; the run must still stop at its next wait, recorded as interrupted."""
    from triage.recovery import executor, interrupts
    from triage.recovery.audit import verify
    from triage.recovery.session import execute

    class Finalizer:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)                           # the handler runs here, inside __del__

    def step_with_garbage(step, ctx, deadline):
        Finalizer()                                   # collected at once: the interrupt is swallowed
        deadline.sleep(20)
        raise AssertionError("the interrupt was lost")

    monkeypatch.setitem(executor.RUNNERS, "stop_server", step_with_garbage)
    session = _session_for(tmp_path, monkeypatch)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        execute(session, _confirmed(session, force=True), lock_path=str(tmp_path / "lock"))
    assert time.monotonic() - began < 10 and interrupts.pending() is None
    assert not [w for w in recwarn if "Exception ignored" in str(w.message)]     # no traceback printed
    recs = _records(session.incident)
    assert [(r["step"], r["result"]) for r in recs[-2:]] == [("stop", "interrupted"), (None, "interrupted")]
    assert verify(session.incident).ok
