#!/usr/bin/env python3
"""CPU overhead of `triage watch` at a 1 s interval, against a simulated vLLM server on loopback.

    python benchmarks/bench_watch.py [--duration 30] [--interval 1] [--modes dashboard,plain]
                                     [--json] [--no-fail]

Starts `triage sim serve` (a healthy V1 server, its log in a temporary folder) and keeps it
lightly loaded (a completion every 0.5 s from this process, so the counters and gauges move).
Then, for each mode, runs `triage watch --vllm-url URL --interval S --exporter 0` for
--duration seconds:

  dashboard  stdout on a pseudo-terminal: the rich.live dashboard is drawn every reading
  plain      stdout on a pipe: one line per raised or cleared condition (a sidecar)
  json       --json on a pipe: one triage.watch/v1 object per reading
  act        plain, with --act (a dry run): each reading also judged for an OOM precursor

while this process scrapes the watch's exporter every 5 s (as a Prometheus would, a little
more often). The watch's CPU time (user + system, all threads) is read from /proc/PID/stat
after a warm-up of 3 s and at the end: that difference over the wall time between the two
readings is the steady-state overhead, in % of one core. The whole run (start-up and imports
included) comes from os.wait4. NVML is left as the machine has it (off with --no-nvml).

Target: steady-state overhead under 2% of one core at a 1 s interval.
Exit codes: 0 target met; 1 missed (0 with --no-fail); 2 the simulator or watch failed, or the
exporter never showed a successful reading.
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import REPO, BenchError, machine_line, mark, table, triage_command

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TARGET_PCT = 2.0
WARMUP_S = 3.0
SCRAPE_EVERY_S = 5.0
MODES = ("dashboard", "plain", "json", "act")
_URL = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")
_EXPORTER = re.compile(rb"exporter (http://127\.0\.0\.1:\d+/metrics)")


def start_sim(folder: Path) -> tuple[subprocess.Popen, str]:
    log = folder / "vllm.log"
    proc = subprocess.Popen([*triage_command(), "sim", "serve", MODEL, "--port", "0", "--log", str(log)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=REPO)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = _URL.search(log.read_text(errors="replace")) if log.exists() else None
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            raise BenchError(f"the simulator exited {proc.returncode} before serving")
        time.sleep(0.1)
    stop_group(proc)
    raise BenchError("the simulator did not start serving within 20 s")


def stop_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except (ProcessLookupError, PermissionError):
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def load(url: str, stop: threading.Event) -> None:
    """A completion every 0.5 s: the counters and gauges watch reads keep moving."""
    n = 0
    while not stop.wait(0.5):
        body = json.dumps({"model": MODEL, "prompt": f"request {n} " + "shared words " * 40, "max_tokens": 8})
        req = urllib.request.Request(url + "/v1/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()
        except OSError:
            pass
        n += 1


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of every thread of `pid` (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Output:
    """The watch's stdout: a pseudo-terminal (drained, as a terminal would show it) or a pipe."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen = bytearray()
        if mode == "dashboard":
            self.read_fd, self.child_fd = pty.openpty()
        else:
            self.read_fd, self.child_fd = os.pipe()

    def drain(self, wait_s: float) -> None:
        ready, _, _ = select.select([self.read_fd], [], [], wait_s)
        if ready:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except OSError:
                return
            self.seen += chunk[-4096:] if len(self.seen) > 1 << 20 else chunk

    def close(self) -> None:
        for fd in (self.read_fd, self.child_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def run_mode(mode: str, url: str, interval: float, duration: float, nvml: bool) -> dict[str, Any]:
    args = [*triage_command(), "watch", "--vllm-url", url, "--interval", str(interval), "--exporter", "0"]
    args += ["--json"] if mode == "json" else []
    args += [] if nvml else ["--no-nvml"]
    if mode == "act":       # the sidecar: plain output, every reading also judged for a precursor (a dry run)
        args += ["--act", "--incident", tempfile.mkdtemp(prefix="triage-bench-act-")]
    out = Output(mode)
    err_r, err_w = os.pipe()
    env = {**os.environ, "COLUMNS": "120", "TERM": os.environ.get("TERM", "xterm")}
    started = time.monotonic()
    pid = os.posix_spawnp(args[0], args, env, file_actions=[
        (os.POSIX_SPAWN_DUP2, out.child_fd, 1), (os.POSIX_SPAWN_DUP2, err_w, 2),
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)])
    os.close(out.child_fd)
    os.close(err_w)
    stderr = bytearray()
    exporter: str | None = None
    scrapes, ok_scrapes = 0, 0
    cpu0 = t0 = None
    next_scrape = started + WARMUP_S
    try:
        end = started + WARMUP_S + duration
        while time.monotonic() < end:
            out.drain(0.05)
            if select.select([err_r], [], [], 0)[0]:
                stderr += os.read(err_r, 1 << 16)
                m = _EXPORTER.search(stderr) or (_EXPORTER.search(out.seen) if mode == "dashboard" else None)
                exporter = exporter or (m.group(1).decode() if m else None)
            if exporter is None and mode == "dashboard":
                m = _EXPORTER.search(out.seen)
                exporter = m.group(1).decode() if m else None
            now = time.monotonic()
            if cpu0 is None and now - started >= WARMUP_S:
                cpu0, t0 = cpu_seconds(pid), now
            if exporter and now >= next_scrape:
                next_scrape = now + SCRAPE_EVERY_S
                scrapes += 1
                try:
                    with urllib.request.urlopen(exporter, timeout=5) as resp:
                        text = resp.read().decode()
                    ok_scrapes += 'triage_source_up{server="%s",source="metrics"} 1.0' % url in text
                except OSError:
                    pass
        cpu1, t1 = cpu_seconds(pid), time.monotonic()
    finally:
        os.kill(pid, signal.SIGTERM)
        _, status, usage = os.wait4(pid, 0)
        total_wall = time.monotonic() - started
        out.close()
        while select.select([err_r], [], [], 0)[0]:
            chunk = os.read(err_r, 1 << 16)
            if not chunk:
                break
            stderr += chunk
        os.close(err_r)
    rc = os.waitstatus_to_exitcode(status)
    text = stderr.decode("utf-8", "replace")
    if rc != 0 or "Traceback" in text:
        raise BenchError(f"`{' '.join(args)}` exited {rc} on SIGTERM:\n{text[-2000:]}")
    if not ok_scrapes:
        raise BenchError(f"{mode}: the exporter never showed a successful reading of {url} "
                         f"({scrapes} scrapes; exporter {exporter or 'not announced'})\n{text[-2000:]}")
    steady = None
    if cpu0 is not None and cpu1 is not None and t0 is not None:
        steady = 100 * (cpu1 - cpu0) / (t1 - t0)
    total_cpu = usage.ru_utime + usage.ru_stime
    return {"mode": mode, "command": args, "steady_wall_s": (t1 - t0) if t0 else None,
            "steady_cpu_s": (cpu1 - cpu0) if steady is not None else None, "steady_pct_of_core": steady,
            "total_wall_s": total_wall, "total_cpu_s": total_cpu, "total_pct_of_core": 100 * total_cpu / total_wall,
            "exporter_scrapes": scrapes, "exporter_scrapes_ok": ok_scrapes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="CPU overhead of `triage watch` against a simulated server.")
    ap.add_argument("--duration", type=float, default=30.0, help="measured seconds per mode (default 30)")
    ap.add_argument("--interval", type=float, default=1.0, help="the watch interval (default 1)")
    ap.add_argument("--modes", default="dashboard,plain", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--no-nvml", dest="nvml", action="store_false", help="run the watch with --no-nvml")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 even when the target is missed")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: choose from {', '.join(MODES)}")
    if args.duration < 5 or args.interval <= 0:
        ap.error("--duration must be at least 5 s and --interval positive")
    results = []
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="triage-bench-watch-") as tmp:
        try:
            sim, url = start_sim(Path(tmp))
        except BenchError as exc:
            print(f"bench_watch: {exc}", file=sys.stderr)
            return 2
        loader = threading.Thread(target=load, args=(url, stop), daemon=True)
        loader.start()
        try:
            for mode in modes:
                results.append(run_mode(mode, url, args.interval, args.duration, args.nvml))
        except BenchError as exc:
            print(f"bench_watch: {exc}", file=sys.stderr)
            return 2
        finally:
            stop.set()
            stop_group(sim)
    ok = all(r["steady_pct_of_core"] is not None and r["steady_pct_of_core"] < TARGET_PCT for r in results)
    if args.json:
        print(json.dumps({"machine": machine_line(), "interval_s": args.interval, "target_pct": TARGET_PCT,
                          "results": results, "target_met": ok}, indent=2))
    else:
        print(f"machine: {machine_line()}")
        print(f"triage watch --interval {args.interval:g} --exporter 0, {args.duration:g} s per mode after a "
              f"{WARMUP_S:g} s warm-up\n")
        rows = [[r["mode"], f"{r['steady_cpu_s']:.2f} s / {r['steady_wall_s']:.1f} s"
                 if r["steady_cpu_s"] is not None else "n/a",
                 f"{r['steady_pct_of_core']:.2f}%" if r["steady_pct_of_core"] is not None else "n/a",
                 f"{r['total_cpu_s']:.2f} s / {r['total_wall_s']:.1f} s", f"{r['total_pct_of_core']:.2f}%",
                 mark(r["steady_pct_of_core"] is not None and r["steady_pct_of_core"] < TARGET_PCT)]
                for r in results]
        print(table(["mode", "steady CPU / wall", "steady", "whole run CPU / wall", "whole run",
                     f"< {TARGET_PCT:g}% of a core"], rows))
    return 0 if ok or args.no_fail else 1


if __name__ == "__main__":
    sys.exit(main())
