#!/usr/bin/env python3
"""Cold start of `triage classify` on a small input, against a bare interpreter.

    python benchmarks/bench_cold_start.py [SAMPLE] [-n 10] [--json] [--strict]

Times `python -c pass` and `triage classify SAMPLE --json` (N runs each, interleaved,
with the `triage` script beside this interpreter when there is one, else PATH's / `-m triage`;
after one untimed warm-up of each), then runs the same command under `python -X importtime`
once and lists the modules it imported.

Targets: none of torch/pandas/requests imported; median wall < 0.1 s (on a 2-core
machine); median within 10x of `python -c pass`.
Exit codes: 0 targets met; 1 a heavy module was imported (or, with --strict, a timing
target missed); 2 triage failed or no sample was found.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _common import (
    REPO,
    BenchError,
    RunResult,
    check_verdict_run,
    machine_line,
    mark,
    median,
    run_timed,
    table,
    triage_command,
    verdict_class,
)

HEAVY = ("torch", "pandas", "requests")
# not forbidden, but worth seeing on a cold path
NOTABLE = ("numpy", "scipy", "rich", "jinja2", "yaml", "click", "pynvml", "prometheus_client",
           "urllib3", "httpx", "pydantic", "jsonschema")
WALL_TARGET_S = 0.1     # issue 24: <= 0.1 s median and <= 10x `python -c pass`
RATIO_TARGET = 10.0


def default_sample() -> Path:
    samples = REPO / "samples"
    dirs = sorted(p for p in samples.iterdir() if p.is_dir()) if samples.is_dir() else []
    if not dirs:
        raise BenchError(f"no sample directory under {samples}; pass a SAMPLE path")
    return dirs[0]


def cold_command() -> list[str]:
    """The `triage` console script of this interpreter's environment (what a user of the venv
    runs, and the entry point with the start-up fast path), else `triage_command()`."""
    script = Path(sys.executable).parent / "triage"
    return [str(script)] if script.is_file() else triage_command()


def time_runs(
    baseline: list[str], subject: list[str], runs: int
) -> tuple[list[float], list[float], RunResult]:
    """Interleaved runs so both commands see the same machine noise."""
    run_timed(baseline)
    check_verdict_run(run_timed(subject, cwd=REPO))  # warm-up; fails early with the tool's message
    base_t: list[float] = []
    subj_t: list[float] = []
    last: RunResult | None = None
    for _ in range(runs):
        base_t.append(run_timed(baseline).wall_s)
        last = run_timed(subject, cwd=REPO)
        check_verdict_run(last)
        subj_t.append(last.wall_s)
    assert last is not None
    return base_t, subj_t, last


def imported_modules(sample: Path) -> list[tuple[str, int]]:
    """(module, cumulative microseconds) from one `-X importtime` run."""
    entry = cold_command()
    if entry[0] != sys.executable:          # the console script: run it with -X importtime
        entry = [sys.executable, entry[0]]
    cmd = [entry[0], "-X", "importtime", *entry[1:], "classify", str(sample), "--json"]
    res = run_timed(cmd, cwd=REPO)
    other = "\n".join(line for line in res.stderr.splitlines() if not line.startswith("import time:"))
    check_verdict_run(RunResult(res.cmd, res.rc, res.wall_s, res.peak_rss_bytes, res.stdout, other))
    mods: list[tuple[str, int]] = []
    for line in res.stderr.splitlines():
        # "import time:       123 |        456 |     package.module"
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        if cumulative.isdigit():
            mods.append((name, int(cumulative)))
    if not mods:
        raise BenchError("`-X importtime` produced no import lines; cannot check imports")
    return mods


def matching(mods: list[tuple[str, int]], roots: tuple[str, ...]) -> list[str]:
    found = {name.split(".")[0] for name, _ in mods}
    return [r for r in roots if r in found]


def by_package(mods: list[tuple[str, int]]) -> dict[str, int]:
    """Largest cumulative import time seen under each top-level package."""
    out: dict[str, int] = {}
    for name, cumulative in mods:
        root = name.split(".")[0]
        out[root] = max(out.get(root, 0), cumulative)
    return out


def report(sample: Path, base: list[float], subj: list[float], mods: list[tuple[str, int]],
           verdict: str) -> dict[str, Any]:
    heavy = matching(mods, HEAVY)
    notable = matching(mods, NOTABLE)
    ratio = median(subj) / median(base)
    slowest = sorted(by_package(mods).items(), key=lambda kv: -kv[1])[:5]
    return {
        "sample": str(sample), "runs": len(subj), "verdict_class": verdict,
        "python_pass_s": {"min": min(base), "median": median(base)},
        "triage_s": {"min": min(subj), "median": median(subj)},
        "ratio_median": ratio,
        "modules_imported": len(mods),
        "heavy_imported": heavy, "notable_imported": notable,
        "slowest_packages_import_us": dict(slowest),
        "targets": {
            "no_heavy_imports": not heavy,
            "wall_median_lt_0.1s": median(subj) < WALL_TARGET_S,
            "ratio_le_10x": ratio <= RATIO_TARGET,
        },
    }


def print_report(r: dict[str, Any]) -> None:
    print(f"machine: {machine_line()}")
    print(f"sample:  {r['sample']}  (verdict class: {r['verdict_class']}, {r['runs']} runs each)\n")
    p, t = r["python_pass_s"], r["triage_s"]
    print(table(["command", "min s", "median s"], [
        ["python -c pass", f"{p['min']:.3f}", f"{p['median']:.3f}"],
        ["triage classify SAMPLE --json", f"{t['min']:.3f}", f"{t['median']:.3f}"],
    ]))
    print()
    tg = r["targets"]
    print(table(["target", "value", "result"], [
        ["no torch/pandas/requests imported", ", ".join(r["heavy_imported"]) or "none",
         mark(tg["no_heavy_imports"])],
        [f"median wall < {WALL_TARGET_S} s", f"{t['median']:.3f} s", mark(tg["wall_median_lt_0.1s"])],
        [f"median ratio <= {RATIO_TARGET:.0f}x python -c pass", f"{r['ratio_median']:.1f}x",
         mark(tg["ratio_le_10x"])],
    ]))
    print(f"\nmodules imported: {r['modules_imported']}; notable: "
          f"{', '.join(r['notable_imported']) or 'none'}")
    slow = ", ".join(f"{k} {v / 1000:.1f} ms" for k, v in r["slowest_packages_import_us"].items())
    print(f"slowest packages to import (cumulative): {slow}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Cold-start benchmark for `triage classify`.")
    ap.add_argument("sample", nargs="?", type=Path,
                    help="input to classify (default: first directory under samples/)")
    ap.add_argument("-n", "--runs", type=int, default=10, help="timed runs of each command (default 10)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--strict", action="store_true", help="also fail when a timing target is missed")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    try:
        sample = (args.sample or default_sample()).resolve()
        if not sample.exists():
            raise BenchError(f"{sample}: no such file or directory")
        subject = [*cold_command(), "classify", str(sample), "--json"]
        base, subj, last = time_runs([sys.executable, "-c", "pass"], subject, args.runs)
        mods = imported_modules(sample)
    except BenchError as exc:
        print(f"bench_cold_start: {exc}", file=sys.stderr)
        return 2
    r = report(sample, base, subj, mods, verdict_class(check_verdict_run(last)))
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print_report(r)
    tg = r["targets"]
    if not tg["no_heavy_imports"]:
        print(f"bench_cold_start: heavy modules imported: {', '.join(r['heavy_imported'])}",
              file=sys.stderr)
        return 1
    if args.strict and not all(tg.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
