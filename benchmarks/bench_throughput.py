#!/usr/bin/env python3
"""Throughput and memory of `triage classify` on a big log, against `grep -c`.

    python benchmarks/bench_throughput.py LOG [--runs 3] [--json] [--no-fail]
    python benchmarks/bench_throughput.py --generate 1G [--seed 0] ...

With --generate, the log is written to benchmarks/out/ by gen_log.py (and reused when a
file of about the right size is already there). The page cache is warmed by one full read,
then, in the same session, `grep -c "out of memory" LOG` and `triage classify LOG --json`
are each run N times (best wall time kept; peak RSS is the child's own, from wait4).

Targets: triage wall <= 2.0x grep wall; triage peak RSS < 200 MB (10^6 bytes).
Exit codes: 0 targets met; 1 a target missed (unless --no-fail); 2 setup or triage failed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import gen_log
from _common import (
    REPO,
    BenchError,
    RunResult,
    check_verdict_run,
    machine_line,
    mark,
    run_timed,
    table,
    triage_command,
    verdict_class,
)

OUT_DIR = REPO / "benchmarks" / "out"
RATIO_TARGET = 2.0
RSS_TARGET_BYTES = 200 * 10**6
SIZE_TOLERANCE = 0.01  # a generated log is "about" the requested size
GREP_PATTERN = "out of memory"


def generated_log(size_text: str, seed: int) -> Path:
    """benchmarks/out/vllm-<SIZE>-seed<N>.log, generated unless already there."""
    size = gen_log.parse_size(size_text)
    path = OUT_DIR / f"vllm-{size_text.upper()}-seed{seed}.log"
    if path.is_file() and abs(path.stat().st_size - size) <= size * SIZE_TOLERANCE:
        print(f"using existing {path.relative_to(REPO)}", file=sys.stderr)
        return path
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    print(f"generating {path.relative_to(REPO)} ({size_text}) ...", file=sys.stderr)
    t0 = time.perf_counter()
    gen_log.generate(path, size, seed)
    print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def warm_page_cache(path: Path) -> float:
    """Reads the whole file once; returns the seconds it took."""
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass
    return time.perf_counter() - t0


def best_of(cmd: list[str], runs: int, check: bool) -> tuple[RunResult, list[RunResult]]:
    """Runs `cmd` `runs` times; returns (fastest run, all runs). `check` validates each run."""
    results = []
    for _ in range(runs):
        res = run_timed(cmd, cwd=REPO)
        if check:
            check_verdict_run(res)
        elif res.rc not in (0, 1):  # grep: 0 match, 1 no match, 2 error
            raise BenchError(f"`{' '.join(cmd)}` exited {res.rc}: {res.stderr.strip()}")
        results.append(res)
    return min(results, key=lambda r: r.wall_s), results


def measure(log: Path, runs: int) -> dict[str, Any]:
    grep = shutil.which("grep")
    if not grep:
        raise BenchError("grep is not on PATH")
    warm_s = warm_page_cache(log)
    g_best, _ = best_of([grep, "-c", GREP_PATTERN, str(log)], runs, check=False)
    t_best, t_all = best_of([*triage_command(), "classify", str(log), "--json"], runs, check=True)
    rss = [r.peak_rss_bytes for r in t_all if r.peak_rss_bytes is not None]
    peak = max(rss) if rss else None
    ratio = t_best.wall_s / g_best.wall_s
    size = log.stat().st_size
    return {
        "log": str(log), "bytes": size, "runs": runs,
        "warm_read_s": warm_s,
        "grep_s": g_best.wall_s, "grep_count": int(g_best.stdout.strip() or 0),
        "triage_s": t_best.wall_s, "triage_mb_per_s": size / t_best.wall_s / 1e6,
        "triage_peak_rss_bytes": peak,
        "verdict_class": verdict_class(check_verdict_run(t_best)),
        "ratio": ratio,
        "targets": {
            "ratio_le_2x": ratio <= RATIO_TARGET,
            "peak_rss_lt_200MB": peak is not None and peak < RSS_TARGET_BYTES,
        },
    }


def print_report(r: dict[str, Any]) -> None:
    print(f"machine: {machine_line()}")
    print(f"log:     {r['log']} ({r['bytes'] / 1e6:,.0f} MB; warm read {r['warm_read_s']:.2f} s)")
    print(f"verdict: class {r['verdict_class']}; grep found {r['grep_count']} line(s)\n")
    peak = r["triage_peak_rss_bytes"]
    peak_txt = f"{peak / 1e6:.0f} MB" if peak is not None else "n/a"
    print(table(["command", f"best of {r['runs']} s", "MB/s", "peak RSS"], [
        [f'grep -c "{GREP_PATTERN}" LOG', f"{r['grep_s']:.3f}", f"{r['bytes'] / r['grep_s'] / 1e6:,.0f}", ""],
        ["triage classify LOG --json", f"{r['triage_s']:.3f}", f"{r['triage_mb_per_s']:,.0f}", peak_txt],
    ]))
    print()
    tg = r["targets"]
    print(table(["target", "value", "result"], [
        [f"triage/grep wall <= {RATIO_TARGET:.1f}x", f"{r['ratio']:.2f}x", mark(tg["ratio_le_2x"])],
        [f"peak RSS < {RSS_TARGET_BYTES // 10**6} MB", peak_txt, mark(tg["peak_rss_lt_200MB"])],
    ]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Throughput/memory benchmark for `triage classify`.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("log", nargs="?", type=Path, help="log file to classify")
    src.add_argument("--generate", metavar="SIZE", help="make (or reuse) a log of SIZE in benchmarks/out/")
    ap.add_argument("--seed", type=int, default=0, help="seed for --generate (default 0)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each command (default 3)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.generate:
        try:
            gen_log.parse_size(args.generate)
        except argparse.ArgumentTypeError as exc:
            ap.error(str(exc))
    try:
        log = generated_log(args.generate, args.seed) if args.generate else args.log.resolve()
        if not log.is_file():
            raise BenchError(f"{log}: not a file")
        r = measure(log, args.runs)
    except BenchError as exc:
        print(f"bench_throughput: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print_report(r)
    if not all(r["targets"].values()) and not args.no_fail:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
