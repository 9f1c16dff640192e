"""Long fuzz run over every input kind: mutated samples through the library's entry points.

    python benchmarks/fuzz_inputs.py --examples 20000 [--seed 1] [--slow 5]

Each example takes a sample of one input kind (server logs of every engine, /metrics,
memory_stats JSON and JSON Lines, memory_summary, nvidia-smi CSV and table, dmesg, kubectl pod
and events JSON, Alertmanager payloads, incident.yaml, notes.jsonl, actions.jsonl), applies one
to three mutations (tests/fuzzkit.py) and runs what the CLI runs on it: classify (with --json
and --explain rendering), and for bundle members the timeline and the postmortem. Prints the
inputs per kind and per parser, the exceptions that escaped other than TriageError (grouped by
type and the innermost project frame), and the inputs slower than --slow seconds. Exit status 1
when any exception escaped. Unlike the suite's test it does not stop at the first failure.
"""
from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import fuzzkit  # noqa: E402
from triage.errors import TriageError  # noqa: E402


class _Timeout(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` in the code under test eats it."""


def _alarm(signum, frame):
    raise _Timeout


def _where(exc: BaseException) -> str:
    """The innermost frame inside the project: where the exception escaped from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/triage/" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.split('/triage/')[-1]}:{f.lineno} {f.name}"


def _mutations(rng: random.Random) -> list[fuzzkit.Mutation]:
    return [(rng.choice(fuzzkit.OPS), rng.randrange(1 << 20), rng.randrange(1 << 12))
            for _ in range(rng.randint(1, 3))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slow", type=float, default=5.0, help="report inputs slower than this (s)")
    ap.add_argument("--timeout", type=int, default=20, help="give up on one input after this many seconds")
    ap.add_argument("--long-cap", type=int, default=20_000, help="longest inserted line (bytes)")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    kinds = fuzzkit.by_kind()
    names = sorted(kinds)
    workdir = fuzzkit.scratch()
    per_kind: Counter[str] = Counter()
    per_parser: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    escaped: dict[tuple[str, str], list] = defaultdict(list)
    slow: list[tuple[float, str, list]] = []
    timed_out: list[tuple[str, list]] = []
    signal.signal(signal.SIGALRM, _alarm)
    started = time.monotonic()
    for i in range(args.examples):
        seed = rng.choice(kinds[rng.choice(names)])
        muts = _mutations(rng)
        data = fuzzkit.apply(seed, muts, long_cap=args.long_cap)
        per_kind[seed.kind] += 1
        t0 = time.monotonic()
        signal.alarm(args.timeout)
        try:
            per_parser[fuzzkit.run_one(seed, data, workdir)] += 1
        except _Timeout:
            timed_out.append((seed.kind, muts))
        except TriageError:
            refused[seed.kind] += 1
        except Exception as exc:  # the finding: anything but the project's error type
            escaped[(type(exc).__name__, _where(exc))].append((seed.kind, muts, str(exc)[:160]))
        finally:
            signal.alarm(0)
        took = time.monotonic() - t0
        if took > args.slow:
            slow.append((took, seed.kind, muts))
        if (i + 1) % 1000 == 0:
            print(f"... {i + 1} inputs, {sum(len(v) for v in escaped.values())} escaped, "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr)

    shutil.rmtree(workdir, ignore_errors=True)
    total = sum(per_kind.values())
    print(f"inputs: {total} in {time.monotonic() - started:.0f} s (seed {args.seed})")
    print("per input kind (inputs / refused with a clear line):")
    for kind, n in sorted(per_kind.items()):
        print(f"  {kind:20s} {n:6d} / {refused[kind]:6d}")
    print("per parser that read them (a verdict was reached):")
    for name, n in per_parser.most_common():
        print(f"  {name:40s} {n:6d}")
    n_escaped = sum(len(v) for v in escaped.values())
    print(f"escaped exceptions: {n_escaped} at {len(escaped)} places")
    for (name, where), cases in sorted(escaped.items(), key=lambda kv: -len(kv[1])):
        kind, muts, message = cases[0]
        print(f"  {len(cases):5d} {name} at {where}: {message}")
        print(f"        e.g. {kind} {muts}")
    print(f"inputs over {args.slow:g} s: {len(slow)}")
    for took, kind, muts in sorted(slow, reverse=True)[:20]:
        print(f"  {took:6.1f} s {kind} {muts}")
    print(f"inputs given up after {args.timeout} s: {len(timed_out)}")
    for kind, muts in timed_out[:20]:
        print(f"  {kind} {muts}")
    return 1 if n_escaped else 0


if __name__ == "__main__":
    sys.exit(main())
