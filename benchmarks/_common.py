"""Helpers shared by the benchmark scripts: finding `triage`, timing a child, tables.

Standard library only. The scripts are run as `python benchmarks/<script>.py`, so this
module is importable as `_common` from the script's own directory.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VERDICT_EXIT_CODES = (0, 3)  # 0: a verdict was reached, 3: class "unknown" (README.md, "Exit codes")


@dataclass(frozen=True)
class RunResult:
    cmd: tuple[str, ...]
    rc: int
    wall_s: float
    peak_rss_bytes: int | None  # None where wait4/posix_spawn are unavailable
    stdout: str
    stderr: str


class BenchError(Exception):
    """A failure that makes the measurement meaningless (tool missing, tool crashed)."""


def triage_command() -> list[str]:
    """`triage` from PATH, else `python -m triage` run with this interpreter."""
    exe = shutil.which("triage")
    return [exe] if exe else [sys.executable, "-m", "triage"]


# A tiny launcher run in a fresh interpreter. On Linux a child's ru_maxrss starts at the
# RSS of whoever forked it, so measuring from this (bigger) process would overstate the
# child's peak; the launcher's own RSS (~8 MB) is below any Python child's.
_LAUNCHER = """
import os, sys, time
result, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(result, "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {wall!r} {usage.ru_maxrss}")
"""


STDOUT_MODES = ("capture", "devnull", "drain")


def run_timed(cmd: Sequence[str], cwd: Path | None = None, stdout: str = "capture") -> RunResult:
    """Runs `cmd` once: wall time (spawn to exit) and the child's own peak RSS.

    `stdout`: "capture" (to a temporary file, returned in the result), "devnull" (the child's
    stdout is /dev/null itself, as with `cmd > /dev/null`: GNU grep notices and stops at its
    first match) or "drain" (a pipe that this process reads and throws away, so the child
    writes all of its output, as into `| cat > /dev/null`). The result's stdout is "" unless
    captured."""
    if stdout not in STDOUT_MODES:
        raise ValueError(f"stdout must be one of {STDOUT_MODES}, not {stdout!r}")
    if not (hasattr(os, "wait4") and hasattr(os, "posix_spawnp")):
        return _run_plain(cmd, cwd, stdout)
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as tmp:
        result, out_path, err_path = (Path(tmp, name) for name in ("result", "out", "err"))
        launcher = [sys.executable, "-S", "-I", "-c", _LAUNCHER, str(result), *cmd]
        with open(err_path, "wb") as err:
            if stdout == "drain":
                with subprocess.Popen(launcher, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                      cwd=cwd) as proc:
                    assert proc.stdout is not None
                    while proc.stdout.read(1 << 20):
                        pass
            else:
                with open(os.devnull if stdout == "devnull" else out_path, "wb") as out:
                    subprocess.run(launcher, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd,
                                   check=False)
        text = out_path.read_bytes().decode("utf-8", "replace") if stdout == "capture" else ""
        stderr = err_path.read_bytes().decode("utf-8", "replace")
        if not result.exists():  # the launcher itself failed, e.g. command not found
            raise BenchError(f"could not run `{' '.join(cmd)}`\n{tail(stderr)}")
        rc, wall, maxrss = result.read_text().split()
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return RunResult(tuple(cmd), int(rc), float(wall), int(maxrss) * scale, text, stderr)


def _run_plain(cmd: Sequence[str], cwd: Path | None, stdout: str = "capture") -> RunResult:
    """Fallback without wait4/posix_spawn: wall time only ("drain" reads the pipe to the end)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        with subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL if stdout == "devnull" else subprocess.PIPE,
                              stderr=err, stdin=subprocess.DEVNULL, cwd=cwd) as proc:
            chunks = []
            if proc.stdout is not None:
                while chunk := proc.stdout.read(1 << 20):
                    if stdout == "capture":
                        chunks.append(chunk)
        wall = time.perf_counter() - t0
        err.seek(0)
        errtext = err.read().decode("utf-8", "replace")
    return RunResult(tuple(cmd), proc.returncode, wall, None, b"".join(chunks).decode("utf-8", "replace"), errtext)


def check_verdict_run(res: RunResult) -> dict[str, Any]:
    """The parsed verdict JSON, or BenchError with the tool's own words."""
    if res.rc not in VERDICT_EXIT_CODES:
        raise BenchError(f"triage failed: `{' '.join(res.cmd)}` exited {res.rc}\n"
                         f"{tail(res.stderr or res.stdout)}")
    try:
        doc = json.loads(res.stdout)
    except ValueError as exc:
        raise BenchError(f"triage failed: `{' '.join(res.cmd)}` did not print JSON on stdout ({exc})\n"
                         f"{tail(res.stdout)}") from None
    if not isinstance(doc, dict):
        raise BenchError(f"triage failed: `{' '.join(res.cmd)}` printed JSON that is not an object")
    return doc


def verdict_class(doc: dict[str, Any]) -> str:
    verdict = doc.get("verdict")
    if isinstance(verdict, dict) and "class" in verdict:
        return str(verdict["class"])
    return "?"


def tail(text: str, lines: int = 15) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "\n".join("    " + line for line in kept) if kept else "    (no output)"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def machine_line() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()} ({sys.executable})")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain fixed-width table; the first column is left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in pairs]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(r) for r in rows)])


def mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"
