"""Every bundled sample is an end-to-end fixture: it classifies as its expected.yaml says, and its
JSON verdict validates against the shipped schema."""
from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from triage.api import classify_paths
from triage.paths import verdict_schema_path
from triage.report import to_json

from tests.conftest import CORPUS, SAMPLES

SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if (p / "expected.yaml").exists())
SCHEMA = json.loads(verdict_schema_path().read_text())


def test_enough_samples_cover_every_class():
    classes = {yaml.safe_load((d / "expected.yaml").read_text())["class"] for d in SAMPLE_DIRS}
    assert len(SAMPLE_DIRS) >= 8
    assert classes >= {"startup", "burst", "chronic", "prefix_cache", "not_gpu_oom", "no_oom"}


@pytest.mark.parametrize("bundle", SAMPLE_DIRS, ids=[d.name for d in SAMPLE_DIRS])
def test_sample_classifies_as_expected(bundle):
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    verdict, _ = classify_paths([str(bundle)])
    out = to_json(verdict)
    jsonschema.validate(out, SCHEMA)
    assert out["verdict"]["class"] == expected["class"], out["verdict"]["summary"]
    assert out["verdict"]["confidence"] >= expected.get("min_confidence", 0)
    found = {c["id"] for c in out["causes"]}
    assert set(expected.get("causes") or []) <= found, found
    recs = {r["setting"]: r["to"] for r in out["recommendations"]}
    for setting, value in (expected.get("recommend") or {}).items():
        assert recs.get(setting) == value, (setting, recs)
    for item in out["evidence"]:
        assert item["source"] and (item["line"] is None or item["line"] >= 1)


@pytest.mark.parametrize("case", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.stem)
def test_corpus_verdicts_validate_against_the_schema(case, tmp_path):
    data = yaml.safe_load(case.read_text())
    (tmp_path / "server.log").write_text(data["log"])
    if data.get("metrics"):
        (tmp_path / "metrics.txt").write_text(data["metrics"])
    verdict, _ = classify_paths([str(tmp_path)])
    jsonschema.validate(to_json(verdict), SCHEMA)
