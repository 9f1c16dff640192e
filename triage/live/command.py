"""Running a host command for a collection (nvidia-smi, kubectl, dmesg): bounded in time and output.

The command runs in a session of its own so that a timeout ends it with everything it started
(kubectl's credential helper, say); its output goes to a file when it can be large, and what it
said on stderr is kept to one line for the manifest.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import BinaryIO, Sequence

STDERR_KEEP = 64 << 10


@dataclass(frozen=True)
class Outcome:
    ok: bool
    stdout: bytes                 # empty when the output went to a file
    problem: str | None           # one line: not found, exit status and its message, timeout


def run(argv: Sequence[str], timeout_s: float, *, stdout: BinaryIO | None = None,
        env: dict[str, str] | None = None) -> Outcome:
    """Run `argv` (argv[0] looked up on PATH); never raises for the command's sake."""
    exe = shutil.which(argv[0])
    if exe is None:
        return Outcome(False, b"", f"{argv[0]} not found on PATH")
    try:
        proc = subprocess.Popen([exe, *argv[1:]], stdin=subprocess.DEVNULL,
                                stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=env)
    except OSError as exc:
        return Outcome(False, b"", f"cannot run {argv[0]}: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(timeout=max(0.05, timeout_s))
    except subprocess.TimeoutExpired:
        _kill(proc)
        return Outcome(False, b"", f"{argv[0]} did not finish within {timeout_s:.3g} s: stopped")
    out = out or b""
    if proc.returncode != 0:
        said = last_line(err[-STDERR_KEEP:]) or last_line(out[-STDERR_KEEP:])
        return Outcome(False, out, f"{argv[0]} exited {proc.returncode}" + (f": {said}" if said else ""))
    return Outcome(True, out, None)


def last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):     # gone already
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
        proc.communicate(timeout=2)                                     # reap it; a stuck one is left to init
