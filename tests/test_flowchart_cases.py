"""Runs the class cases in tests/cases/<class>.yaml: one file per class, each case a log that must
reach the file's class (one loader, readable ids)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from triage.api import classify_paths
from triage.classes import registry

CASES_DIR = Path(__file__).parent / "cases"
CASES = [(f.stem, c) for f in sorted(CASES_DIR.glob("*.yaml")) for c in yaml.safe_load(f.read_text())]


def test_every_class_has_its_cases_file_and_every_file_a_class():
    assert {f.stem for f in CASES_DIR.glob("*.yaml")} == set(registry().ids())


@pytest.mark.parametrize("expect, case", CASES, ids=[f"{cls}:{c['name']}" for cls, c in CASES])
def test_case(expect, case, tmp_path):
    assert "expect" not in case, "the file a case is in names the class it must reach"
    (tmp_path / "server.log").write_text(case["log"])
    if case.get("metrics"):
        (tmp_path / "metrics.txt").write_text(case["metrics"])
    verdict, _ = classify_paths([str(tmp_path)])
    assert verdict.oom_class.value == expect, f"{verdict.summary} | {[s.why for s in verdict.path]}"
    assert set(case.get("causes") or []) <= {c.id for c in verdict.causes}
    recs = {r.setting: r.to_value for r in verdict.recommendations}
    for setting, value in (case.get("recommend") or {}).items():
        assert recs.get(setting) == value, recs
