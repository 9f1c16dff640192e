"""Helpers shared by the end-to-end tests that drive the simulator over loopback HTTP.

Every wait is bounded; process cleanup kills whole process groups (each simulator and each
relaunched server runs in its own session).
"""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# A 24 GiB card with 16 GiB of weights: a 3.6 GiB KV cache (29,488 tokens) that real prompts fill.
SMALL_CARD = ("--sim-gpu-gib", "24", "--sim-weights-gib", "16", "--max-model-len", "4096")
START_S = 10.0
# A V1 server's launch and its runtime OOM: an incident a recovery test runs a runbook against.
OOM_LOG = (
    f"(APIServer pid=4242) INFO 03-12 14:10:00 [utils.py:233] non-default args: {{'model': '{MODEL}'}}\n"
    "(EngineCore_DP0 pid=4243) ERROR 03-12 14:17:03 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Of the "
    "allocated memory 75.20 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.\n"
)


def incident_with_runbook(tmp_path: Path, name: str, runbook: str) -> Path:
    """TMP/INC holding OOM_LOG as logs/vllm.log, and TMP/books/NAME.yaml holding `runbook`."""
    root = tmp_path / "INC"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "vllm.log").write_text(OOM_LOG)
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / f"{name}.yaml").write_text(runbook)
    return root


def get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def complete(url: str, prompt: str, max_tokens: int = 4, timeout: float = 10.0) -> int:
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = json.loads(resp.read())
            assert payload["usage"]["completion_tokens"] == max_tokens
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def words(n: int, tag: str) -> str:
    """A prompt of `n` tokens no other prompt shares a block with (the tag leads every block)."""
    return " ".join(f"{tag}-{i}" for i in range(n))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")     # a zombie nobody reaped yet is gone for our purposes


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
