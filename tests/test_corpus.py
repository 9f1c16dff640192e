"""Every real case of the development corpus parses and gets its label (or unknown where the
log alone is not enough), exactly as `triage classify DIR --json` sees it."""
from __future__ import annotations

import pytest

from triage.evaluate import evaluate_corpus, run_case

from tests.conftest import CORPUS

CASES = sorted(CORPUS.glob("*.yaml"))
# Realistic cases written to probe the rules (formats from the reference, situations from real
# threads), kept as regressions. Not the development corpus: the figures come from CORPUS.
SYNTHETIC = sorted((CORPUS.parent / "corpus_synthetic").glob("*.yaml"))
KNOWN_OPEN = {
    "r3-c02-jupyter-v066-sweep-instances-not-freed": "memory kept across LLM() instances in a notebook (label is a "
        "judgment call); the tool reads the last instance's weight-loading OOM as a start-up OOM",
}
# Development-corpus cases held out while the engine-wide rules were written (every third file
# by name), scored once afterwards; these were answered `unknown` and are left open (no_oom-e-031,
# a TensorRT-LLM engine loading normally, is read since its build-and-load lines are start-up steps;
# not_gpu_oom-e-036, a configuration ValueError, since errors that name a cause other than memory
# are read as such; burst-d-026, since a compose service name without a replica number is peeled
# and its worker's serving-loop frames are read; burst-e-020, since Xinference's model-call wrapper
# is a request-only frame).
_HELD_OUT_OPEN = "held-out case, answered unknown when first scored; not yet examined"
KNOWN_OPEN.update({name: _HELD_OUT_OPEN for name in ("chronic-e-027",)})
# Targets on in-scope, log-sufficient cases of the development corpus (README, "Accuracy").
EXACT_TARGET = 0.90
ENGINE_TARGET = 0.85


def _marked(paths):
    return [pytest.param(p, id=p.stem, marks=pytest.mark.xfail(reason=KNOWN_OPEN[p.stem], strict=True))
            if p.stem in KNOWN_OPEN else pytest.param(p, id=p.stem) for p in paths]


@pytest.mark.parametrize("case", _marked(CASES + SYNTHETIC))
def test_case_gets_its_label(case):
    result = run_case(case)
    assert result.error is None, result.error
    if result.sufficient:
        assert result.answer == result.label, f"{case.stem}: {result.answer} ({result.confidence})"
    else:
        assert result.answer in (result.label, "unknown"), f"{case.stem}: {result.answer} ({result.confidence})"


def test_corpus_targets():
    """>= 90% exact on in-scope, log-sufficient cases and >= 85% per engine family with 5 or more
    such cases; no GPU/not-GPU misroute, no false alarm on a healthy log, no confident wrong answer."""
    report = evaluate_corpus(str(CORPUS))
    assert report.total == len(CASES) >= 80
    assert report.misroutes == 0
    assert report.false_alarms == 0
    assert report.wrong == 0
    assert report.scored_accuracy >= EXACT_TARGET, report.scored_accuracy
    for engine, row in report.per_engine().items():
        if row["held_to_target"]:
            assert row["exact"] >= ENGINE_TARGET, (engine, row)


def test_probe_set_has_no_wrong_class():
    """The probe cases keep their verdicts: each gets its label, or unknown where the log is not enough."""
    report = evaluate_corpus(str(CORPUS.parent / "corpus_synthetic"))
    wrong = [c.name for c in report.cases if not c.acceptable and c.name not in KNOWN_OPEN]
    assert not wrong and report.misroutes == 0


def test_eval_report_counts_confident_wrong_false_alarms_and_engines():
    from triage.evaluate import CaseResult, EvalReport

    report = EvalReport([
        CaseResult("a", "burst", True, "chronic", 0.45, engine="vllm"),          # wrong, not confident
        CaseResult("b", "burst", True, "startup", 0.7, engine="vllm"),           # confident wrong
        CaseResult("c", "no_oom", True, "burst", 0.3, engine="sglang"),          # a false alarm
        CaseResult("d", "startup", False, "unknown", 0.0, engine="sglang"),      # acceptable
        CaseResult("e", "burst", True, "burst", 0.5, engine="tgi", in_scope=False),
    ])
    assert report.wrong == 1 and report.wrong_any == 3 and report.false_alarms == 1
    assert [c.name for c in report.scored] == ["a", "b", "c"]
    engines = report.per_engine()
    assert engines["vllm"]["scored"] == 2 and engines["vllm"]["exact"] == 0.0
    assert engines["tgi"]["scored"] == 0 and engines["tgi"]["exact"] is None
