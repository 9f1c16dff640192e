"""The mined real cases: well-formed, split as their thread's URL says, never from a reserved
thread, and read by the classifier without an error, a GPU/not-GPU misroute or a false alarm on
a healthy log."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from triage.evaluate import evaluate_corpus

from tests.conftest import CORPUS

MINED = CORPUS / "mined"
SPLITS = ("train", "holdout")
LABELS = {"startup", "burst", "chronic", "prefix_cache", "not_gpu_oom", "no_oom"}
# The evaluation set's reserved threads, mirrored in the repository (a test reads only what it holds).
RESERVED = CORPUS / "reserved-threads.txt"


def _cases() -> list[tuple[str, Path]]:
    return [(split, path) for split in SPLITS for path in sorted((MINED / split).glob("*.yaml"))]


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_batch_is_large_and_every_case_well_formed():
    cases = _cases()
    assert len(cases) >= 250
    sources = [_load(p)["source"] for _, p in cases]
    assert len(set(sources)) == len(sources), "one case per thread"
    for split, path in cases:
        case = _load(path)
        assert case["label"] in LABELS and case["labels"] == [case["label"], case["label"]], path.name
        assert case["sufficient"] in ("yes", "no") and case["log"].strip() and case["context"].strip()
        in_holdout = int(hashlib.sha256(case["source"].encode()).hexdigest(), 16) % 3 == 0
        assert (split == "holdout") == in_holdout, f"{path.name}: the split is the URL's, frozen"


def test_no_case_from_a_reserved_or_already_used_thread():
    used = {_load(p)["source"] for p in CORPUS.glob("*.yaml")}
    reserved = {line.strip() for line in RESERVED.read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#")}
    assert len(reserved) >= 300 and all(url.startswith("https://") for url in reserved)
    assert used <= reserved, "the corpus's own threads are on the reserved list"
    mined = {_load(p)["source"] for _, p in _cases()}
    assert not mined & used and not mined & reserved


# Held-out cases that were false alarms or GPU/not-GPU misroutes when they arrived (with the rules
# of the day before and after), or that a later engine-independent reading turned into one (the
# lean on failures that speak of no memory: burst-aa-227, startup-g-051), left unread: reading one
# to fix it would make the held-out figure a training figure. Any other false alarm or misroute fails.
KNOWN_HELD_OUT_FALSE_ALARMS = {"no_oom-o-009", "no_oom-x-005"}
KNOWN_HELD_OUT_MISROUTES = {"prefix_cache-t-001", "not_gpu_oom-v-027", "startup-aa-219", "burst-aa-227",
                            "startup-g-051", "not_gpu_oom-ab-088", "not_gpu_oom-ab-183"}
# Training cases of the newest batch still misrouted: no reading general enough was found yet
# (a pinned host buffer WSL refused, told only by a 2023 llama.cpp's "CUDA error 2 at ggml-cuda.cu";
# Metal over its recommended working set, then a failed command buffer and a bare assertion;
# SGLang's rank-to-rank free-memory balance check, which both labels call a look-alike while the
# corpus labels every other engine's refusal to start for too little free memory start-up; a ROCm
# weight buffer refused with the runner's own estimate showing the model fits three times over).
KNOWN_TRAIN_MISROUTES = {"not_gpu_oom-ab-218", "startup-ab-247", "not_gpu_oom-ac-086", "not_gpu_oom-ad-205"}


@pytest.mark.parametrize("split", SPLITS)
def test_every_case_is_read_without_error_misroute_or_false_alarm(split):
    report = evaluate_corpus(str(MINED / split))
    assert report.total == len(list((MINED / split).glob("*.yaml")))
    assert [c.name for c in report.cases if c.error] == []
    misrouted = KNOWN_HELD_OUT_MISROUTES if split == "holdout" else KNOWN_TRAIN_MISROUTES
    assert {c.name for c in report.cases if c.misroute} == misrouted
    known = KNOWN_HELD_OUT_FALSE_ALARMS if split == "holdout" else set()
    assert {c.name for c in report.cases if c.false_alarm} == known
