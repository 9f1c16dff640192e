"""`triage collect` end to end: real simulator processes on loopback, `triage collect` run as a
separate process, and the bundle read back by classify, timeline, postmortem and recover.

Only NVML is faked (a pynvml module on PYTHONPATH: this host has no GPU); nvidia-smi, kubectl and
dmesg are faked by small scripts on PATH where a test needs their answers, and are the real
programs (or absent) otherwise. Every wait is bounded; every process started is killed by its group.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from triage.api import classify_paths
from triage.evidence import load_evidence
from triage.evidence.kinds import Kind
from triage.model import OomClass

from .conftest import SAMPLES
from .simkit import MODEL, SMALL_CARD, START_S, complete, kill_group, words
from .test_sim import start_sim, until_failure  # noqa: F401  (the simulator fixture: one process group per server, killed after)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists() or not hasattr(os, "fork"),
                                reason="collect reads /proc; the simulator's process tree needs fork")

API_KEY = "sk-collecttest0123456789abcdef"          # the shape of an OpenAI-style key
HF_TOKEN = "plainsecretvalue123"                    # no telling shape: masked for its flag's name
ENV_SECRET = "envsecretvalue42"                     # VLLM_API_KEY in the server's environment
SECRETS = (API_KEY, HF_TOKEN, ENV_SECRET)
QUICK = ("--scrapes", "2", "--every", "0.2")


def collect(out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 90
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", "collect", "-o", str(out), *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def triage(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "120", **(env or {})}, stdin=subprocess.DEVNULL)


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def sources(bundle: Path) -> dict[str, dict]:
    return {s["name"]: s for s in manifest(bundle)["sources"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def class_of(path: Path | str) -> OomClass:
    return classify_paths([str(path)])[0].oom_class


def check_manifest(bundle: Path) -> None:
    """Every file is listed with its true SHA-256 and size, and nothing listed is missing."""
    doc = manifest(bundle)
    listed = {f["path"]: f for f in doc["files"]}
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert on_disk - {"manifest.json"} == set(listed), (on_disk, set(listed))
    for rel, entry in listed.items():
        data = (bundle / rel).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), rel
        assert entry["size"] == len(data) and entry["source"] and entry["duration_s"] >= 0
    for src in doc["sources"]:
        assert src["status"] in ("ok", "failed", "skipped", "timeout"), src
        if src["status"] != "ok":
            assert src.get("reason"), src
        assert set(src["files"]) <= set(listed)


def progress(stderr: str) -> dict[str, str]:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("triage collect: ")]
    return {ln.split(": ", 2)[1]: ln for ln in lines}


# --- against the simulator -----------------------------------------------------------------------

def test_healthy_server_bundle_is_complete_masked_and_read_by_every_command(start_sim, tmp_path):
    hooks = tmp_path / "hooks"
    (hooks / "torch").mkdir(parents=True)
    stamp = "2026-03-12T14-17-03.120Z"
    stats = {"allocated_bytes.all.current": 6 * GIB, "reserved_bytes.all.current": 6 * GIB + 64 * MIB,
             "num_ooms": 0, "num_alloc_retries": 0}
    (hooks / "torch" / f"memory_stats-{stamp}-pid4242-dev0-signal.json").write_text(json.dumps(
        {"time": "2026-03-12T14:17:03.120Z", "reason": "signal", "pid": 4242, "device": 0, "memory_stats": stats}))
    env = {"VLLM_API_KEY": ENV_SECRET, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "NCCL_DEBUG": "INFO", "TRIAGE_HOOKS_DIR": str(hooks), "UNRELATED_SETTING": "x"}
    sim = start_sim("--api-key", API_KEY, "--hf-token", HF_TOKEN, env=env)
    assert all(complete(sim.url, f"hello {i} " + words(30, "s"), 4) == 200 for i in range(3))

    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", sim.url, "--log", str(sim.log), *QUICK, "--tar")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(f"wrote {out} (")
    assert done.stdout.splitlines()[1] == f"wrote {out}.tar.gz"
    lines = progress(done.stderr)
    assert {"process", "environ", "nvml", "nvidia-smi", "health", "models", "version", "metrics", "log", "dmesg",
            "torch"} <= set(lines)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging left beside the bundle"

    check_manifest(out)
    srcs = sources(out)
    assert srcs["process"]["status"] == "ok" and "listening on port" in srcs["process"]["detail"]
    assert srcs["metrics"]["detail"].startswith("2 of 2 scrapes")
    scrapes = sorted(p.name for p in (out / "metrics").iterdir())
    assert len(scrapes) == 2 and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z\.prom", n) for n in scrapes)
    assert [p.name for p in (out / "torch").iterdir()] == [f"memory_stats-{stamp}-pid4242-dev0-signal.json"]
    if shutil.which("nvidia-smi") is None and srcs["nvml"]["status"] != "ok":    # no GPU here
        assert srcs["nvidia-smi"]["reason"] == "nvidia-smi not found on PATH"

    meta = yaml.safe_load((out / "incident.yaml").read_text())
    assert meta["id"] == "INC" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["created"])
    assert meta["process"]["pid"] == sim.proc.pid
    assert meta["server"] == {"health": 200, "models": [MODEL], "engine_version": "0.11.0",
                              "engine_version_from": f"GET {sim.url}/version"}
    penv = meta["process"]["env"]
    assert penv["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True" and penv["NCCL_DEBUG"] == "INFO"
    assert penv["VLLM_API_KEY"] == "***" and "UNRELATED_SETTING" not in penv
    assert "sk-***" in meta["process"]["argv"] and "--hf-token" in meta["process"]["argv"]

    # Secrets: nowhere in the bundle or the archive; the rest of the log is kept as written.
    packed = tarfile.open(f"{out}.tar.gz")
    blobs = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    blobs += [packed.extractfile(m).read() for m in packed.getmembers() if m.isfile()]
    for secret in SECRETS:
        assert not any(secret.encode() in b for b in blobs), secret
    assert all(m.name.startswith("INC/") and m.isfile() and m.uid == 0 and not m.uname for m in packed.getmembers())
    kept = (out / "logs" / sim.log.name).read_text()
    assert "'api_key': 'sk-***'" in kept and "Application startup complete" in kept

    # Every command reads the directory and the archive with no extra flag.
    expected = class_of(sim.log)
    assert expected is OomClass.NO_OOM
    assert class_of(out) is expected and class_of(f"{out}.tar.gz") is expected
    for bundle in (out, Path(f"{out}.tar.gz")):
        shown = triage("classify", str(bundle), "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["verdict"]["class"] == "no_oom"
        assert "warning" not in shown.stderr, shown.stderr          # manifest.json, nvml.json: not evidence
        assert triage("timeline", str(bundle)).returncode == 0
        plan = triage("recover", str(bundle))
        assert plan.returncode == 0 and plan.stdout.startswith(f"{bundle}: nothing to recover"), plan.stdout
    pm = triage("postmortem", f"{out}.tar.gz")
    assert pm.returncode == 0 and pm.stdout.splitlines()[0] == f"wrote {tmp_path / 'INC-postmortem.md'}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_start_up_failure_server_down_is_recorded_and_the_log_still_decides(start_sim, tmp_path):
    sim = start_sim("--scenario", "startup", ready=False)
    assert sim.proc.wait(timeout=START_S) == 1
    port = free_port()
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{port}", "--log", str(sim.log), *QUICK)
    assert done.returncode == 0, done.stderr
    check_manifest(out)
    srcs = sources(out)
    for name in ("health", "models", "version", "metrics"):
        assert srcs[name]["status"] == "failed" and srcs[name]["reason"].startswith("server down: connection refused")
    assert srcs["process"]["status"] == "skipped"
    assert srcs["process"]["reason"] == f"no process listens on port {port} here (server down?)"
    assert srcs["environ"]["reason"] == "no server process"
    assert "triage collect: health: failed (server down: connection refused" in done.stderr
    assert not (out / "metrics").exists()
    meta = yaml.safe_load((out / "incident.yaml").read_text())
    assert meta["server"]["health"].startswith("connection refused")
    assert meta["server"]["engine_version"] == "0.11.0"                  # from the log, /version being down
    assert meta["server"]["engine_version_from"].startswith("logs/vllm-0.log:")
    assert class_of(sim.log) is OomClass.STARTUP
    assert class_of(out) is OomClass.STARTUP


def test_chronic_oom_after_serving_bundle_and_tarball_classify_like_the_log(start_sim, tmp_path):
    sim = start_sim("--scenario", "chronic")
    statuses = [complete(sim.url, f"request {i} " + words(50, f"r{i}"), 2) for i in range(1, 41)]
    assert 500 in statuses and statuses[0] == 200
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", sim.url, "--log", str(sim.log), *QUICK, "--tar")
    assert done.returncode == 0, done.stderr
    check_manifest(out)
    assert sources(out)["health"]["detail"] == "HTTP 503: the server answers but is not healthy"
    expected = class_of(sim.log)
    assert expected is OomClass.CHRONIC
    assert class_of(out) is expected and class_of(f"{out}.tar.gz") is expected

    tl = triage("timeline", f"{out}.tar.gz", "--json")
    assert tl.returncode == 0
    assert any(e["kind"] in ("oom", "gpu_oom", "torch_oom") or "OutOfMemory" in e["text"]
               for e in json.loads(tl.stdout)["events"])
    plan = triage("recover", f"{out}.tar.gz", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["runbook"] == "chronic"
    refused = triage("recover", f"{out}.tar.gz", "--execute", "--yes")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"triage: {out}.tar.gz: a packed bundle: actions.jsonl (every step of --execute) is written into the "
        f"bundle, so extract it first (tar xf {out}.tar.gz) and give the directory"]
    pm = triage("postmortem", f"{out}.tar.gz", "-o", "-")
    assert pm.returncode == 0 and "chronic" in pm.stdout.lower()
    assert sim.proc.poll() is None, "collect changes nothing on the host"


def _burst(start_sim):
    sim = start_sim("--scenario", "burst", "--max-num-batched-tokens", "8192", *SMALL_CARD)
    threads = [threading.Thread(target=complete, args=(sim.url, words(3200, f"b{i}"), 100, 30), daemon=True)
               for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    return sim


def _prefix_cache(start_sim):
    sim = start_sim("--scenario", "prefix_cache", "--enable-prefix-caching", *SMALL_CARD)
    until_failure(sim.url, lambda i: words(2400, f"p{i}"), max_tokens=25, limit=30)
    return sim


@pytest.mark.parametrize("drive, expected", [(_burst, OomClass.BURST), (_prefix_cache, OomClass.PREFIX_CACHE)],
                         ids=["burst", "prefix_cache"])
def test_runtime_oom_bundles_classify_like_the_servers_own_log(start_sim, tmp_path, drive, expected):
    """The engine died while serving (the front end answers 503): the bundle's scrapes, health and
    log tail give the class the simulator's whole log gives."""
    sim = drive(start_sim)
    assert class_of(sim.log) is expected
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", sim.url, "--log", str(sim.log), *QUICK)
    assert done.returncode == 0, done.stderr
    check_manifest(out)
    assert sources(out)["health"]["detail"] == "HTTP 503: the server answers but is not healthy"
    assert list((out / "metrics").iterdir()), "the scrapes of a dead engine's front end are kept"
    assert class_of(out) is expected


# --- time limits ---------------------------------------------------------------------------------

class Silent:
    """A TCP server that accepts connections and never answers: a wedged front end."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
                self.held.append(conn)
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        for conn in self.held:
            conn.close()
        self.sock.close()


def test_a_server_that_never_answers_is_cut_off_within_the_deadline(tmp_path):
    silent = Silent()
    log = tmp_path / "vllm.log"
    shutil.copy(SAMPLES / "burst-long-prompts-v0" / "logs" / "vllm.log", log)
    try:
        began = time.monotonic()
        done = collect(tmp_path / "INC", "--vllm-url", f"http://127.0.0.1:{silent.port}", "--log", str(log),
                       "--pid", str(os.getpid()), "--scrapes", "3", "--every", "1", "--deadline", "4")
        took = time.monotonic() - began
    finally:
        silent.close()
    assert done.returncode == 0, done.stderr
    assert took < 4 + 3, f"took {took:.1f} s for a 4 s deadline"      # + interpreter start-up on a busy host
    check_manifest(tmp_path / "INC")
    srcs = sources(tmp_path / "INC")
    for name in ("health", "models", "version", "metrics"):
        assert srcs[name]["status"] in ("timeout", "failed"), srcs[name]
        assert "within" in srcs[name]["reason"] and srcs[name]["duration_s"] <= 4, srcs[name]
    assert srcs["log"]["status"] == "ok"
    assert manifest(tmp_path / "INC")["duration_s"] <= 4
    assert class_of(tmp_path / "INC") is class_of(log)


# --- the output ----------------------------------------------------------------------------------

def test_an_existing_output_is_refused_with_one_line_and_left_alone(tmp_path):
    taken = tmp_path / "INC"
    taken.mkdir()
    (taken / "notes.jsonl").write_text("{}\n")
    port = str(free_port())
    done = collect(taken, "--vllm-url", f"http://127.0.0.1:{port}")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [f"triage: {taken}: already exists and is not empty: choose a new name"]
    assert [p.name for p in taken.iterdir()] == ["notes.jsonl"]
    (tmp_path / "FILE").write_text("x")
    done = collect(tmp_path / "FILE", "--vllm-url", f"http://127.0.0.1:{port}")
    assert done.stderr.splitlines() == [f"triage: {tmp_path / 'FILE'}: already exists and is not a directory: "
                                        "choose a new name"]
    (tmp_path / "T.tar.gz").write_text("x")
    done = collect(tmp_path / "T", "--tar", "--vllm-url", f"http://127.0.0.1:{port}")
    assert done.returncode == 1 and done.stderr.splitlines() == [f"triage: {tmp_path / 'T.tar.gz'}: already exists: "
                                                                 "choose a new name"]
    assert not (tmp_path / "T").exists()
    done = collect(tmp_path / "no" / "such" / "dir", "--vllm-url", f"http://127.0.0.1:{port}")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1 and "is not an existing directory" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE", "INC", "T.tar.gz"], "nothing half-written"


def test_nothing_collected_is_exit_1_with_the_reasons_kept(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--kubectl", "inference/vllm-0",
                   "--scrapes", "1", env={"PATH": str(empty_bin), "PYTHONPATH": str(_failing_nvml(tmp_path))})
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == f"triage: {out}: nothing collected: every source failed or was skipped " \
                                           "(see manifest.json)"
    srcs = sources(out)
    for name in ("kubectl pod", "kubectl events", "kubectl logs"):
        assert srcs[name]["status"] == "failed" and "kubectl not found on PATH" in srcs[name]["reason"], srcs[name]
    assert srcs["process"]["reason"] == "the server runs in a pod: give --pid to read its process on this host"
    assert srcs["nvml"]["reason"].startswith("no NVIDIA driver")
    assert srcs["nvidia-smi"]["reason"] == "nvidia-smi not found on PATH"
    check_manifest(out)


@pytest.mark.parametrize("bad, hint", [
    (["--kubectl", "no-slash"], "--kubectl"), (["--vllm-url", "localhost:8000"], "--vllm-url"),
    (["--log-max", "lots"], "--log-max"), (["--log", "a.log", "--kubectl", "ns/pod"], "not both"),
])
def test_bad_options_are_usage_errors(tmp_path, bad, hint):
    done = collect(tmp_path / "INC", *bad)
    assert done.returncode == 2 and hint in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "INC").exists()


# --- GPU readings --------------------------------------------------------------------------------

FAKE_PYNVML = '''
import json, os
class NVMLError(Exception): pass
_SPEC = json.loads(os.environ["FAKE_NVML"])
class _Mem:
    def __init__(self, g): self.total, self.used, self.free = g["total"], g["used"], g["total"] - g["used"]
class _Proc:
    def __init__(self, pid, used): self.pid, self.usedGpuMemory = pid, used
class _Pci:
    def __init__(self, i): self.busId = "00000000:%02X:00.0" % (0x18 + i)
class _Util:
    gpu, memory = 97, 40
def nvmlInit():
    if _SPEC.get("fail"):
        raise NVMLError("Driver Not Loaded")
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return len(_SPEC["gpus"])
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetMemoryInfo(h): return _Mem(_SPEC["gpus"][h])
def nvmlDeviceGetComputeRunningProcesses(h): return [_Proc(p, u) for p, u in _SPEC["gpus"][h]["procs"]]
def nvmlDeviceGetGraphicsRunningProcesses(h): return []
def nvmlDeviceGetName(h): return b"NVIDIA H100 80GB HBM3"
def nvmlDeviceGetUUID(h): return "GPU-%08d" % h
def nvmlDeviceGetPciInfo(h): return _Pci(h)
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlDeviceGetUtilizationRates(h): return _Util()
def nvmlDeviceGetTotalEccErrors(h, error_type, counter_type): return 3 if (error_type, counter_type) == (1, 0) else 0
def nvmlDeviceGetRetiredPagesPendingStatus(h): return 0
def nvmlDeviceGetRemappedRows(h): raise NVMLError("Not Supported")
'''
GIB, MIB = 1 << 30, 1 << 20


def _fake_nvml(tmp_path: Path) -> Path:
    where = tmp_path / "fakenvml"
    where.mkdir(exist_ok=True)
    (where / "pynvml.py").write_text(FAKE_PYNVML)
    return where


def _failing_nvml(tmp_path: Path) -> Path:
    """NVML that says there is no driver, on any host: the nvidia-smi fallback is then taken."""
    where = _fake_nvml(tmp_path)
    (where / "sitecustomize.py").write_text("import os\nos.environ.setdefault('FAKE_NVML', '{\"fail\": true}')\n")
    return where


def test_nvml_readings_are_written_as_nvidia_smi_csv_and_read_back(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", API_KEY],
                              start_new_session=True)
    try:
        spec = {"gpus": [{"total": 80 * GIB, "used": int(79.4 * GIB), "procs": [[holder.pid, 78 * GIB]]},
                         {"total": 80 * GIB, "used": 2 * GIB, "procs": [[999_999_999, None]]}]}
        log = tmp_path / "vllm.log"
        shutil.copy(SAMPLES / "burst-long-prompts-v0" / "logs" / "vllm.log", log)
        out = tmp_path / "INC"
        done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--log", str(log), "--scrapes", "1",
                       env={"PYTHONPATH": str(_fake_nvml(tmp_path)), "FAKE_NVML": json.dumps(spec)})
    finally:
        kill_group(holder.pid)
        holder.wait(timeout=5)
    assert done.returncode == 0, done.stderr
    check_manifest(out)
    srcs = sources(out)
    assert srcs["nvml"]["detail"] == "2 GPUs, 2 processes"
    assert srcs["nvidia-smi"] == {**srcs["nvidia-smi"], "status": "skipped", "reason": "NVML was read"}

    evidence = load_evidence([str(out / "gpu")])
    assert {s.kind for s in evidence.sources} == {"nvidia_smi"}
    gpus = [e for e in evidence.items if e.kind == Kind.GPU_MEMORY]
    assert [(g.fields["gpu"], g.fields["used_bytes"], g.fields["total_bytes"]) for g in gpus] == \
        [(0, int(79.4 * GIB) // MIB * MIB, 80 * GIB), (1, 2 * GIB, 80 * GIB)]
    assert gpus[0].fields["driver_version"] == "550.54.15" and gpus[0].time is not None
    procs = [e for e in evidence.items if e.kind == Kind.GPU_PROCESS]
    assert [(p.fields["pid"], p.fields["used_bytes"]) for p in procs] == [(holder.pid, 78 * GIB), (999_999_999, None)]

    doc = json.loads((out / "gpu" / "nvml.json").read_text())
    assert doc["schema"] == "triage.nvml/v1" and doc["driver_version"] == "550.54.15"
    first, second = doc["gpus"]
    assert first["counters"] == {"ecc_uncorrected_volatile": 3, "ecc_uncorrected_aggregate": 0,
                                 "ecc_corrected_volatile": 0, "ecc_corrected_aggregate": 0, "retired_pages_pending": 0}
    proc = first["processes"][0]
    assert proc["pid"] == holder.pid and proc["visible"] and re.fullmatch(r"\d{4}-.*Z", proc["started"])
    assert proc["argv"][-2:] == ["--api-key", "sk-***"]
    assert second["processes"][0] == {"pid": 999_999_999, "kind": "compute", "used_bytes": None, "visible": False}

    verdict = json.loads(triage("classify", str(out), "--json").stdout)
    assert verdict["facts"]["gpu_total_bytes"] == 80 * GIB
    assert verdict["verdict"]["class"] == class_of(log).value


SMI_GPUS = """timestamp, index, name, uuid, pci.bus_id, driver_version, memory.total [MiB], memory.used [MiB], \
memory.free [MiB], utilization.gpu [%], ecc.errors.uncorrected.volatile.total, retired_pages.pending
2026/03/12 14:17:03.123, 0, NVIDIA H100 80GB HBM3, GPU-5d2c, 00000000:18:00.0, 550.54.15, 81559 MiB, 80903 MiB, \
656 MiB, 98 %, 0, No
"""
SMI_APPS = """timestamp, gpu_name, gpu_bus_id, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
2026/03/12 14:17:03.130, NVIDIA H100 80GB HBM3, 00000000:18:00.0, GPU-5d2c, 4242, /usr/bin/python3, 80312 MiB
"""


def _script(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(body)
    path.chmod(0o755)


def test_nvidia_smi_is_the_fallback_when_nvml_cannot_be_read(tmp_path):
    (tmp_path / "gpus.csv").write_text(SMI_GPUS)
    (tmp_path / "apps.csv").write_text(SMI_APPS)
    _script(tmp_path / "bin", "nvidia-smi", f"""#!/bin/sh
case "$1" in
  --query-gpu=*) cat {tmp_path}/gpus.csv ;;
  --query-compute-apps=*) cat {tmp_path}/apps.csv ;;
  *) echo "unknown option $1" >&2; exit 2 ;;
esac
""")
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--scrapes", "1",
                   env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(_failing_nvml(tmp_path))})
    assert done.returncode == 0, done.stderr
    srcs = sources(out)
    assert srcs["nvml"]["status"] == "failed" and srcs["nvml"]["reason"] == "no NVIDIA driver (Driver Not Loaded)"
    assert srcs["nvidia-smi"]["status"] == "ok"
    assert (out / "gpu" / "nvidia-smi-gpus.csv").read_text() == SMI_GPUS
    evidence = load_evidence([str(out)])
    kinds = {Path(s.path).name: s.kind for s in evidence.sources}
    assert kinds == {"nvidia-smi-gpus.csv": "nvidia_smi", "nvidia-smi-processes.csv": "nvidia_smi"}, kinds
    check_manifest(out)


# --- kubectl -------------------------------------------------------------------------------------

FAKE_KUBECTL = """#!{python}
import os, sys
args = sys.argv[1:]
d = os.environ["FAKE_KUBE"]
with open(os.path.join(d, "calls"), "a") as fh:
    fh.write(" ".join(args) + "\\n")
name = ("pod.json" if "pod" in args else "events.json") if "get" in args else \\
       ("previous.log" if "--previous" in args else "current.log") if "logs" in args else None
if name is None:
    sys.exit("error: unknown command")
sys.stdout.buffer.write(open(os.path.join(d, name), "rb").read())
"""


def test_kubectl_real_without_a_cluster_is_a_manifest_entry(tmp_path):
    if shutil.which("kubectl") is None:
        pytest.skip("no kubectl on this host")
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--kubectl", "inference/vllm-0",
                   "--scrapes", "1", "--deadline", "20",
                   env={"KUBECONFIG": str(tmp_path / "none"), "PYTHONPATH": str(_failing_nvml(tmp_path))})
    srcs = sources(out)
    for name in ("kubectl pod", "kubectl events", "kubectl logs"):
        assert srcs[name]["status"] in ("failed", "timeout"), srcs[name]
        assert srcs[name]["reason"], srcs[name]
    assert srcs["kubectl pod"]["reason"].startswith("kubectl exited 1")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr
    check_manifest(out)


def test_kubectl_pod_events_and_both_runs_logs(tmp_path):
    kube = tmp_path / "kube"
    kube.mkdir()
    secret_env = [{"name": "HF_TOKEN", "value": HF_TOKEN}, {"name": "VLLM_PORT", "value": "8000"}]
    spec = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0", "env": secret_env}]}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "vllm-0", "namespace": "inference",
                        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps({"spec": spec})}},
           "spec": spec,
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "vllm", "restartCount": 1, "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}
    (kube / "pod.json").write_text(json.dumps(pod))
    (kube / "events.json").write_text(json.dumps({"kind": "List", "items": [
        {"kind": "Event", "type": "Warning", "reason": "BackOff", "message": "Back-off restarting failed container",
         "involvedObject": {"kind": "Pod", "name": "vllm-0", "namespace": "inference"},
         "lastTimestamp": "2026-03-12T14:17:05Z", "count": 1}]}))
    sample = SAMPLES / "burst-long-prompts-v0" / "logs" / "vllm.log"
    shutil.copy(sample, kube / "previous.log")
    (kube / "current.log").write_text("INFO 03-12 14:18:00 [api_server.py:1839] vLLM API server version 0.6.0\n")
    _script(tmp_path / "bin", "kubectl", FAKE_KUBECTL.replace("{python}", sys.executable))
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--kubectl", "inference/vllm-0",
                   "--scrapes", "1", env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "FAKE_KUBE": str(kube)})
    assert done.returncode == 0, done.stderr
    check_manifest(out)
    srcs = sources(out)
    assert srcs["kubectl pod"]["detail"] == "phase Running, restarts 1"
    assert srcs["kubectl logs"]["detail"] == "2 logs" and srcs["kubectl events"]["detail"] == "1 events"
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["vllm-0_vllm.log", "vllm-0_vllm.previous.log"]
    calls = (kube / "calls").read_text()
    assert "--namespace inference logs vllm-0 --tail=" in calls and "-c vllm --previous" in calls
    text = (out / "k8s" / "pod.json").read_text()
    assert HF_TOKEN not in text and text.count('"value": "***"') == 1 and "8000" in text
    assert '\\"value\\": \\"***\\"' in text                                  # the last-applied copy too
    assert (out / "logs" / "vllm-0_vllm.previous.log").read_bytes() == _masked(sample)
    assert "timezone" not in yaml.safe_load((out / "incident.yaml").read_text())    # the pod's zone is unknown
    assert class_of(out) is class_of(sample)
    kinds = {s.kind for s in load_evidence([str(out / "k8s")]).sources}
    assert kinds == {"kubernetes"}


def _masked(path: Path) -> bytes:
    from triage.redact import mask_text

    return mask_text(path.read_bytes().decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


# --- dmesg ---------------------------------------------------------------------------------------

DMESG = """2026-03-12T14:16:58,000000+00:00 usb 1-1: new high-speed USB device number 2 using xhci_hcd
2026-03-12T14:17:03,120000+00:00 NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, \
GPU has fallen off the bus.
2026-03-12T14:17:04,000000+00:00 python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), \
order=0, oom_score_adj=0
2026-03-12T14:17:04,100000+00:00 Out of memory: Killed process 4242 (python3) total-vm:1234kB, anon-rss:2111980kB, \
file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:5204kB oom_score_adj:0
2026-03-12T14:17:05,000000+00:00 EXT4-fs (sda1): mounted filesystem
"""


@pytest.mark.parametrize("deny", [False, True])
def test_dmesg_keeps_xid_and_oom_killer_lines_or_says_why_not(tmp_path, deny):
    (tmp_path / "dmesg.txt").write_text(DMESG)
    _script(tmp_path / "bin", "dmesg", f"""#!/bin/sh
[ "$1" = "--time-format=iso" ] || exit 3
{'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1' if deny else ''}
cat {tmp_path}/dmesg.txt
""")
    out = tmp_path / "INC"
    collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--scrapes", "1",
            env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(_failing_nvml(tmp_path))})
    src = sources(out)["dmesg"]
    if deny:
        assert src["status"] == "failed" and src["reason"] == "permission denied (kernel.dmesg_restrict=1: run as root)"
        assert not (out / "gpu" / "dmesg.log").exists()
        return
    assert src["detail"] == "3 Xid / OOM-killer lines"
    kept = (out / "gpu" / "dmesg.log").read_text().splitlines()
    assert kept == DMESG.replace(" \\\n", " ").splitlines()[1:4]
    evidence = load_evidence([str(out / "gpu" / "dmesg.log")])
    assert {e.kind for e in evidence.items} >= {Kind.XID, Kind.HOST_OOM_KILL}, {e.kind for e in evidence.items}
    assert all(e.time is not None and e.time.year == 2026 for e in evidence.items)
    check_manifest(out)


# --- the masked tail -----------------------------------------------------------------------------

def test_the_log_tail_is_bounded_whole_lines_and_masked(tmp_path):
    log = tmp_path / "server.log"
    lines = [f"INFO 03-12 14:{i // 60:02d}:{i % 60:02d} [engine.py:1] step {i} " + "x" * 80 for i in range(3000)]
    lines[-2] = f"INFO 03-12 14:59:00 [utils.py:233] non-default args: {{'api_key': '{API_KEY}'}}"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--log", str(log), "--log-max", "64KiB",
                   "--scrapes", "1")
    assert done.returncode == 0, done.stderr
    kept = (out / "logs" / "server.log").read_text()
    assert len(kept.encode()) <= 64 << 10 and kept.endswith(lines[-1] + "\n")
    assert kept.splitlines()[0] in lines                                  # starts with a whole line
    assert API_KEY not in kept and "'api_key': 'sk-***'" in kept
    assert re.fullmatch(r"last 6\d\.\d\d KiB of 3\d\d\.\d\d KiB, masked", sources(out)["log"]["detail"])

    # A password in the server URL stays out of the bundle too (manifest sources, incident.yaml).
    out, port = tmp_path / "WITH-URL", free_port()
    done = collect(out, "--vllm-url", f"http://ops:{HF_TOKEN}@127.0.0.1:{port}", "--log", str(log), "--scrapes", "1")
    assert done.returncode == 0 and HF_TOKEN not in done.stderr + done.stdout
    assert not any(HF_TOKEN.encode() in p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert sources(out)["health"]["source"] == f"GET http://ops:***@127.0.0.1:{port}/health"


def test_masked_tail_keeps_the_newest_lines_when_time_runs_out():
    from triage.live.collect.tail import masked_tail

    import tempfile

    with tempfile.TemporaryFile() as fh:
        fh.write(b"".join(b"line %d\n" % i for i in range(300_000)))
        fh.flush()
        buf = io.BytesIO()
        tail = masked_tail(fh.fileno(), buf, 64 << 20, time.monotonic() - 1)     # no time at all: one chunk
    assert tail.cut_by_time and buf.getvalue().endswith(b"line 299999\n")
    assert buf.getvalue().startswith(b"line ") and tail.copied == len(buf.getvalue()) < tail.size


def test_log_that_is_a_fifo_or_missing_is_a_manifest_entry(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    log = tmp_path / "vllm.log"
    shutil.copy(SAMPLES / "burst-long-prompts-v0" / "logs" / "vllm.log", log)
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--log", str(fifo), "--log",
                   str(tmp_path / "gone.log"), "--log", str(log), "--scrapes", "1", timeout=30)
    assert done.returncode == 0, done.stderr
    srcs = sources(out)
    assert srcs["log pipe.log"]["reason"] == "a FIFO, not a regular file"
    assert srcs["log gone.log"]["reason"] == "no such file"
    assert srcs["log vllm.log"]["status"] == "ok"


def test_allocator_dumps_only_the_hooks_files_masked_never_through_a_link(tmp_path):
    hooks = tmp_path / "hooks"
    (hooks / "torch").mkdir(parents=True)
    old, new = "2026-03-12T14-10-00.000Z", "2026-03-12T14-17-03.120Z"
    (hooks / "torch" / f"oom_traceback-{new}-pid4242-oom.log").write_text(
        f"Traceback (most recent call last):\n  api_key={API_KEY}\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    (hooks / "torch" / f"memory_stats-{old}-pid4242-dev0-signal.json").write_text('{"memory_stats": {}}')
    (hooks / "torch" / "unrelated.json").write_text("{}")                # not a name the hooks write
    (tmp_path / "secret.txt").write_text("not for the bundle")
    (hooks / "torch" / f"memory_summary-{new}-pid4242-dev0-oom.txt").symlink_to(tmp_path / "secret.txt")
    (hooks / "torch" / f".triage-hooks-{new}.tmp").write_text("half")     # a dump being written
    out = tmp_path / "INC"
    done = collect(out, "--vllm-url", f"http://127.0.0.1:{free_port()}", "--hooks-dir", str(hooks), "--scrapes", "1")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "torch").iterdir()) == [f"memory_stats-{old}-pid4242-dev0-signal.json",
                                                                 f"oom_traceback-{new}-pid4242-oom.log"]
    text = (out / "torch" / f"oom_traceback-{new}-pid4242-oom.log").read_text()
    assert API_KEY not in text and "api_key=sk-***" in text
    assert sources(out)["torch"]["detail"].startswith("2 files, 0.0 MiB; 1 left out")
    check_manifest(out)


def test_collect_is_registered_lazily_and_has_help(runner):
    from triage.cli import LAZY_COMMANDS, main

    assert LAZY_COMMANDS["collect"] == "triage.live.collect.cli:collect"
    helped = runner.invoke(main, ["collect", "--help"])
    assert helped.exit_code == 0 and "--vllm-url" in helped.stdout and "manifest.json" in helped.stdout


def test_progress_lines_name_each_source_once(tmp_path):
    done = collect(tmp_path / "INC", "--vllm-url", f"http://127.0.0.1:{free_port()}", "--scrapes", "1",
                   env={"PYTHONPATH": str(_failing_nvml(tmp_path))})
    names = [ln.split(": ", 2)[1] for ln in done.stderr.splitlines() if ln.startswith("triage collect: ")]
    assert len(names) == len(set(names)) and set(names) == set(sources(tmp_path / "INC")), names


def test_a_packed_bundle_is_read_from_a_private_copy_without_its_links_and_removed_after(tmp_path):
    src = SAMPLES / "burst-long-prompts-v0"
    archive = tmp_path / "INC.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(src.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=f"INC/{path.relative_to(src).as_posix()}")
        link = tarfile.TarInfo("INC/logs/passwd.log")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    private = tmp_path / "tmp"
    private.mkdir()
    env = {"TMPDIR": str(private)}
    shown = triage("timeline", str(archive), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"triage: warning: {archive}!INC/logs/passwd.log: a link: not read" in shown.stderr.splitlines()
    assert triage("timeline", str(src), "--json").stdout == shown.stdout       # the same as the directory
    assert triage("postmortem", str(archive), env=env).returncode == 0
    assert (tmp_path / "INC-postmortem.md").exists()
    assert list(private.iterdir()) == [], "the private copy is removed when the command ends"
    assert triage("note", str(archive), "x").returncode == 1                   # writes into the bundle: refused
