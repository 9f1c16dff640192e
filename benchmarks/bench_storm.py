#!/usr/bin/env python3
"""classify / timeline / postmortem on a big log, against a multi-pattern grep, in one run.

    python benchmarks/bench_storm.py [--shape storm|probes|dead|v1] [--size 600M] [--seed 0]
                                     [--runs 3] [--keep] [--json] [--no-fail]

The log is benchmarks/out/<shape>-<SIZE>-seed<N>.log (v1: vllm-<SIZE>-seed<N>.log, the file
bench_throughput.py --generate makes), written by gen_storm.py (storm, probes) or gen_log.py
(v1) unless a file within 1 % of that size is already there. A bundle beside it,
<log>.bundle/, holds the log as logs/vllm.log (a symlink) and an incident.yaml whose `created`
is the log's last time. The page cache is warmed by one full read, then N rounds each run

    grep -n -F -e ' ERROR ' -e ' WARNING ' ... -e 'startup' LOG > /dev/null
    grep -n -F -e ' ERROR ' -e ' WARNING ' ... -e 'startup' LOG | (read and discard)
    triage classify LOG --json
    triage timeline BUNDLE --json
    triage postmortem BUNDLE -o TMP/postmortem.md

keeping each command's best wall time and its highest peak RSS (the child's own, from wait4).
The first grep is that command written to /dev/null, shown for information only: GNU grep sees
that its stdout is /dev/null and stops at its first match (line 2 here, `gpu_memory_utilization`
or `non-default args`), so it times nothing. The baseline of the ratios is the second, the same
grep writing all its numbered matching lines into a pipe that this script drains.
Each run is checked, not just timed: the verdict class must be the shape's (storm, dead, v1:
burst; probes: no_oom), the timeline must hold the OOM (storm, dead, v1) or no failure (probes) and count
as many preemption warnings as `grep -c 'is preempted by'` finds, and the postmortem must name
the verdict.

Targets: classify <= 2x grep and < 200 MB; timeline and postmortem <= 5x grep and < 300 MB
(MB = 10^6 bytes). A log this run generated is deleted at the end unless --keep (a reused one
is left). Exit codes: 0 targets met; 1 a time or memory target missed (0 with --no-fail);
2 setup failed, a command failed, or an output is wrong (never excused by --no-fail).
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import gen_log
import gen_storm
from _common import (
    REPO,
    BenchError,
    RunResult,
    check_verdict_run,
    machine_line,
    run_timed,
    table,
    triage_command,
    verdict_class,
)
from bench_throughput import warm_page_cache

OUT_DIR = REPO / "benchmarks" / "out"
SIZE_TOLERANCE = 0.01
# shape -> (expected verdict class, the year the generator's year-less times belong to)
SHAPES = {"storm": ("burst", gen_storm.YEAR), "probes": ("no_oom", gen_storm.YEAR), "dead": ("burst", gen_storm.YEAR),
          "v1": ("burst", gen_log.START.year)}
GREP_PATTERNS = [" ERROR ", " WARNING ", "throughput", "KV cache", "rror", "emory", "Traceback", "Killed",
                 "Xid", "non-default", "startup"]
# command -> (max wall time as a multiple of grep's, max peak RSS in bytes)
TARGETS = {"classify": (2.0, 200 * 10**6), "timeline": (5.0, 300 * 10**6), "postmortem": (5.0, 300 * 10**6)}
_STAMP = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) ")
TAIL_BYTES = 1 << 20
PREEMPTION = "is preempted by"   # the V0 warning: the timeline's preemption count must match grep's


# --- the log and its bundle -----------------------------------------------------------


def log_path(shape: str, size_text: str, seed: int) -> Path:
    prefix = "vllm" if shape == "v1" else shape
    return OUT_DIR / f"{prefix}-{size_text.upper()}-seed{seed}.log"


def ensure_log(shape: str, size_text: str, seed: int) -> tuple[Path, bool]:
    """(the log, whether this run generated it)."""
    size = gen_log.parse_size(size_text)
    path = log_path(shape, size_text, seed)
    if path.is_file() and abs(path.stat().st_size - size) <= size * SIZE_TOLERANCE:
        print(f"using existing {path.relative_to(REPO)}", file=sys.stderr)
        return path, False
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    print(f"generating {path.relative_to(REPO)} ({shape}, {size_text}) ...", file=sys.stderr)
    t0 = time.perf_counter()
    if shape == "v1":
        gen_log.generate(path, size, seed)
    else:
        gen_storm.generate(path, size, seed, shape)
    print(f"  done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path, True


def last_time(log: Path, year: int) -> datetime:
    """The last vLLM timestamp in the log's final MiB (the crash, or the last stats line)."""
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - TAIL_BYTES))
        stamps = _STAMP.findall(f.read())
    if not stamps:
        raise BenchError(f"{log}: no vLLM timestamp in its last {TAIL_BYTES >> 20} MiB")
    return datetime.strptime(f"{year}-{stamps[-1].decode()}", "%Y-%m-%d %H:%M:%S")


def make_bundle(log: Path, shape: str, year: int) -> Path:
    """<log>.bundle/ with logs/vllm.log -> LOG and an incident.yaml; made afresh each run."""
    bundle = log.with_name(log.name + ".bundle")
    if bundle.exists():
        shutil.rmtree(bundle)   # removes the symlink, never the log it points to
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "vllm.log").symlink_to(log.resolve())
    created = last_time(log, year).strftime("%Y-%m-%dT%H:%M:%SZ")
    (bundle / "incident.yaml").write_text(
        f"id: BENCH-{shape}\n"
        f'title: "benchmark: generated {shape} log ({log.stat().st_size:,} bytes)"\n'
        "severity: sev3\nservice: bench\ntimezone: UTC\n"
        f'created: "{created}"\nlinks: []\n', encoding="utf-8")
    return bundle


# --- runs and checks ------------------------------------------------------------------


@dataclass
class Measure:
    name: str
    cmd: list[str]
    stdout: str
    walls: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.walls)

    @property
    def peak(self) -> int | None:
        return max(self.rss) if self.rss else None


def commands(log: Path, bundle: Path, pm_out: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, what stdout is: see _common.run_timed)."""
    grep = shutil.which("grep")
    if not grep:
        raise BenchError("grep is not on PATH")
    triage = triage_command()
    grep_cmd = [grep, "-n", "-F", *(a for p in GREP_PATTERNS for a in ("-e", p)), str(log)]
    return {
        "grep_devnull": (grep_cmd, "devnull"),
        "grep": (grep_cmd, "drain"),
        "classify": ([*triage, "classify", str(log), "--json"], "capture"),
        "timeline": ([*triage, "timeline", str(bundle), "--json"], "capture"),
        "postmortem": ([*triage, "postmortem", str(bundle), "-o", str(pm_out)], "capture"),
    }


def failed(res: RunResult, what: str) -> BenchError:
    out = (res.stderr or res.stdout).strip().splitlines()[-15:]
    return BenchError(f"{what}: `{shlex.join(res.cmd)}` exited {res.rc}\n" + "\n".join("    " + s for s in out))


def count_lines(log: Path, literal: str) -> int:
    """Lines of LOG holding `literal` (grep -c -F, untimed)."""
    proc = subprocess.run([shutil.which("grep") or "grep", "-c", "-F", literal, str(log)],
                          capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise BenchError(f"grep -c failed: {proc.stderr.strip()}")
    return int(proc.stdout.strip() or 0)


def check_timeline(res: RunResult, expect_oom: bool, preemptions: int, problems: list[str]) -> dict[str, Any]:
    if res.rc != 0:
        raise failed(res, "triage timeline failed")
    try:
        doc = json.loads(res.stdout)
    except ValueError as exc:
        raise BenchError(f"triage timeline did not print JSON ({exc})") from None
    events = doc.get("events") or []
    kinds = [e.get("kind") for e in events if isinstance(e, dict)]
    failures = [e for e in events if isinstance(e, dict) and e.get("category") == "failure"]
    preempt = sum(int(e.get("count") or 1) for e in events if isinstance(e, dict) and e.get("kind") == "preemption")
    impact = ((doc.get("moments") or {}).get("impact_start") or {}).get("time")
    if doc.get("schema") != "triage.timeline/v1":
        problems.append(f"timeline: schema {doc.get('schema')!r}, not triage.timeline/v1")
    if expect_oom and ("gpu_oom" not in kinds or impact is None):
        problems.append("timeline: no gpu_oom event / impact start, but the log ends in a torch OOM")
    if not expect_oom and failures:
        problems.append(f"timeline: {len(failures)} failure event(s) in a log without a failure")
    if preempt != preemptions:
        problems.append(f"timeline: {preempt:,} preemption warnings, the log holds {preemptions:,}")
    return {"events": len(events), "failure_events": len(failures), "gpu_oom": "gpu_oom" in kinds,
            "impact_start": impact, "preemption_warnings": preempt, "preemption_lines_in_log": preemptions}


def check_postmortem(res: RunResult, path: Path, expected: str, problems: list[str]) -> None:
    if res.rc != 0:
        raise failed(res, "triage postmortem failed")
    if not path.is_file() or path.stat().st_size == 0:
        problems.append(f"postmortem: {path.name} was not written")
    elif f"`{expected}`" not in path.read_text(encoding="utf-8", errors="replace"):
        problems.append(f"postmortem: does not name the verdict `{expected}`")


def measure(log: Path, bundle: Path, shape: str, runs: int) -> dict[str, Any]:
    expected = SHAPES[shape][0]
    problems: list[str] = []
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    warm_s = warm_page_cache(log)
    preemptions = count_lines(log, PREEMPTION)
    with tempfile.TemporaryDirectory(prefix="bench-storm-") as tmp:
        pm_out = Path(tmp) / "postmortem.md"
        cmds = commands(log, bundle, pm_out)
        ms = {name: Measure(name, cmd, out) for name, (cmd, out) in cmds.items()}
        got_class, timeline_info = "?", {}
        for _ in range(runs):   # interleaved rounds: drift of the machine hits every command alike
            for name, m in ms.items():
                if name == "postmortem":
                    pm_out.unlink(missing_ok=True)
                res = run_timed(m.cmd, cwd=REPO, stdout=m.stdout)
                if name.startswith("grep"):
                    if res.rc not in (0, 1):
                        raise failed(res, "grep failed")
                elif name == "classify":
                    got_class = verdict_class(check_verdict_run(res))
                    if got_class != expected:
                        problems.append(f"classify: verdict class {got_class!r}, expected {expected!r}")
                elif name == "timeline":
                    timeline_info = check_timeline(res, expected != "no_oom", preemptions, problems)
                else:
                    check_postmortem(res, pm_out, expected, problems)
                m.walls.append(res.wall_s)
                if res.peak_rss_bytes is not None:
                    m.rss.append(res.peak_rss_bytes)
    problems = list(dict.fromkeys(problems))   # the same message from every round, once
    grep_s = ms["grep"].best
    size = log.stat().st_size
    rows: dict[str, Any] = {}
    for name, m in ms.items():
        row: dict[str, Any] = {"cmd": shlex.join(m.cmd), "stdout": m.stdout, "best_s": m.best, "walls_s": m.walls,
                               "x_grep": m.best / grep_s, "mb_per_s": size / m.best / 1e6,
                               "peak_rss_bytes": m.peak}
        if name in TARGETS:
            max_x, max_rss = TARGETS[name]
            row["target"] = {"max_x_grep": max_x, "max_rss_bytes": max_rss,
                             "time_ok": m.best / grep_s <= max_x,
                             "rss_ok": m.peak is not None and m.peak < max_rss}
        rows[name] = row
    return {
        "shape": shape, "log": str(log), "bytes": size, "runs": runs, "warm_read_s": warm_s,
        "machine": machine_line(), "started": started,
        "expected_class": expected, "verdict_class": got_class, "timeline": timeline_info,
        "commands": rows, "problems": problems,
        "targets_met": all(r["target"]["time_ok"] and r["target"]["rss_ok"] for r in rows.values() if "target" in r),
    }


# --- report ---------------------------------------------------------------------------


def print_report(r: dict[str, Any]) -> None:
    print(f"machine: {r['machine']}; started {r['started']}")
    print(f"log:     {r['log']} ({r['shape']}, {r['bytes'] / 1e6:,.0f} MB; warm read {r['warm_read_s']:.2f} s)")
    ok = r["verdict_class"] == r["expected_class"]
    print(f"verdict: class {r['verdict_class']} (expected {r['expected_class']}: {'PASS' if ok else 'FAIL'})")
    tl = r["timeline"]
    if tl:
        print(f"timeline: {tl['events']} events, {tl['failure_events']} failure(s), gpu_oom {tl['gpu_oom']}, "
              f"impact start {tl['impact_start']}, preemption warnings {tl['preemption_warnings']:,} "
              f"(grep -c: {tl['preemption_lines_in_log']:,})")
    print()
    header = ["command", f"best of {r['runs']} s", "x grep", "MB/s", "peak RSS MB", "target", "result"]
    rows = []
    for name, row in r["commands"].items():
        peak = row["peak_rss_bytes"]
        peak_txt = f"{peak / 1e6:.0f}" if peak is not None else "n/a"
        tg = row.get("target")
        target = f"<= {tg['max_x_grep']:g}x, < {tg['max_rss_bytes'] // 10**6} MB" if tg else ""
        result = ("PASS" if tg["time_ok"] and tg["rss_ok"] else
                  "FAIL (" + ", ".join(w for w, bad in (("time", not tg["time_ok"]), ("RSS", not tg["rss_ok"]))
                                       if bad) + ")") if tg else ""
        label = {"grep_devnull": "grep -n -F ... > /dev/null (info)", "grep": "grep -n -F ... | drain (baseline)"
                 }.get(name, f"triage {name}")
        rows.append([label, f"{row['best_s']:.3f}", f"{row['x_grep']:.1f}", f"{row['mb_per_s']:,.0f}",
                     peak_txt, target, result])
    print(table(header, rows))
    print("(> /dev/null: GNU grep stops at its first match when stdout is /dev/null; the ratios are to the "
          "drained grep)")
    for p in r["problems"]:
        print(f"WRONG OUTPUT: {p}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="classify / timeline / postmortem against grep on a big log.")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="storm",
                    help="storm (V0 preemption storm, default), probes (V0, /metrics and /health only), "
                         "dead (V0, every request after the crash failing with a traceback), "
                         "v1 (gen_log.py's 0.11 log)")
    ap.add_argument("--size", default="600M", help="log size, e.g. 100M, 1G (default 600M)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    ap.add_argument("--runs", type=int, default=3, help="timed rounds, best kept (default 3; 1 allowed)")
    ap.add_argument("--keep", action="store_true", help="keep the generated log and bundle in benchmarks/out/")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 when only a time/memory target is missed")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    try:
        gen_log.parse_size(args.size)
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    log = bundle = None
    generated = False
    try:
        log, generated = ensure_log(args.shape, args.size, args.seed)
        bundle = make_bundle(log, args.shape, SHAPES[args.shape][1])
        r = measure(log, bundle, args.shape, args.runs)
    except BenchError as exc:
        print(f"bench_storm: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            if bundle is not None and bundle.exists():
                shutil.rmtree(bundle)
            if generated and log is not None:
                log.unlink(missing_ok=True)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print_report(r)
    if r["problems"]:
        return 2
    if not r["targets_met"] and not args.no_fail:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
