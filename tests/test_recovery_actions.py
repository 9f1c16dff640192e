"""Recovery pieces one at a time: process identification and signalling, NVML checks, the
systemctl and kubectl drivers, runbook overrides.

Real processes throughout. Only what this machine cannot have is replaced: NVML (a fake
`pynvml` module) and the `systemctl`, `kubectl` and `nvidia-smi` programs (scripts on PATH that
record their argv and answer like the real ones).
"""
from __future__ import annotations

import json
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

from triage.model import OomClass, Recommendation, Verdict
from triage.recovery.actions import RUNNERS, gpu, launch, stop
from triage.recovery.context import Deadline, ExecOptions, LaunchSpec, RunContext
from triage.recovery.identify import Candidate, Identification, identify
from triage.recovery.procs import Drifted, read_proc, send
from triage.recovery.runbooks import ACTIONS, RunbookError, RunbookStep, load_runbooks, select, with_overrides

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


def test_stop_server_aborts_before_any_signal_when_one_pid_drifted(procs, tmp_path):
    a, b = procs("vllm", "serve", MODEL), procs("vllm", "serve", MODEL)
    result = identify([Candidate(a.pid, "APIServer", "log:1"), Candidate(b.pid, "APIServer", "log:9")], MODEL)
    info = result.processes[1].info
    result.processes[1] = result.processes[1].__class__(info.__class__(**{**info.__dict__, "start_ticks": 1}),
                                                        "APIServer", "test")
    out = stop.run(step("stop_server", grace_s=1), ctx_for(tmp_path, result), Deadline(10))
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
    out = stop.run(step("stop_server", grace_s=2), ctx_for(tmp_path, ident), Deadline(3))
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
    report = execute(session, ExecOptions(confirm=lambda q: asked.append(q) or False))
    assert report.result == "declined" and asked == ["Run step 1 (drain)?"]
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
