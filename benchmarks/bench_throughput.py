#!/usr/bin/env python3
"""Throughput and memory of classify, timeline and postmortem on the log shapes users have,
against the engineer's grep, in the same run.

    python benchmarks/bench_throughput.py [--shapes all|vllm-debug,sglang,...] [--size 40M]
                                          [--runs 3] [--commands classify,timeline,postmortem]
                                          [--seed 0] [--json] [--no-fail]
    python benchmarks/bench_throughput.py --log LOG ...      (one given log instead)

Each shape's log is written to benchmarks/out/ by gen_log.py (and reused when one of about the
right size is there), with a bundle beside it (logs/ links to the log) for timeline and
postmortem. The page cache is warmed by one full read; then, per shape, the engineer's
`grep -n -F -e ' ERROR ' -e 'rror' -e 'emory' -e 'throughput' ... LOG`, its output piped
and drained, and each triage command are run N times, alternating; the median wall time of each
is kept, and the peak RSS of the triage runs (the child's own, from wait4).

Targets, per shape: classify <= 1.5x grep with peak RSS < 100 MB; timeline and postmortem
<= 2x grep; classify gives the shape's expected verdict.
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
import gen_shapes
from _common import (
    REPO,
    BenchError,
    check_verdict_run,
    machine_line,
    mark,
    median,
    run_timed,
    table,
    triage_command,
    verdict_class,
)

OUT_DIR = REPO / "benchmarks" / "out"
SIZE_TOLERANCE = 0.01            # a generated log is "about" the requested size
# The engineer's grep: the failure words and the stats words (bench_storm.py uses the same).
GREP_PATTERNS = [" ERROR ", " WARNING ", "throughput", "KV cache", "rror", "emory", "Traceback", "Killed",
                 "Xid", "non-default", "startup"]
# command -> (max median wall time as a multiple of grep's, max peak RSS in bytes or None)
TARGETS = {"classify": (1.5, 100 * 10**6), "timeline": (2.0, None), "postmortem": (2.0, None)}
SHAPES = ("access", *gen_shapes.SHAPES)
EXPECTED = {"access": "burst", **gen_shapes.EXPECTED}


def generated_log(shape: str, size_text: str, seed: int) -> Path:
    """benchmarks/out/<shape>-<SIZE>-seed<N>.log, generated unless already there."""
    size = gen_log.parse_size(size_text)
    path = OUT_DIR / f"{shape}-{size_text.upper()}-seed{seed}.log"
    if path.is_file() and abs(path.stat().st_size - size) <= size * SIZE_TOLERANCE:
        return path
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    print(f"generating {path.relative_to(REPO)} ...", file=sys.stderr)
    t0 = time.perf_counter()
    if shape == "access":
        gen_log.generate(path, size, seed)
    else:
        gen_shapes.generate(path, size, seed, shape)
    print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def make_bundle(log: Path) -> Path:
    """<log>.bundle/ with logs/server.log linking to LOG and an incident.yaml; made afresh."""
    bundle = log.with_name(log.name + ".bundle")
    if bundle.exists():
        shutil.rmtree(bundle)   # removes the link, never the log it points to
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "server.log").symlink_to(log.resolve())
    # The generators' year-less times belong to the year of gen_log.START.
    (bundle / "incident.yaml").write_text(
        f"id: BENCH-{log.stem}\ntitle: \"benchmark: {log.name}\"\nseverity: sev3\nservice: bench\n"
        f"timezone: UTC\ncreated: \"{gen_log.START.year}-12-31T00:00:00Z\"\nlinks: []\n", encoding="utf-8")
    return bundle


def warm_page_cache(path: Path) -> float:
    """Reads the whole file once; returns the seconds it took."""
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(8 << 20):
            pass
    return time.perf_counter() - t0


def commands(log: Path, bundle: Path, wanted: list[str]) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, what its stdout is: see _common.run_timed)."""
    grep = shutil.which("grep")
    if not grep:
        raise BenchError("grep is not on PATH")
    triage = triage_command()
    every = {
        "grep": ([grep, "-n", "-F", *(a for p in GREP_PATTERNS for a in ("-e", p)), str(log)], "drain"),
        "classify": ([*triage, "classify", str(log), "--json"], "capture"),
        "timeline": ([*triage, "timeline", str(bundle), "--json"], "drain"),
        "postmortem": ([*triage, "postmortem", str(bundle), "-o", str(bundle / "postmortem.md")], "capture"),
    }
    return {name: every[name] for name in ("grep", *wanted)}


def measure(shape: str, log: Path, runs: int, wanted: list[str]) -> dict[str, Any]:
    bundle = make_bundle(log)
    warm_page_cache(log)
    cmds = commands(log, bundle, wanted)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    rss: dict[str, list[int]] = {name: [] for name in cmds}
    verdict = None
    for _ in range(runs):                    # alternate, so a burst of load hits every command alike
        for name, (cmd, stdout) in cmds.items():
            res = run_timed(cmd, cwd=REPO, stdout=stdout)
            if name == "grep":
                if res.rc not in (0, 1):
                    raise BenchError(f"grep exited {res.rc}: {res.stderr.strip()}")
            elif name == "classify":
                verdict = verdict_class(check_verdict_run(res))
            elif res.rc != 0:
                raise BenchError(f"{name} on {log.name} exited {res.rc}: {res.stderr.strip()[-500:]}")
            walls[name].append(res.wall_s)
            if res.peak_rss_bytes is not None:
                rss[name].append(res.peak_rss_bytes)
    grep_s = median(walls["grep"])
    out: dict[str, Any] = {"shape": shape, "log": str(log), "bytes": log.stat().st_size, "runs": runs,
                           "grep_s": grep_s, "verdict": verdict, "expected": EXPECTED.get(shape),
                           "commands": {}}
    for name in wanted:
        ratio_target, rss_target = TARGETS[name]
        wall = median(walls[name])
        peak = max(rss[name]) if rss[name] else None
        out["commands"][name] = {
            "median_s": wall, "ratio": wall / grep_s, "peak_rss_bytes": peak,
            "ok": wall / grep_s <= ratio_target and (rss_target is None or (peak is not None and peak < rss_target)),
        }
    out["verdict_ok"] = out["expected"] is None or verdict == out["expected"]
    return out


def print_report(results: list[dict[str, Any]], wanted: list[str]) -> None:
    print(f"machine: {machine_line()}")
    print(f"grep: grep -n -F {' '.join(repr(p) for p in GREP_PATTERNS)} LOG | (drained)")
    header = ["shape", "MB", "grep s"]
    for name in wanted:
        header += [f"{name} s", "x grep", "RSS MB"]
    header += ["verdict"]
    rows = []
    for r in results:
        row = [r["shape"], f"{r['bytes'] / 1e6:.0f}", f"{r['grep_s']:.3f}"]
        for name in wanted:
            c = r["commands"][name]
            peak = f"{c['peak_rss_bytes'] / 1e6:.0f}" if c["peak_rss_bytes"] else "n/a"
            row += [f"{c['median_s']:.3f}", f"{c['ratio']:.2f}x {mark(c['ok'])}", peak]
        row.append(f"{r['verdict']} {mark(r['verdict_ok'])}")
        rows.append(row)
    print(table(header, rows))
    limits = ", ".join(f"{n} <= {TARGETS[n][0]}x grep" + (f" and < {TARGETS[n][1] // 10**6} MB" if TARGETS[n][1] else "")
                       for n in wanted)
    print(f"targets (median of {results[0]['runs'] if results else 0}): {limits}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Throughput/memory benchmark on the log shapes, against grep.")
    ap.add_argument("--shapes", default="all", help=f"comma-separated, or all: {', '.join(SHAPES)}")
    ap.add_argument("log_arg", nargs="?", type=Path, metavar="LOG", help="the same as --log")
    ap.add_argument("--log", type=Path, help="benchmark this log instead of generated shapes")
    ap.add_argument("--size", default="40M", help="size of each generated log (default 40M)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated logs (default 0)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each command (default 3)")
    ap.add_argument("--commands", default="classify,timeline,postmortem", help="which triage commands to time")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    args = ap.parse_args(argv)
    args.log = args.log or args.log_arg
    shapes = list(SHAPES) if args.shapes == "all" else [s.strip() for s in args.shapes.split(",") if s.strip()]
    wanted = [c.strip() for c in args.commands.split(",") if c.strip()]
    if unknown := [s for s in shapes if s not in SHAPES] + [c for c in wanted if c not in TARGETS]:
        ap.error(f"unknown shape or command: {', '.join(unknown)}")
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    try:
        gen_log.parse_size(args.size)
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    results = []
    try:
        if args.log:
            if not args.log.is_file():
                raise BenchError(f"{args.log}: not a file")
            results.append(measure("given", args.log.resolve(), args.runs, wanted))
        for shape in ([] if args.log else shapes):
            results.append(measure(shape, generated_log(shape, args.size, args.seed), args.runs, wanted))
            print(f"  {shape}: done", file=sys.stderr)
    except BenchError as exc:
        print(f"bench_throughput: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_report(results, wanted)
    ok = all(r["verdict_ok"] and all(c["ok"] for c in r["commands"].values()) for r in results)
    return 0 if ok or args.no_fail else 1


if __name__ == "__main__":
    sys.exit(main())
