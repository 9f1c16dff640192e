"""Real child processes, so the simulator has the process tree a vLLM server has.

* The engine core: a child named like vLLM's (`VLLM::EngineCore`). It does no work (the engine
  runs in the API process, which is simpler to keep consistent) but it is a real PID for the
  `(EngineCore_DP0 pid=N)` prefix and for tools that must stop a whole server. Like vLLM's it
  exits when the API server goes away (its pipe closes or its parent changes), and it exits 1
  when the engine fails.
  With `--sim-hold-gpu-gib` it holds real GPU memory, so recovery can be run against a real driver.
* The orphan worker (`orphan_worker` scenario): a `VLLM::Worker_TP0` child that does not watch
  its parent, so it outlives a SIGKILLed server and keeps "holding the GPU".

Both are forked before any thread starts (fork and threads do not mix) and before the HTTP
socket is bound, and point their stdio at /dev/null so they never hold a caller's pipes open.
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import time
from dataclasses import dataclass

ENGINE_NAME = "EngineCore_DP0"
WORKER_NAME = "Worker_TP0"
POLL_S = 0.2
ORPHAN_LIFETIME_S = 3600.0      # bounded even when nobody cleans it up
_PR_SET_NAME = 15


@dataclass
class Child:
    name: str
    pid: int
    pipe: int | None = None     # write end: a byte is the exit code to use; EOF means "exit"
    exit_code: int | None = None


def can_fork() -> bool:
    return hasattr(os, "fork")


def spawn_engine_core(hold_gpu_bytes: int = 0) -> Child:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(write_end)
            _become("VLLM::EngineCore")
            held = _hold_gpu(hold_gpu_bytes) if hold_gpu_bytes else None   # noqa: F841 (kept alive)
            code = _watch(read_end, os.getppid())
        finally:
            os._exit(code)
    os.close(read_end)
    return Child(ENGINE_NAME, pid, write_end)


def spawn_orphan_worker(close_fds: tuple[int, ...] = ()) -> Child:
    pid = os.fork()
    if pid == 0:   # pragma: no cover - runs in the child
        try:
            for fd in close_fds:
                os.close(fd)
            _become("VLLM::Worker_TP0")
            deadline = time.monotonic() + ORPHAN_LIFETIME_S
            while time.monotonic() < deadline:
                time.sleep(POLL_S)
        finally:
            os._exit(0)
    return Child(WORKER_NAME, pid)


def stop(child: Child, code: int, timeout_s: float = 3.0) -> int | None:
    """Tell the engine child to exit with `code` and reap it; its exit code, or None."""
    if child.pipe is not None:
        try:
            os.write(child.pipe, bytes([code & 0xFF]))
            os.close(child.pipe)
        except OSError:
            pass
        child.pipe = None
    return reap(child, timeout_s)


def terminate(child: Child, timeout_s: float = 3.0) -> int | None:
    """SIGTERM a child, then SIGKILL it if it is still there after `timeout_s`."""
    try:
        os.kill(child.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    code = reap(child, timeout_s)
    if code is None:
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = reap(child, 1.0)
    return code


def reap(child: Child, timeout_s: float) -> int | None:
    """waitpid without blocking past `timeout_s`; the exit code (negative for a signal)."""
    if child.exit_code is not None:
        return child.exit_code
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            return child.exit_code
        if pid:
            child.exit_code = os.waitstatus_to_exitcode(status)
            return child.exit_code
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _watch(read_end: int, parent: int) -> int:
    while True:
        ready, _, _ = select.select([read_end], [], [], POLL_S)
        if os.getppid() != parent:
            return 0            # the API server is gone; vLLM's engine core exits with it
        if ready:
            data = os.read(read_end, 1)
            return data[0] if data else 0


def _hold_gpu(nbytes: int) -> object | None:
    """Allocate real GPU memory the way vLLM's engine holds its KV cache: NVML and nvidia-smi then
    list this PID, and it is freed only when the process exits. Only after fork (CUDA does not
    survive one); without torch or a GPU the engine runs on holding nothing."""
    try:
        import torch

        block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        block.fill_(1)
        torch.cuda.synchronize()
        return block
    except Exception:
        return None


def _become(comm: str) -> None:
    """Look like a vLLM child: its process name, stdio detached, default signal handling."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C in a terminal goes to the API server
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(comm.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass   # not Linux: keep the inherited name
