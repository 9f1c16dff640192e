#!/usr/bin/env python3
"""Fleet classification against a real Prometheus: `triage classify --prometheus URL`.

    python benchmarks/bench_fleet.py [--instances 200] [--hours 1] [--step 15] [-n 3] [--keep DIR] [--json]

Writes the series of a fleet (tests/fleetkit.py: vLLM V1 gauges and counters, `up`, process
start times, cache_config_info and DCGM framebuffer series; most servers healthy, the rest
failing as burst, chronic, prefix-cache and start-up OOMs) as OpenMetrics text with one sample
every --step seconds over --hours, builds TSDB blocks from it with `promtool tsdb
create-blocks-from openmetrics`, starts `prometheus` on a free loopback port over those blocks
(retention long enough to keep them), and times `triage classify --prometheus URL --start T
--end T --json` (best of -n runs): wall time and the peak RSS of the triage process.

Target: 200 instances x 1 h at 15 s resolution in under 10 s.
Exit codes: 0 target met; 1 target missed or a wrong answer; 2 a tool is missing or failed.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, BenchError, machine_line, mark, run_timed, table, triage_command

sys.path.insert(0, str(REPO))

from tests import fleetkit as fk  # noqa: E402

WALL_TARGET_S = 10.0
T0 = 1773324000.0        # 2026-03-12T14:00:00Z


def build_fleet(instances: int, hours: float, step: float) -> tuple[fk.Fleet, dict[str, str]]:
    """The fleet's series and the class each instance should get."""
    f = fk.Fleet()
    end = T0 + hours * 3600
    ts = fk.times(T0, end, step)
    expected: dict[str, str] = {}
    for i in range(instances):
        name = f"gpu-node-{i:03d}:8000"
        server = f.server(name, "vllm")
        kind = i % 10
        if kind == 0:
            fk.burst(server, ts, T0 + (0.5 + 0.4 * (i % 7) / 7) * (end - T0))
            expected[name] = "burst"
        elif kind == 1:
            fk.startup_loop(server, ts, T0 + 0.3 * (end - T0), cycle=80 + i % 30)
            expected[name] = "startup"
        elif kind == 2:
            fk.prefix_stall(server, ts[-max(8, len(ts) // 3):])
            expected[name] = "prefix_cache"
        else:
            fk.healthy(server, ts)
            expected[name] = "no_oom"
    return f, expected


def measure(instances: int, hours: float, step: float, runs: int, keep: Path | None) -> dict[str, Any]:
    missing = fk.tools_missing()
    if missing:
        raise BenchError(missing)
    with tempfile.TemporaryDirectory(prefix="triage-bench-fleet-") as tmp:
        root = keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        fleet, expected = build_fleet(instances, hours, step)
        om = fk.write_openmetrics(fleet, root / "fleet.om")
        gen_s = time.perf_counter() - t
        samples = sum(len(p) for p in fleet.series.values())
        t = time.perf_counter()
        data = fk.build_tsdb(om, root / "data")
        tsdb_s = time.perf_counter() - t
        with fk.Prometheus(data) as prom:
            prom.wait_ready()
            cmd = [*triage_command(), "classify", "--prometheus", prom.url, "--selector", '{job="vllm"}',
                   "--start", str(T0), "--end", str(T0 + hours * 3600), "--step", f"{step:g}s", "--json"]
            results, cpu = [], []
            for _ in range(runs):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                results.append(run_timed(cmd, cwd=REPO))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)     # triage's, through its launcher
                cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        best_i = min(range(len(results)), key=lambda i: results[i].wall_s)
        best = results[best_i]
        if best.rc not in (0, 3):
            raise BenchError(f"triage exited {best.rc}: {best.stderr.strip()[-2000:]}")
        doc = json.loads(best.stdout)
        got = {i["instance"]: i["class"] for i in doc["instances"]}
        wrong = {k: (v, got.get(k)) for k, v in expected.items() if got.get(k) != v}
        return {
            "instances": instances, "hours": hours, "step_s": step, "samples": samples,
            "openmetrics_bytes": om.stat().st_size, "generate_s": gen_s, "promtool_s": tsdb_s,
            "runs": [r.wall_s for r in results], "wall_s": best.wall_s, "cpu_s": cpu[best_i],
            "peak_rss_bytes": best.peak_rss_bytes, "load_average": os.getloadavg()[0],
            "summary": doc["summary"], "counts": doc["counts"], "wrong": wrong,
            "targets": {f"wall_lt_{WALL_TARGET_S:g}s": best.wall_s < WALL_TARGET_S, "every_class_right": not wrong},
        }


def print_report(r: dict[str, Any]) -> None:
    print(f"machine: {machine_line()}; load average {r['load_average']:.2f} at the end")
    print(f"fleet:   {r['instances']} instances x {r['hours']:g} h at {r['step_s']:g} s: {r['samples']:,} samples, "
          f"{r['openmetrics_bytes'] / 1e6:.1f} MB of OpenMetrics (written in {r['generate_s']:.1f} s; promtool "
          f"{r['promtool_s']:.1f} s)\n")
    rss = r["peak_rss_bytes"]
    print(table(["triage classify --prometheus ... --json", "value"], [
        ["wall time, best of runs", f"{r['wall_s']:.2f} s  ({', '.join(f'{w:.2f}' for w in r['runs'])})"],
        ["CPU time of that run (user + system)", f"{r['cpu_s']:.2f} s"],
        ["peak RSS", f"{rss / 1e6:.0f} MB" if rss else "n/a"],
        ["summary", r["summary"]],
    ]))
    print()
    t = r["targets"]
    print(table(["target", "result"], [
        [f"wall < {WALL_TARGET_S:g} s", mark(t[f"wall_lt_{WALL_TARGET_S:g}s"])],
        ["every instance's class as generated", mark(t["every_class_right"])],
    ]))
    for inst, (want, got) in list(r["wrong"].items())[:10]:
        print(f"  {inst}: expected {want}, got {got}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--step", type=float, default=15.0, help="seconds between samples (and the query step)")
    ap.add_argument("-n", "--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the OpenMetrics file and the TSDB here (kept)")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = ap.parse_args()
    try:
        r = measure(args.instances, args.hours, args.step, max(1, args.runs), args.keep)
    except (BenchError, RuntimeError) as exc:
        print(f"bench_fleet: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print_report(r)
    return 0 if all(r["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
