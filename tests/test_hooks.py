"""triage.hooks, the in-process capture, on CPU: a fake `torch` package stands in for the real one.

Each test runs a child Python the way a server runs with the hooks: a `sitecustomize.py` on
PYTHONPATH installs them at start-up, before the program imports torch; the fake torch (written
to a temporary folder, also on PYTHONPATH) returns the memory_stats() and memory_summary() an
H100 gave in tests/real_gpu/h100/oom-fragmented, and raises an OutOfMemoryError with that
capture's message after calling the allocator's OOM observers, as the real allocator does.
The child then gets SIGUSR2, raises the OOM, or fails a torch call, and the files it leaves are
read back by triage itself.
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

from triage.evidence import load_evidence
from triage.evidence.kinds import Kind

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="POSIX signals")

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = Path(__file__).resolve().parent / "real_gpu" / "h100" / "oom-fragmented"
STATS = json.loads((CAPTURE / "memory_stats.json").read_text())
OOM_LINE = (CAPTURE / "server.log").read_text().splitlines()[-1].split(": ", 1)[1]
WAIT_S = 20

FAKE_TORCH = r'''
"""A stand-in for torch: what triage.hooks calls, with the numbers of a real H100 capture."""
import json, os, sys, types

__version__ = "2.11.0+fake"
calls = []                      # the private calls the hooks made, for the test to see
_fail = set(filter(None, os.environ.get("FAKE_TORCH_FAIL", "").split(",")))
_observers = []


def _maybe_fail(name):
    calls.append(name)
    if name in _fail:
        raise RuntimeError(f"CUDA error: an illegal memory access was encountered ({name})")


class OutOfMemoryError(RuntimeError):
    pass


def oom(nbytes):
    """What the caching allocator does when cudaMalloc fails: observers, then the error."""
    for observer in list(_observers):
        observer(0, nbytes, 85018877624, 803408445)
    raise OutOfMemoryError(os.environ["FAKE_TORCH_OOM_MESSAGE"])


cuda = types.ModuleType("torch.cuda")
cuda.OutOfMemoryError = OutOfMemoryError
cuda.is_available = lambda: os.environ.get("FAKE_TORCH_CUDA", "1") == "1"
cuda.is_initialized = lambda: os.environ.get("FAKE_TORCH_CUDA", "1") == "1"
cuda.device_count = lambda: 1
cuda.current_device = lambda: 0


def memory_stats(device=None):
    _maybe_fail("memory_stats")
    with open(os.environ["FAKE_TORCH_STATS"]) as fh:
        return json.load(fh)


def memory_summary(device=None, abbreviated=False):
    _maybe_fail("memory_summary")
    with open(os.environ["FAKE_TORCH_SUMMARY"]) as fh:
        return fh.read()


def _lazy_call(fn, **kwargs):
    calls.append("_lazy_call")
    fn()                        # CUDA is "initialised": torch runs it at once


cuda.memory_stats, cuda.memory_summary, cuda._lazy_call = memory_stats, memory_summary, _lazy_call

memory = types.ModuleType("torch.cuda.memory")


def _record_memory_history(enabled="all", **kwargs):
    _maybe_fail("_record_memory_history")
    calls.append(["_record_memory_history", enabled, kwargs])


def _snapshot():
    _maybe_fail("_snapshot")
    size = int(os.environ.get("FAKE_TORCH_SNAPSHOT_BYTES", "0"))
    return {"segments": [{"device": 0, "address": 1 << 40, "total_size": 1 << 30, "blocks": []}],
            "device_traces": [[{"action": "alloc", "addr": 1 << 40, "size": 629145600, "frames": []}]],
            "padding": "x" * size}


memory._record_memory_history, memory._snapshot = _record_memory_history, _snapshot
cuda.memory = memory

_C = types.ModuleType("torch._C")


def _cuda_attach_out_of_memory_observer(fn):
    calls.append("_cuda_attach_out_of_memory_observer")
    _observers.append(fn)


_C._cuda_attach_out_of_memory_observer = _cuda_attach_out_of_memory_observer
sys.modules.update({"torch.cuda": cuda, "torch.cuda.memory": memory, "torch._C": _C})
'''

SITECUSTOMIZE = r'''
import os
if os.environ.get("HOOKS_TEST_SITE_INSTALL", "1") == "1":
    import triage.hooks
    triage.hooks.install()
'''

CHILD = r'''
import json, os, signal, sys, threading

mode = sys.argv[1]
report = {"torch_at_start": "torch" in sys.modules}
if mode == "own-handler":
    def mine(signum, frame):
        print("own handler called", signum, flush=True)
    signal.signal(signal.SIGUSR2, mine)
    import triage.hooks
    report["install"] = triage.hooks.install()
    report["install_again"] = triage.hooks.install()
import triage.hooks
report["torch_after_hooks_import"] = "torch" in sys.modules
if mode != "no-torch":
    import torch
report["installed"] = triage.hooks.installed()
report["signal_is_default"] = signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
report["excepthook_is_default"] = sys.excepthook is sys.__excepthook__
report["thread_excepthook_is_default"] = threading.excepthook is threading.__excepthook__
report["watching_imports"] = any(type(f).__name__ == "_TorchImportWatcher" for f in sys.meta_path)
if "torch" in sys.modules:
    report["torch_calls"] = sys.modules["torch"].calls
print("ready", json.dumps(report), flush=True)

if mode in ("wait", "own-handler", "no-torch"):
    while sys.stdin.readline().strip() != "exit":
        pass
    for t in threading.enumerate():                 # a dump the last signal started ends first
        if t.name == "triage-hooks-dump":
            t.join(20)
elif mode == "oom":
    x = torch.oom(1 << 30)
elif mode == "wrapped-oom":
    try:
        torch.oom(1 << 30)
    except torch.OutOfMemoryError as exc:
        raise RuntimeError("EngineCore encountered a fatal error") from exc
elif mode == "thread-oom":
    t = threading.Thread(target=torch.oom, args=(1 << 30,), name="worker")
    t.start()
    t.join()
    print("main thread still running", flush=True)
elif mode == "not-oom":
    raise ValueError("not an OOM")
'''


@pytest.fixture
def world(tmp_path):
    """The child's PYTHONPATH folders and its environment (hooks enabled, into tmp/dumps)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIAGE_HOOKS_", "PYTHON", "FAKE_TORCH_"))}
    env.update({
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "PYTHONUNBUFFERED": "1",
        "FAKE_TORCH_STATS": str(CAPTURE / "memory_stats.json"),
        "FAKE_TORCH_SUMMARY": str(CAPTURE / "memory_summary.txt"),
        "FAKE_TORCH_OOM_MESSAGE": OOM_LINE,
        "TRIAGE_HOOKS_DIR": str(tmp_path / "dumps"),
    })
    return tmp_path, env


class Child:
    def __init__(self, world, mode: str, **extra: str | None) -> None:
        tmp, env = world
        env = dict(env)
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        if mode == "no-torch":
            env["PYTHONPATH"] = os.pathsep.join([str(tmp / "nosite"), str(ROOT)])
            (tmp / "nosite").mkdir(exist_ok=True)
            (tmp / "nosite" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.dumps = Path(env.get("TRIAGE_HOOKS_DIR") or tmp / "dumps") / "torch"
        self.proc = subprocess.Popen([sys.executable, str(tmp / "child.py"), mode], env=env, cwd=tmp,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"child did not start: {line!r} {out!r} {err!r}")
        self.report = json.loads(line.split(" ", 1)[1])

    def signal(self, number: int = signal.SIGUSR2) -> None:
        os.kill(self.proc.pid, number)

    def finish(self) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate("exit\n" if self.proc.poll() is None else None, timeout=WAIT_S)
        except (BrokenPipeError, ValueError):
            out, err = self.proc.communicate(timeout=WAIT_S)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def wait_for(folder: Path, count: int, pattern: str = "*") -> list[Path]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern)) if folder.is_dir() else []
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise AssertionError(f"{count} x {pattern} never appeared in {folder}: {files(folder)}")


def signal_until(child, count: int, pattern: str, then=None) -> list[Path]:
    """Signal the child until `count` files of `pattern` are there. A signal that comes while a
    dump is still being written is ignored (one dump at a time), and a test cannot see from outside
    when the last dump let go; `then` checks what every signal must do."""
    deadline = time.monotonic() + WAIT_S
    while True:
        child.signal()
        if then is not None:
            then()
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle and len(list(child.dumps.glob(pattern))) < count:
            time.sleep(0.02)
        if len(list(child.dumps.glob(pattern))) >= count or time.monotonic() > deadline:
            return wait_for(child.dumps, count, pattern)


def classify_json(path: Path) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "triage", "classify", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def memory_records(path: Path):
    return [e for e in load_evidence([str(path)]).items if e.kind == Kind.MEMORY_STATS.value]


# -------------------------------------------------------------------------------- (a) signal


def test_sigusr2_writes_the_allocator_state_that_triage_reads(world):
    child = Child(world, "wait", TRIAGE_HOOKS_SNAPSHOT="1")
    try:
        report = child.report
        # sitecustomize installed the hooks before torch was imported, without importing it
        assert report["torch_at_start"] is False and report["torch_after_hooks_import"] is False
        assert report["installed"] is True and report["signal_is_default"] is False
        assert report["excepthook_is_default"] is False and report["thread_excepthook_is_default"] is False
        assert report["watching_imports"] is False      # done: torch's import was seen
        calls = report["torch_calls"]
        assert calls[0] == "_lazy_call"
        assert ["_record_memory_history", "all", {"context": "all", "stacks": "python", "max_entries": 100000}] in calls
        assert "_cuda_attach_out_of_memory_observer" in calls

        child.signal()
        stats, summary, snap = (wait_for(child.dumps, 1, f"{kind}-*") [0]
                                for kind in ("memory_stats", "memory_summary", "memory_snapshot"))
        assert child.proc.poll() is None                # the server lives on
    finally:
        code, out, err = child.finish()
    assert code == 0, err
    pid = child.proc.pid
    assert stats.name.endswith(f"-pid{pid}-dev0-signal.json") and stats.name.startswith("memory_stats-20")
    assert summary.name.endswith(f"-pid{pid}-dev0-signal.txt")
    assert snap.name.endswith(f"-pid{pid}-signal.pickle")
    assert stats.name.split("-pid")[0][len("memory_stats-"):] == summary.name.split("-pid")[0][len("memory_summary-"):]
    assert not [n for n in files(child.dumps) if n.startswith(".")], "a temporary file was left"

    doc = json.loads(stats.read_text())
    assert doc["reason"] == "signal" and doc["pid"] == pid and doc["device"] == 0
    assert doc["torch"] == "2.11.0+fake" and doc["memory_stats"] == STATS
    assert pickle.loads(snap.read_bytes())["device_traces"][0][0]["size"] == 629145600

    # triage reads the dump exactly: the numbers torch gave, the device, the dump's time
    [record] = memory_records(stats)
    assert record.fields["reserved_bytes"] == STATS["reserved_bytes.all.current"]
    assert record.fields["allocated_bytes"] == STATS["allocated_bytes.all.current"]
    assert record.fields["inactive_split_bytes"] == STATS["inactive_split_bytes.all.current"]
    assert record.fields["device"] == 0 and record.fields["approximate"] is False
    assert record.time is not None and record.time.strftime("%Y-%m-%dT%H:%M:%S") == doc["time"][:19]
    [table] = memory_records(summary)
    assert table.fields["approximate"] is True and table.fields["device"] == 0
    assert 0 <= STATS["reserved_bytes.all.current"] - table.fields["reserved_bytes"] < 1 << 20

    # ... and so does `triage classify DIR`: both files by the memory_stats parser, the pickle left out
    _, verdict = classify_json(child.dumps.parent)
    inputs = {Path(i["source"]).name: i for i in verdict["facts"]["inputs"]}
    assert inputs[stats.name]["parser"] == "memory_stats" and inputs[stats.name]["records"] == 1
    assert inputs[summary.name]["parser"] == "memory_stats" and inputs[summary.name]["records"] == 1
    assert snap.name not in inputs


def test_files_are_renamed_into_place_only_when_complete(tmp_path, monkeypatch, fake_torch):
    import triage.hooks as hooks

    renames = []
    real_replace = os.replace

    def spy(src, dst):
        src, dst = Path(src), Path(dst)
        assert src.name.startswith(".") and src.parent == dst.parent, "triage reads non-hidden files"
        assert not dst.exists()
        if dst.suffix == ".json":
            json.loads(src.read_text())                  # complete before it gets its name
        renames.append((src.name, dst.name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    monkeypatch.setenv("TRIAGE_HOOKS_SNAPSHOT", "1")
    written = hooks.dump("manual check", directory=tmp_path)
    assert [Path(p).name for p in written] == [dst for _, dst in renames]
    assert {Path(p).name.split("-")[0] for p in written} == {"memory_stats", "memory_summary", "memory_snapshot"}
    assert all("-manual_check." in p for p in written)
    assert not [n for n in files(tmp_path / "torch") if n.startswith(".")]


# -------------------------------------------------------------------------------- (b) OOM


def test_an_uncaught_oom_is_dumped_and_still_kills_the_process_with_its_traceback(world):
    child = Child(world, "oom")
    code, out, err = child.finish()
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB" in err
    pid = child.proc.pid
    names = files(child.dumps)
    # the allocator's observer wrote one at the failure, the excepthook one as the process died
    [observed] = [n for n in names if n.startswith("memory_stats-") and n.endswith(f"-pid{pid}-dev0-allocator_oom.json")]
    [stats] = [n for n in names if n.startswith("memory_stats-") and n.endswith(f"-pid{pid}-dev0-oom.json")]
    stamp = stats[len("memory_stats-"):].split("-pid")[0]
    assert observed[len("memory_stats-"):].split("-pid")[0] < stamp
    assert f"memory_summary-{stamp}-pid{pid}-dev0-oom.txt" in names
    assert f"oom_traceback-{stamp}-pid{pid}-oom.log" in names
    assert len(names) == 5
    assert not [n for n in names if "snapshot" in n]      # not enabled
    [tb] = child.dumps.glob("oom_traceback-*")
    assert tb.read_text() == err[err.index("Traceback"):]

    # the bundle classifies as the capture it came from: a fragmented allocator
    code, verdict = classify_json(child.dumps.parent)
    assert code == 0
    assert verdict["facts"]["failure"]["kind"] == "torch_oom"
    assert verdict["verdict"]["class"] == "chronic"
    assert "fragmentation" in verdict["verdict"]["summary"].lower()
    parsers = {Path(i["source"]).name.split("-")[0]: i["parser"] for i in verdict["facts"]["inputs"]}
    assert parsers == {"memory_stats": "memory_stats", "memory_summary": "memory_stats", "oom_traceback": "log"}


def test_an_oom_wrapped_by_the_server_is_recognised(world):
    child = Child(world, "wrapped-oom", TRIAGE_HOOKS_OOM_OBSERVER="0")
    code, _, err = child.finish()
    assert code == 1 and "RuntimeError: EngineCore encountered a fatal error" in err
    names = files(child.dumps)
    assert [n.split("-")[0] for n in names] == ["memory_stats", "memory_summary", "oom_traceback"]
    assert "_cuda_attach_out_of_memory_observer" not in child.report["torch_calls"]


def test_an_oom_in_a_thread_is_dumped_and_the_thread_hook_still_reports_it(world):
    child = Child(world, "thread-oom", TRIAGE_HOOKS_OOM_OBSERVER="0")
    code, out, err = child.finish()
    assert code == 0 and "main thread still running" in out
    assert "Exception in thread worker" in err and "torch.OutOfMemoryError" in err
    assert [n.split("-")[0] for n in files(child.dumps)] == ["memory_stats", "memory_summary", "oom_traceback"]


def test_other_exceptions_write_nothing(world):
    child = Child(world, "not-oom")
    code, _, err = child.finish()
    assert code == 1 and "ValueError: not an OOM" in err
    assert files(child.dumps) == []


# -------------------------------------------------------------------------------- (c) disabled


def test_without_triage_hooks_dir_nothing_is_installed(world):
    child = Child(world, "wait", TRIAGE_HOOKS_DIR=None)
    r = child.report
    assert r["installed"] is False and r["signal_is_default"] is True
    assert r["excepthook_is_default"] is True and r["thread_excepthook_is_default"] is True
    assert r["watching_imports"] is False and r["torch_calls"] == []
    child.signal()                                       # SIGUSR2's default action: the process ends
    code, _, _ = child.finish()
    assert code == -signal.SIGUSR2
    oom = Child(world, "oom", TRIAGE_HOOKS_DIR=None)
    code, _, err = oom.finish()
    assert code == 1 and "torch.OutOfMemoryError" in err
    assert not (world[0] / "dumps").exists()


def test_importing_and_installing_never_imports_torch(world):
    child = Child(world, "no-torch")
    try:
        assert child.report["installed"] is True and child.report["torch_after_hooks_import"] is False
        child.signal()
    finally:
        code, _, err = child.finish()
    assert code == 0
    assert err.strip() == "triage.hooks: torch is not loaded in this process; nothing to dump (signal)"
    assert files(child.dumps) == []


def test_cuda_unavailable_writes_nothing_and_says_so_once(world):
    child = Child(world, "wait", FAKE_TORCH_CUDA="0")
    try:
        child.signal()
    finally:
        code, _, err = child.finish()
    assert code == 0 and files(child.dumps) == []
    assert err.strip() == "triage.hooks: CUDA is not available in this process; nothing to dump (signal)"


# -------------------------------------------------------------------------------- (d) failures


def test_failing_torch_calls_are_logged_and_swallowed(world):
    child = Child(world, "wait", TRIAGE_HOOKS_SNAPSHOT="1",
                  FAKE_TORCH_FAIL="memory_stats,_snapshot,_record_memory_history")
    try:
        # a failure while CUDA initialises must not reach torch's lazy init
        assert "_cuda_attach_out_of_memory_observer" in child.report["torch_calls"]
        child.signal()
        [summary] = wait_for(child.dumps, 1, "memory_summary-*")
        assert child.proc.poll() is None
        signal_until(child, 2, "memory_summary-*")      # still installed, still working
    finally:
        code, _, err = child.finish()
    assert code == 0
    assert "triage.hooks: cannot record the allocation history" in err
    assert err.count("triage.hooks: torch.cuda.memory_stats(0) failed: RuntimeError: CUDA error") == 2
    assert err.count("triage.hooks: torch.cuda.memory._snapshot() failed") == 2
    assert [n.split("-")[0] for n in files(child.dumps)] == ["memory_summary", "memory_summary"]


def test_a_failing_dump_does_not_change_how_an_oom_ends(world, tmp_path):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the dump folder should be\n")
    child = Child(world, "oom", TRIAGE_HOOKS_DIR=str(blocked))
    code, _, err = child.finish()
    assert code == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in err.splitlines()[-1]
    assert "triage.hooks: oom dump failed" in err


def test_a_snapshot_over_the_cap_is_skipped_with_a_note(world):
    child = Child(world, "wait", TRIAGE_HOOKS_SNAPSHOT="1", TRIAGE_HOOKS_SNAPSHOT_MAX_MB="1",
                  FAKE_TORCH_SNAPSHOT_BYTES=str(2 << 20))
    try:
        child.signal()
        wait_for(child.dumps, 1, "memory_summary-*")
    finally:
        code, _, err = child.finish()
    assert code == 0
    assert "skipped: the snapshot is larger than the 1 MiB cap" in err
    assert [n.split("-")[0] for n in files(child.dumps)] == ["memory_stats", "memory_summary"]


# -------------------------------------------------------------------------------- (e) rotation


OLD = "2020-01-01T00-00-0{}.000Z"


def test_rotation_keeps_the_newest_dumps_and_deletes_only_its_own_files(tmp_path, monkeypatch, fake_torch):
    import triage.hooks as hooks

    folder = tmp_path / "torch"
    folder.mkdir()
    theirs = ["memory_stats.json", "notes.txt", f"memory_stats-{OLD.format(0)}-pid1-dev0-signal.json.bak",
              f"memory_stats-{OLD.format(0)}-pid1-dev0-signal.json.d"]
    for name in theirs[:3]:
        (folder / name).write_text("{}\n")
    (folder / theirs[3]).mkdir()
    for second in range(3):                              # three old dumps of another process
        for name in (f"memory_stats-{OLD.format(second)}-pid1-dev0-signal.json",
                     f"memory_summary-{OLD.format(second)}-pid1-dev0-signal.txt"):
            (folder / name).write_text("old\n")
    (folder / "other-link.json").symlink_to(folder / "notes.txt")
    stale, fresh = folder / ".triage-hooks-1-1-0.tmp", folder / ".triage-hooks-1-1-1.tmp"
    stale.write_text("cut")
    fresh.write_text("being written")
    os.utime(stale, (time.time() - 2 * 3600,) * 2)

    monkeypatch.setenv("TRIAGE_HOOKS_KEEP", "2")
    first = hooks.dump("one", directory=tmp_path)
    left = files(folder)
    assert all(Path(p).name in left for p in first)
    assert [n for n in left if n.startswith("memory_s") and n not in theirs] == sorted(
        [f"memory_stats-{OLD.format(2)}-pid1-dev0-signal.json", f"memory_summary-{OLD.format(2)}-pid1-dev0-signal.txt",
         *(Path(p).name for p in first)])
    second = hooks.dump("two", directory=tmp_path)
    third = hooks.dump("three", directory=tmp_path)
    left = files(folder)
    assert sorted(Path(p).name for p in second + third) == [n for n in left if n.startswith("memory_s")
                                                             and n not in theirs]
    assert set(theirs) | {"other-link.json"} <= set(left)
    assert fresh.exists() and not stale.exists()


def test_rotation_in_a_live_process(world):
    child = Child(world, "wait", TRIAGE_HOOKS_KEEP="2")
    seen: list[set[str]] = []
    try:
        for _ in range(4):
            before = set(files(child.dumps))
            child.signal()
            deadline = time.monotonic() + WAIT_S
            while not ({n for n in files(child.dumps) if n.startswith("memory_summary-")} - before
                       and len(files(child.dumps)) == min(2 * len(seen) + 2, 4)):    # rotated too
                assert time.monotonic() < deadline, f"no new dump: {files(child.dumps)}"
                time.sleep(0.02)
            seen.append(set(files(child.dumps)))
    finally:
        code, _, err = child.finish()
    assert code == 0, err
    assert [len(s) for s in seen] == [2, 4, 4, 4]
    assert len(seen[3] & seen[2]) == 2 and not seen[3] & seen[1]   # the oldest went first


# -------------------------------------------------------------------------------- (f) chaining


def test_a_handler_already_set_for_the_signal_is_still_called(world):
    child = Child(world, "own-handler", HOOKS_TEST_SITE_INSTALL="0")
    try:
        assert child.report["install"] is True and child.report["install_again"] is True
        child.signal()
        assert child.proc.stdout is not None
        assert child.proc.stdout.readline().strip() == f"own handler called {int(signal.SIGUSR2)}"
        wait_for(child.dumps, 1, "memory_stats-*")

        def own_handler_ran() -> None:
            assert child.proc.stdout.readline().strip() == f"own handler called {int(signal.SIGUSR2)}"

        signal_until(child, 2, "memory_stats-*", then=own_handler_ran)
    finally:
        code, _, err = child.finish()
    assert code == 0, err


def test_the_signal_can_be_chosen_or_turned_off(world):
    child = Child(world, "wait", TRIAGE_HOOKS_SIGNAL="USR1")
    try:
        assert child.report["signal_is_default"] is True          # SIGUSR2 left alone
        child.signal(signal.SIGUSR1)
        wait_for(child.dumps, 1, "memory_stats-*")
    finally:
        code, _, err = child.finish()
    assert code == 0, err
    off = Child(world, "wait", TRIAGE_HOOKS_SIGNAL="off")
    try:
        assert off.report["signal_is_default"] is True and off.report["installed"] is True
        assert off.report["excepthook_is_default"] is False
    finally:
        off.finish()


# -------------------------------------------------------------------------------- fixtures


@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    """The fake torch imported into this process (sys.modules) for the in-process tests."""
    import importlib.util

    folder = tmp_path / "faketorch"
    folder.mkdir()
    (folder / "__init__.py").write_text(FAKE_TORCH)
    saved = {k: sys.modules.get(k) for k in ("torch", "torch.cuda", "torch.cuda.memory", "torch._C")}
    spec = importlib.util.spec_from_file_location("torch", folder / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setenv("FAKE_TORCH_STATS", str(CAPTURE / "memory_stats.json"))
    monkeypatch.setenv("FAKE_TORCH_SUMMARY", str(CAPTURE / "memory_summary.txt"))
    for key in [k for k in os.environ if k.startswith("TRIAGE_HOOKS_")]:
        monkeypatch.delenv(key)
    spec.loader.exec_module(module)
    sys.modules["torch"] = module
    yield module
    for key, value in saved.items():
        if value is None:
            sys.modules.pop(key, None)
        else:
            sys.modules[key] = value


def test_the_vllm_plugin_entry_point_names_install():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["vllm.general_plugins"]["triage_hooks"]
    module, _, name = target.partition(":")
    import importlib

    assert getattr(importlib.import_module(module), name).__name__ == "install"


def test_configuration_from_the_environment(caplog):
    from triage.hooks import DEFAULT_KEEP, _Config, _signal_number

    c = _Config({"TRIAGE_HOOKS_DIR": "/d", "TRIAGE_HOOKS_SIGNAL": "", "TRIAGE_HOOKS_OOM_OBSERVER": "",
                 "TRIAGE_HOOKS_KEEP": "many", "TRIAGE_HOOKS_SNAPSHOT": "yes", "TRIAGE_HOOKS_SNAPSHOT_MAX_MB": "64"})
    assert (c.directory, c.signal, c.observer, c.keep, c.snapshot) == ("/d", "SIGUSR2", True, DEFAULT_KEEP, True)
    assert c.snapshot_max_bytes == 64 << 20 and c.snapshot_entries == 100_000
    assert "TRIAGE_HOOKS_KEEP='many' is not a whole number" in caplog.text
    assert _Config({}).directory is None and _Config({"TRIAGE_HOOKS_OOM_OBSERVER": "0"}).observer is False
    assert _signal_number("SIGUSR2") == _signal_number("usr2") == _signal_number(str(int(signal.SIGUSR2)))
    assert _signal_number("off") is None and _signal_number("SIG_DFL") is None and _signal_number("SIGNOPE") is None
