"""triage.hooks with the real torch on a real GPU. Skipped without a GPU and torch with CUDA.

tests/test_hooks.py runs the hooks against a fake torch; these run them the way a server does:
a child Python whose `sitecustomize.py` installs the hooks before the program imports torch.

  * the child allocates 1 GiB tensors until the allocator fails and lets the
    torch.OutOfMemoryError escape: the allocator's OOM observer and the excepthook dump, the
    process still dies with the traceback, and triage reads exactly the numbers torch reported;
  * a child holding some memory gets SIGUSR2 with history recording on: the snapshot pickle
    loads and holds the child's allocations, the memory_stats dump holds torch's numbers.

Each prints what it captured, so that a run with `-s` shows it. About 20 s on an H100 or H200.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_real_gpu_captures import has_cuda
from triage.evidence import load_evidence
from triage.evidence.kinds import Kind

pytestmark = pytest.mark.skipif(not has_cuda(), reason="needs an NVIDIA GPU and torch with CUDA")

ROOT = Path(__file__).resolve().parent.parent
GiB, MiB = 1 << 30, 1 << 20
WAIT_S = 60

SITECUSTOMIZE = """\
import logging
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")   # to show the dumps' log
import triage.hooks
triage.hooks.install()
"""

CHILD = r'''
import json, os, sys, threading
import torch

GiB = 1 << 30


def numbers():
    stats = torch.cuda.memory_stats()
    return {"reserved_bytes": torch.cuda.memory_reserved(), "allocated_bytes": torch.cuda.memory_allocated(),
            "num_ooms": stats.get("num_ooms"), "inactive_split_bytes": stats.get("inactive_split_bytes.all.current"),
            "total_bytes": torch.cuda.get_device_properties(0).total_memory, "torch": torch.__version__}


if sys.argv[1] == "oom":
    held = []
    cap = torch.cuda.get_device_properties(0).total_memory // GiB + 16     # bounded: the card must fail first
    try:
        for _ in range(cap):
            held.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        print("torch " + json.dumps({**numbers(), "tensors": len(held)}), flush=True)
        raise                                   # uncaught: the process dies of it
    print(f"no OOM after {cap} GiB", flush=True)
else:
    keep = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
    del keep[1]                                 # cached, not released: reserved > allocated
    torch.cuda.synchronize()
    print("ready " + json.dumps(numbers()), flush=True)
    while sys.stdin.readline().strip() != "exit":
        pass
    for t in threading.enumerate():
        if t.name == "triage-hooks-dump":
            t.join(60)
'''


@pytest.fixture
def child_env(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIAGE_HOOKS_", "PYTHONPATH"))}
    env.update({"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "PYTHONUNBUFFERED": "1",
                "TRIAGE_HOOKS_DIR": str(tmp_path / "dumps"), "TRIAGE_HOOKS_SNAPSHOT": "1"})
    return tmp_path, env


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"{pattern}: {sorted(p.name for p in folder.iterdir())}"
    return found[0]


def _stats_record(path: Path):
    [record] = [e for e in load_evidence([str(path)]).items if e.kind == Kind.MEMORY_STATS.value]
    return record


def _show(title: str, folder: Path) -> None:
    print(f"\n--- {title}: {folder}")
    for path in sorted(folder.iterdir()):
        print(f"  {path.stat().st_size:>10,d}  {path.name}")


def _print_log(stderr: str) -> None:
    for line in stderr.splitlines():
        if "triage.hooks" in line:
            print("child log:", line[:400])


def _snapshot_summary(path: Path) -> dict:
    with path.open("rb") as fh:
        snap = pickle.load(fh)
    traces = [t for device in snap.get("device_traces", []) for t in device]
    allocs = [t for t in traces if t.get("action") == "alloc"]
    return {"segments": len(snap.get("segments", [])), "trace_entries": len(traces), "allocs": len(allocs),
            "alloc_sizes": sorted({t.get("size") for t in allocs}),
            "frames_of_first_alloc": len(allocs[0].get("frames", [])) if allocs else None}


def test_a_real_oom_that_escapes_is_dumped_and_triage_reads_torchs_numbers(child_env):
    tmp, env = child_env
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(tmp / "child.py"), "oom"], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=WAIT_S)
    print(f"\nchild exit {done.returncode} after {time.monotonic() - started:.1f} s; stdout: {done.stdout.strip()}")
    _print_log(done.stderr)
    print("stderr tail:", done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else "")
    assert done.returncode == 1, done.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory" in done.stderr
    truth = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("torch "))[6:])
    assert truth["tensors"] >= 1 and truth["num_ooms"] >= 1

    dumps = tmp / "dumps" / "torch"
    _show("after the OOM", dumps)
    assert not [p for p in dumps.iterdir() if p.name.startswith(".")], "a temporary file was left"
    stats = _one(dumps, "memory_stats-*-dev0-oom.json")
    record = _stats_record(stats)
    print("triage read:", record.text)
    print("torch said: ", {k: truth[k] for k in ("reserved_bytes", "allocated_bytes", "num_ooms")})
    assert record.fields["reserved_bytes"] == truth["reserved_bytes"]
    assert record.fields["allocated_bytes"] == truth["allocated_bytes"]
    assert record.fields["num_ooms"] == truth["num_ooms"]
    assert record.fields["allocated_bytes"] == truth["tensors"] * GiB
    table = _stats_record(_one(dumps, "memory_summary-*-dev0-oom.txt"))
    assert 0 <= truth["reserved_bytes"] - table.fields["reserved_bytes"] < MiB
    assert "torch.OutOfMemoryError" in _one(dumps, "oom_traceback-*-oom.log").read_text()

    # the allocator's observer dumped at the failure itself, with the snapshot of that moment
    observed = _stats_record(_one(dumps, "memory_stats-*-dev0-allocator_oom.json"))
    print("observer dump:", observed.text)
    assert observed.fields["allocated_bytes"] == truth["allocated_bytes"]
    snap = _snapshot_summary(_one(dumps, "memory_snapshot-*-allocator_oom.pickle"))
    print("observer snapshot:", snap)
    assert snap["allocs"] >= truth["tensors"] and GiB in snap["alloc_sizes"]

    code, verdict = _classify(dumps.parent)
    print("triage classify:", code, verdict["verdict"]["class"], "-", verdict["verdict"]["summary"])
    print("inputs:", [(Path(i["source"]).name, i.get("parser"), i.get("records")) for i in verdict["facts"]["inputs"]])
    assert verdict["facts"]["failure"]["kind"] == "torch_oom"
    assert abs(verdict["facts"]["failure"]["tried_bytes"] - GiB) <= 0.005 * GiB


def test_sigusr2_with_history_recording_writes_a_loadable_snapshot(child_env):
    tmp, env = child_env
    proc = subprocess.Popen([sys.executable, str(tmp / "child.py"), "signal"], env=env, cwd=tmp, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dumps = tmp / "dumps" / "torch"
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready "), line + (proc.stderr.read() if proc.stderr else "")
        truth = json.loads(line[6:])
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGUSR2)
        deadline = started + WAIT_S
        while not (dumps.is_dir() and list(dumps.glob("memory_snapshot-*-signal.pickle"))
                   and list(dumps.glob("memory_summary-*-signal.txt"))):
            assert time.monotonic() < deadline, "no dump within 60 s"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        print(f"\ndump written {time.monotonic() - started:.2f} s after SIGUSR2")
        assert proc.poll() is None                       # the server lives on
    finally:
        out, err = proc.communicate("exit\n", timeout=WAIT_S)
    assert proc.returncode == 0, err
    _print_log(err)
    _show("after SIGUSR2", dumps)
    record = _stats_record(_one(dumps, f"memory_stats-*-pid{proc.pid}-dev0-signal.json"))
    print("triage read:", record.text)
    print("torch said: ", {k: truth[k] for k in ("reserved_bytes", "allocated_bytes", "num_ooms")})
    assert record.fields["reserved_bytes"] == truth["reserved_bytes"] >= 4 * 256 * MiB
    assert record.fields["allocated_bytes"] == truth["allocated_bytes"] == 3 * 256 * MiB
    snap = _snapshot_summary(_one(dumps, f"memory_snapshot-*-pid{proc.pid}-signal.pickle"))
    print("snapshot:", snap)
    assert snap["segments"] >= 1 and snap["allocs"] >= 4 and 256 * MiB in snap["alloc_sizes"]
    assert snap["frames_of_first_alloc"], "history recorded without Python stacks"


def _classify(path: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "triage", "classify", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)
