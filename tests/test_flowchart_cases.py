"""Runs the flowchart rule cases in tests/cases/*.yaml (one loader, readable ids)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from triage.api import classify_paths

CASES = [c for f in sorted((Path(__file__).parent / "cases").glob("*.yaml")) for c in yaml.safe_load(f.read_text())]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case, tmp_path):
    (tmp_path / "server.log").write_text(case["log"])
    if case.get("metrics"):
        (tmp_path / "metrics.txt").write_text(case["metrics"])
    verdict, _ = classify_paths([str(tmp_path)])
    assert verdict.oom_class.value == case["expect"], f"{verdict.summary} | {[s.why for s in verdict.path]}"
    assert set(case.get("causes") or []) <= {c.id for c in verdict.causes}
    recs = {r.setting: r.to_value for r in verdict.recommendations}
    for setting, value in (case.get("recommend") or {}).items():
        assert recs.get(setting) == value, recs
