"""The upstream-confirmed engine memory bugs (triage/data/known_bugs_upstream.yaml): enough of them
per engine, each sourced to its engine's own repository, with version ranges that parse, a fixed
release outside its affected range, and the facts an operator needs (symptom, workaround)."""
from __future__ import annotations

from collections import Counter

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from triage.classes import registry
from triage.flowchart.knowledge import check_requirement
from triage.paths import data_file

ENTRIES = yaml.safe_load(data_file("known_bugs_upstream.yaml").read_text(encoding="utf-8"))
REPOS = {"vllm": "https://github.com/vllm-project/vllm/", "sglang": "https://github.com/sgl-project/sglang/",
         "tgi": "https://github.com/huggingface/text-generation-inference/",
         "lmdeploy": "https://github.com/InternLM/lmdeploy/"}
KEYS = {"id", "engine", "title", "affected", "fixed_in", "requires", "classes", "effect", "symptom", "workaround",
        "source", "fixed_by", "verified"}


def test_enough_bugs_per_engine():
    per_engine = Counter(e["engine"] for e in ENTRIES)
    assert len(ENTRIES) >= 30 and len({e["id"] for e in ENTRIES}) == len(ENTRIES)
    assert per_engine["vllm"] >= 15 and per_engine["sglang"] >= 6 and per_engine["tgi"] >= 4 \
        and per_engine["lmdeploy"] >= 3


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_each_bug_is_sourced_upstream_and_its_versions_hold(entry):
    assert set(entry) <= KEYS and {"id", "engine", "title", "affected", "source", "verified"} <= set(entry)
    repo = REPOS[entry["engine"]]
    assert entry["source"].startswith(repo), entry["source"]
    if entry.get("fixed_by"):
        assert entry["fixed_by"].startswith(repo)
    affected = SpecifierSet(entry["affected"])
    assert len(affected) > 0
    if entry.get("fixed_in"):
        assert not affected.contains(Version(str(entry["fixed_in"])), prereleases=True)
    for req in entry.get("requires") or []:
        check_requirement(req, entry["id"])
    known = set(registry().ids())
    assert entry["classes"] and set(entry["classes"]) <= known
    assert entry["symptom"].strip() and entry["workaround"].strip() and entry["verified"].strip()
