"""Leave-one-engine-out: how far the engine-independent layers carry an engine the rules were not
written for.

For each engine family, the signatures written for that engine (triage/data/signatures.yaml
entries whose `engine` is one of the family's) are removed, and that engine's cases are scored
with what is left: the shared normalisation, the phase vocabulary, the failure families and the
other engines' entries. The figure next to it is the same cases with every rule in place. The
lower figure is what a new engine (or a new version's new wording) gets on the first day.

    python benchmarks/leave_one_engine_out.py [CORPUS_DIR ...]     # default: the dev corpus and the mined cases

Each engine runs in a fresh interpreter: the signature table is built once, at import.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIRS = ("tests/corpus", "tests/corpus/mined/train", "tests/corpus/mined/holdout")
# A corpus case's engine family -> the `engine` values of the signatures written for it.
FAMILIES = {
    "vllm": ("vllm",), "sglang": ("sglang",), "tgi": ("tgi",), "trtllm": ("trtllm", "triton"),
    "lmdeploy": ("lmdeploy",), "llamacpp": ("llama.cpp",), "ollama": ("ollama",),
}

_CHILD = r"""
import json, sys
from pathlib import Path
drop = set(json.loads(sys.argv[1]))
from triage.evidence import sigdata
every = sigdata.entries()
kept = tuple(e for e in every if e.engine not in drop)
sigdata.entries = lambda *a, **k: kept          # before the signature table is built from it
from triage.evaluate import EvalReport, run_case
cases = [run_case(Path(p)) for p in json.loads(sys.argv[2])]
report = EvalReport(cases)
print(json.dumps({"removed": len(every) - len(kept), "scored": len(report.scored),
                  "exact": report.scored_accuracy, "misroutes": report.misroutes,
                  "false_alarms": report.false_alarms, "confident_wrong": report.wrong}))
"""


def cases_by_family(dirs: list[str]) -> dict[str, list[str]]:
    import yaml

    out: dict[str, list[str]] = {}
    for d in dirs:
        for path in sorted((REPO / d).glob("*.yaml")):
            engine = str((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("engine") or "")
            if engine in FAMILIES:
                out.setdefault(engine, []).append(str(path))
    return out


def score(drop: tuple[str, ...], paths: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(drop), json.dumps(paths)], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    dirs = argv or list(DEFAULT_DIRS)
    rows = []
    for family, paths in sorted(cases_by_family(dirs).items()):
        full, without = score((), paths), score(FAMILIES[family], paths)
        rows.append((family, full["scored"], full["exact"], without["exact"], without["removed"],
                     without["misroutes"], without["confident_wrong"]))
    print(f"corpus: {', '.join(dirs)}")
    print(f"{'engine':10} {'scored':>6} {'all rules':>10} {'without its own':>16} {'entries removed':>16} "
          f"{'misroutes':>9} {'conf. wrong':>11}")
    for family, n, full, without, removed, misroutes, wrong in rows:
        pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"   # noqa: E731
        print(f"{family:10} {n:>6} {pct(full):>10} {pct(without):>16} {removed:>16} {misroutes:>9} {wrong:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
