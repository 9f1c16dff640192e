"""How far `triage plan` lands from what engines printed at start-up in public threads.

Runs the plan on every case of tests/plan_validation/ (one YAML file a thread: the launch, the
card, the model's config.json and the figures the engine printed, each with its line) and prints,
per quantity, the number of figures, the median and worst error and how many lie within 10%.

    .venv/bin/python benchmarks/bench_plan_validation.py            # the table
    .venv/bin/python benchmarks/bench_plan_validation.py --cases     # and every figure
    .venv/bin/python benchmarks/bench_plan_validation.py --json      # machine-readable

Where a thread names the card (or its log prints the total), the plan is evaluated as `triage plan`
would for those flags (triage.plan.plan.evaluate): weights, KV cache GiB, KV tokens, concurrency.
Where it does not, only what needs no card is checked: the weights, and the KV tokens and
concurrency the plan's KV layout gives for the pool the engine printed (rows marked "from the
printed pool": they test the bytes per token, not the pool). Cases with `status: config-missing`
are listed, never scored. Errors are (plan - printed) / printed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CASES = REPO / "tests" / "plan_validation"
GiB = 1 << 30
QUANTITIES = ("weights_gib", "kv_cache_gib", "kv_tokens", "max_concurrency")
EXTRA = ("non_torch_gib", "activation_peak_gib")
LABELS = {"weights_gib": "weights GiB", "kv_cache_gib": "KV cache GiB", "kv_tokens": "KV tokens",
          "max_concurrency": "max concurrency", "non_torch_gib": "non-torch GiB (profile)",
          "activation_peak_gib": "activation peak GiB (profile)",
          "kv_tokens@pool": "KV tokens, from the printed pool", "max_concurrency@pool":
          "max concurrency, from the printed pool"}
ORDER = ("weights_gib", "kv_cache_gib", "kv_tokens", "max_concurrency", "kv_tokens@pool", "max_concurrency@pool",
         "non_torch_gib", "activation_peak_gib")


@dataclass
class Figure:
    case: str
    quantity: str            # a key of LABELS
    printed: float
    planned: float
    line: str

    @property
    def error(self) -> float:
        return (self.planned - self.printed) / self.printed if self.printed else float("inf")


@dataclass
class CaseResult:
    name: str
    source: str
    status: str
    engine: str
    generation: str
    architecture: str
    sized_as: str = ""
    figures: list[Figure] = field(default_factory=list)
    note: str = ""


def load_cases(folder: Path = CASES) -> list[tuple[str, dict[str, Any]]]:
    import yaml

    return [(p.stem, yaml.safe_load(p.read_text(encoding="utf-8"))) for p in sorted(folder.glob("*.yaml"))]


def _request(case: dict[str, Any]):
    from triage.plan.plan import Request

    launch = case.get("launch") or {}
    return Request(tp=int(launch.get("tp") or 1), pp=int(launch.get("pp") or 1), dtype=launch.get("dtype"),
                   kv_cache_dtype=launch.get("kv_cache_dtype"), quantization=launch.get("quantization"),
                   max_model_len=launch.get("max_model_len"), max_num_seqs=launch.get("max_num_seqs"),
                   max_num_batched_tokens=launch.get("max_num_batched_tokens"),
                   util=launch.get("gpu_memory_utilization"), enforce_eager=bool(launch.get("enforce_eager")),
                   allow_long=bool(launch.get("allow_long_max_model_len")),
                   flashinfer_sampler=bool(launch.get("flashinfer_sampler")))


def _gpu(case: dict[str, Any]):
    from triage.plan.gpus import resolve

    gpu = case.get("gpu") or {}
    if gpu.get("total_gib"):
        return resolve(f"{gpu['total_gib']}GiB")         # the total the log printed wins over the table's
    if gpu.get("name"):
        return resolve(str(gpu["name"]))
    return None


def run_case(name: str, case: dict[str, Any]) -> CaseResult:
    """The plan for one case and its figures beside the printed ones (nothing for config-missing)."""
    from triage.memory.config import load
    from triage.memory.kv import layout
    from triage.memory.weights import weights as weights_of
    from triage.plan.engines import sizing
    from triage.plan.plan import evaluate, precision, settings_for

    out = CaseResult(name, case["source"], case["status"], case["engine"], case.get("generation", ""),
                     case.get("architecture", ""))
    if case["status"] != "ok":
        out.note = case.get("missing", "")
        return out
    shape = load(REPO / case["model"]["config"])
    req = _request(case)
    # A plan is asked with the version being deployed; where the thread does not state it, the
    # release its log's format and date point to (`version_inferred`, argued in `version_basis`).
    inferred = None if case.get("version") else case.get("version_inferred")
    siz = sizing(case["engine"], case.get("version") or inferred)
    out.sized_as = siz.label + (" (version inferred from the log, see version_basis)" if inferred else "")
    gpu = _gpu(case)
    sg = siz.engine == "sglang"
    if gpu is not None:
        o = evaluate(shape, gpu, req, siz)
        planned = {"weights_gib": o.figures["weights_per_gpu"].value / GiB, "kv_cache_gib": max(o.pool, 0) / GiB,
                   "kv_tokens": o.capacity, "max_concurrency": o.concurrency,
                   "non_torch_gib": o.figures["non_torch"].value / GiB,
                   "activation_peak_gib": o.figures["profile_peak"].value / GiB}
        length = int(o.value("max_model_len"))
        kvl = o.kv
    else:
        size, _, qsize, qwhy, kv_size, _ = precision(shape, req)
        w = weights_of(shape, dtype_bytes=size, quant_bytes=qsize, quant_text=qwhy, tp=req.tp, pp=req.pp)
        kvl = layout(shape, kv_size, tp=req.tp, pp=req.pp, block=1 if sg else 16, windows=siz.windows,
                     mla=sg or siz.mla, mla_head_size=siz.mla_head_size)
        length = req.max_model_len or shape.derived_max_len or 0
        planned = {"weights_gib": w.per_gpu / GiB}
    printed_pool = next((float(f["value"]) * GiB for f in case["printed"] if f["quantity"] == "kv_cache_gib"), None)
    for f in case["printed"]:
        q, value = f["quantity"], float(f["value"])
        flen = int(f.get("max_model_len") or length)
        if q in planned and (q not in ("kv_tokens", "max_concurrency") or flen == length):
            out.figures.append(Figure(name, q, value, float(planned[q]), f["line"]))
        elif q in ("kv_tokens", "max_concurrency") and printed_pool is not None and gpu is None and flen:
            got = kvl.tokens(int(printed_pool), flen) if q == "kv_tokens" else printed_pool / kvl.sequence(flen)
            out.figures.append(Figure(name, f"{q}@pool", value, float(got), f["line"]))
    return out


def summarise(results: list[CaseResult]) -> list[dict[str, Any]]:
    rows = []
    figures = [f for r in results for f in r.figures]
    for q in ORDER:
        errs = [f for f in figures if f.quantity == q]
        if not errs:
            continue
        worst = max(errs, key=lambda f: abs(f.error))
        rows.append({"quantity": q, "label": LABELS[q], "n": len(errs),
                     "median_abs_error": statistics.median(abs(f.error) for f in errs),
                     "worst_error": worst.error, "worst_case": worst.case,
                     "within_10pct": sum(1 for f in errs if abs(f.error) <= 0.10)})
    return rows


def coverage(results: list[CaseResult], cases: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    scored = [r for r in results if r.status == "ok"]
    return {"case_files": len(cases), "threads": len({r.source for r in results}),
            "threads_scored": len({r.source for r in scored}), "cases_scored": len(scored),
            "config_missing": sorted(r.name for r in results if r.status == "config-missing"),
            "engines": sorted({f"{r.engine} {r.generation}".strip() for r in scored}),
            "architectures": sorted({r.architecture for r in scored})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", action="store_true", help="print every figure too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cases = load_cases()
    results = [run_case(name, case) for name, case in cases]
    rows, cov = summarise(results), coverage(results, cases)
    if args.json:
        print(json.dumps({"coverage": cov, "quantities": rows,
                          "figures": [{"case": f.case, "quantity": f.quantity, "printed": f.printed,
                                       "planned": round(f.planned, 4), "error": round(f.error, 4)}
                                      for r in results for f in r.figures]}, indent=2))
        return 0
    print(f"plan validation: {cov['cases_scored']} cases from {cov['threads_scored']} threads scored "
          f"({cov['case_files']} case files, {cov['threads']} threads; config missing: "
          f"{len(cov['config_missing'])})")
    print(f"engines: {', '.join(cov['engines'])}; architectures: {', '.join(cov['architectures'])}")
    print()
    print(f"{'quantity':<40} {'n':>3} {'median |err|':>13} {'worst':>9}  {'within 10%':>10}  worst case")
    for r in rows:
        print(f"{r['label']:<40} {r['n']:>3} {r['median_abs_error']:>12.1%} {r['worst_error']:>+9.1%}  "
              f"{r['within_10pct']:>4} of {r['n']:<3}  {r['worst_case']}")
    if args.cases:
        print()
        for r in results:
            print(f"{r.name}  [{r.status}] {r.source}" + (f"  ({r.sized_as})" if r.sized_as else ""))
            for f in r.figures:
                print(f"    {LABELS[f.quantity]:<40} printed {f.printed:>12,.4g}  plan {f.planned:>12,.4g}  "
                      f"{f.error:+.1%}")
            if r.note:
                print(f"    not scored: {r.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
