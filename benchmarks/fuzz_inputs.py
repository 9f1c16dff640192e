"""Long fuzz run over every input kind through the CLI's commands, in process.

    python benchmarks/fuzz_inputs.py --count 25000 --seed 1 [--jobs 2] [--slow 5] [--only N]

Each input is a mutated sample (tests/fuzzkit.py) of one kind: a server log of every engine
(plain and .gz), a /metrics scrape, memory_stats JSON, memory_summary, nvidia-smi CSV and table,
dmesg, kubectl pod and events JSON, an Alertmanager payload; an incident bundle directory with
its incident.yaml, notes.jsonl, actions.jsonl or an evidence file mutated; or such a bundle
packed as .tar.gz or .zip, with hostile member names (absolute, `..`, backslashes, `C:foo`,
NULs, empty names, `.`, links, FIFOs, devices) and sometimes damaged archive bytes. A file goes
through `classify` and `classify --json` (sometimes on stdin too); a bundle or archive through
three of classify, classify --json, timeline (plain, --json, --csv), postmortem and the
recover dry-run plan (--json too), picked per input.

Per input it records each command's exit code and time, an internal error (the CLI's
"internal error:" line, or an exception click let through), --json stdout that is not JSON, a
command over --slow seconds, and files created outside the case's folder (the sentinel folder
/tmp/triage-fuzz-escape-*/ that hostile names point at, the working directory), beside the input,
or left in the temporary folder after the command ended. The last line is the summary; exit 1
when any of its counts is not 0. Case N of a seed is always the same input: `--only N` replays it
and prints what each command did.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import fuzzkit  # noqa: E402

CHUNK = 25                   # cases handed to a worker at a time: small, so the workers finish together


class Timeout(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` in the code under test eats it."""


@dataclass
class Options:
    seed: int
    slow: float
    timeout: int
    long_cap: int
    per_bundle: int
    run_dir: str = ""        # every worker's folders go beneath it; removed when the run ends


@dataclass
class Finding:
    """One run (or case) that broke a rule, kept small to cross the process boundary."""
    rule: str                # internal_error, bad_json, slow, timeout, escaped, stray, left
    case: str                # Case.describe()
    command: str
    detail: str


@dataclass
class CaseSummary:
    index: int
    kind: str
    inputs_seconds: float
    runs: list[tuple[str, int, float]] = field(default_factory=list)    # (command, exit code, seconds)
    findings: list[Finding] = field(default_factory=list)


# -- one worker ----------------------------------------------------------------------------------

_STATE: dict[str, object] = {}


def _alarm(signum, frame):
    raise Timeout


@contextmanager
def _limit(seconds: int, command: str) -> Iterator[None]:
    _STATE["running"] = command                 # named in the finding if the alarm goes off
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)


def _setup(opts: Options) -> None:
    """A private HOME, working directory, audit key and sentinel per worker: a finding is this
    case's, and nothing the run does lands in the real home."""
    base = Path(tempfile.mkdtemp(prefix="worker-", dir=opts.run_dir))
    for sub in ("home", "cwd", "work"):
        (base / sub).mkdir()
    os.environ.update(HOME=str(base / "home"), TRIAGE_KEY_FILE=str(base / "home" / "audit.key"), COLUMNS="100",
                      NO_COLOR="1")
    os.chdir(base / "cwd")
    signal.signal(signal.SIGALRM, _alarm)
    _STATE.update(opts=opts, base=base, kinds=fuzzkit.by_kind(),
                  sentinel=fuzzkit.make_sentinel(str(base)))


def _findings(outcome: fuzzkit.Outcome, opts: Options) -> list[Finding]:
    what = outcome.case.describe()
    out: list[Finding] = []
    for run in outcome.runs:
        if run.timed_out:
            out.append(Finding("timeout", what, run.command, f"given up after {opts.timeout} s"))
        if run.internal_error:
            out.append(Finding("internal_error", what, run.command, run.internal_error))
        if run.bad_json:
            out.append(Finding("bad_json", what, run.command, run.bad_json))
        if run.seconds > opts.slow:
            out.append(Finding("slow", what, run.command, f"{run.seconds:.1f} s"))
    out += [Finding("escaped", what, "", p) for p in outcome.escaped]
    out += [Finding("stray", what, "", p) for p in outcome.stray]
    out += [Finding("left", what, "", p) for p in outcome.left]
    return out


def _one(index: int) -> CaseSummary:
    opts: Options = _STATE["opts"]              # type: ignore[assignment]
    kinds = _STATE["kinds"]
    case = fuzzkit.make_case(opts.seed, index, kinds, commands_per_bundle=opts.per_bundle)   # type: ignore[arg-type]
    started = time.monotonic()
    try:
        outcome = _run_guarded(case, opts)
    except Timeout:
        outcome = _timed_out(case, opts)
    except Exception as exc:       # the harness itself (building the input): reported, the run goes on
        outcome = fuzzkit.Outcome(case, [fuzzkit.Run("build", -1, 0.0, internal_error=f"harness: {exc!r}")])
    summary = CaseSummary(index, case.kind, time.monotonic() - started,
                          [(r.command, r.exit_code, r.seconds) for r in outcome.runs])
    summary.findings = _findings(outcome, opts)
    return summary


def _timed_out(case: fuzzkit.Case, opts: Options) -> fuzzkit.Outcome:
    command = str(_STATE.get("running", "?"))
    return fuzzkit.Outcome(case, [fuzzkit.Run(command, -1, float(opts.timeout), timed_out=True)])


def _chunk(indices: list[int]) -> list[CaseSummary]:
    return [_one(i) for i in indices]


def _run_guarded(case: fuzzkit.Case, opts: Options) -> fuzzkit.Outcome:
    """The case, each command under the alarm (a hang is a finding, not the end of the run)."""
    return fuzzkit.run_case(case, _STATE["base"] / "work", _STATE["sentinel"],    # type: ignore[operator]
                            long_cap=opts.long_cap, guard=lambda name: _limit(opts.timeout, name))


# -- the run -------------------------------------------------------------------------------------

@dataclass
class Totals:
    inputs: int = 0
    runs: int = 0
    per_kind: Counter = field(default_factory=Counter)
    per_command: Counter = field(default_factory=Counter)
    exits: Counter = field(default_factory=Counter)
    findings: dict[str, list[Finding]] = field(default_factory=lambda: defaultdict(list))
    slowest: list[tuple[float, str]] = field(default_factory=list)

    def add(self, s: CaseSummary) -> None:
        self.inputs += 1
        self.per_kind[s.kind] += 1
        for command, code, seconds in s.runs:
            self.runs += 1
            self.per_command[command] += 1
            self.exits[(command, code)] += 1
        for f in s.findings:
            self.findings[f.rule].append(f)
        self.slowest = sorted(self.slowest + [(max((r[2] for r in s.runs), default=0.0), f"#{s.index} {s.kind}")],
                              reverse=True)[:5]

    def count(self, rule: str) -> int:
        return len(self.findings.get(rule, []))


def _chunks(count: int) -> list[list[int]]:
    return [list(range(i, min(i + CHUNK, count))) for i in range(0, count, CHUNK)]


def run_all(count: int, jobs: int, opts: Options) -> tuple[Totals, float]:
    totals = Totals()
    started = time.monotonic()
    step = max(1000, count // 25)
    if jobs <= 1:
        _setup(opts)
        results: Iterator[list[CaseSummary]] = map(_chunk, _chunks(count))
        pool = None
    else:
        # A fresh worker now and then: caches that grow with every distinct input stay bounded.
        pool = multiprocessing.get_context("fork").Pool(jobs, initializer=_setup, initargs=(opts,),
                                                        maxtasksperchild=100)
        results = pool.imap_unordered(_chunk, _chunks(count))
    try:
        for batch in results:
            for summary in batch:
                totals.add(summary)
                if totals.inputs % step == 0:
                    print(f"... {totals.inputs} inputs, {totals.runs} runs, "
                          f"{sum(len(v) for v in totals.findings.values())} findings, "
                          f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return totals, time.monotonic() - started


RULES = (("internal_error", "internal errors"), ("bad_json", "invalid --json documents"),
         ("slow", "runs over {slow:g} s"), ("timeout", "runs given up after {timeout} s"),
         ("escaped", "files created outside the case folder"), ("stray", "files written beside the input"),
         ("left", "temporary files left behind"))


def report(totals: Totals, took: float, args: argparse.Namespace) -> int:
    print(f"inputs: {totals.inputs}, command runs: {totals.runs}, in {took:.0f} s with {args.jobs} job(s) "
          f"(seed {args.seed})")
    print("inputs per kind:")
    for kind, n in sorted(totals.per_kind.items()):
        print(f"  {kind:20s} {n:6d}")
    print("runs per command (exit code: runs):")
    for command, n in sorted(totals.per_command.items()):
        codes = ", ".join(f"{code}: {m}" for (c, code), m in sorted(totals.exits.items()) if c == command)
        print(f"  {command:20s} {n:6d}   {codes}")
    print("slowest inputs: " + ", ".join(f"{s:.2f} s {what}" for s, what in totals.slowest))
    for rule, label in RULES:
        found = totals.findings.get(rule, [])
        if not found:
            continue
        print(f"{label.format(slow=args.slow, timeout=args.timeout)}: {len(found)}")
        groups: dict[tuple[str, str], list[Finding]] = defaultdict(list)
        for f in found:
            groups[(f.command, _shape(f.detail))].append(f)
        for (command, shape), fs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:15]:
            print(f"  {len(fs):5d} {command or '-'}: {fs[0].detail[:200]}")
            print(f"        e.g. {fs[0].case[:400]}")
    counts = {rule: totals.count(rule) for rule, _ in RULES}
    print(f"SUMMARY inputs={totals.inputs} runs={totals.runs} internal_errors={counts['internal_error']} "
          f"invalid_json={counts['bad_json']} over_{args.slow:g}s={counts['slow']} timeouts={counts['timeout']} "
          f"escaped={counts['escaped']} stray={counts['stray']} temp_left={counts['left']} seconds={took:.0f}")
    return 1 if any(counts.values()) else 0


def _shape(detail: str) -> str:
    """A finding's text with case-specific parts (paths, numbers) blurred, to group alike ones."""
    import re

    return re.sub(r"/tmp/[^\s:'\"]+|\d+", "#", detail)[:120]


def replay(index: int, opts: Options) -> int:
    """One case, every command's exit code, time and finding printed."""
    _setup(opts)
    case = fuzzkit.make_case(opts.seed, index, _STATE["kinds"], commands_per_bundle=opts.per_bundle)  # type: ignore[arg-type]
    print(case.describe())
    try:
        outcome = _run_guarded(case, opts)
    except Timeout:
        outcome = _timed_out(case, opts)
    for run in outcome.runs:
        print(f"  {run.command:18s} exit {run.exit_code}  {run.seconds:.2f} s  "
              f"{run.internal_error or ''} {run.bad_json or ''}".rstrip())
    for f in _findings(outcome, opts):
        print(f"  {f.rule}: {f.detail}")
    return 1 if _findings(outcome, opts) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", "--examples", type=int, default=2000, help="inputs to run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--slow", type=float, default=5.0, help="count runs slower than this (s)")
    ap.add_argument("--timeout", type=int, default=60, help="give up on one command after this many seconds")
    ap.add_argument("--long-cap", type=int, default=20_000, help="longest inserted line (bytes)")
    ap.add_argument("--per-bundle", type=int, default=3, help="commands each bundle or archive input runs")
    ap.add_argument("--only", type=int, help="replay this one case and print what each command did")
    args = ap.parse_args()
    run_dir = tempfile.mkdtemp(prefix="triage-fuzz-run-")
    opts = Options(args.seed, args.slow, args.timeout, args.long_cap, args.per_bundle, run_dir)
    try:
        if args.only is not None:
            return replay(args.only, opts)
        totals, took = run_all(args.count, args.jobs, opts)
        return report(totals, took, args)
    finally:
        os.chdir(REPO)
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
