"""Every real case of the development corpus parses and gets its label (or unknown where the
log alone is not enough), exactly as `triage classify DIR --json` sees it."""
from __future__ import annotations

import pytest

from triage.evaluate import evaluate_corpus, run_case

from tests.conftest import CORPUS

CASES = sorted(CORPUS.glob("*.yaml"))


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_case_gets_its_label(case):
    result = run_case(case)
    assert result.error is None, result.error
    if result.sufficient:
        assert result.answer == result.label, f"{case.stem}: {result.answer} ({result.confidence})"
    else:
        assert result.answer in (result.label, "unknown"), f"{case.stem}: {result.answer} ({result.confidence})"


def test_no_gpu_misroutes_and_no_confident_wrong_answers():
    report = evaluate_corpus(str(CORPUS))
    assert report.total == len(CASES) >= 30
    assert report.misroutes == 0
    assert report.wrong == 0
    assert report.acceptable_rate == 1.0
