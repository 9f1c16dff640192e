"""The signature data file proves itself: every entry is well-formed, every example matches (and
yields the fields it lists), no counter-example does, every pattern stays fast on long hostile
lines, and the compiled form the classifier loads is current."""
from __future__ import annotations

import re
import time

import pytest

from triage.evidence import sigdata
from triage.evidence.extractors import EXTRACTORS
from triage.evidence.kinds import Kind

RAW = sigdata.load_raw()
ENTRIES = {e.id: e for e in sigdata.entries()}


def _match(entry: sigdata.Entry, line: str):
    if not any(g in line for g in entry.guards):
        return None
    m = re.compile(entry.pattern).search(line)
    if not m:
        return None
    extract = sigdata.matcher(entry, EXTRACTORS)
    return extract(m, line) if extract is not None else {}


def test_data_file_is_valid():
    sigdata.validate(RAW, kinds={k.value for k in Kind}, extractors=set(EXTRACTORS))
    assert len(ENTRIES) == len(RAW) >= 100


def test_compiled_form_is_current():
    """`python -m triage.evidence.sigdata build` was run after the last edit of the YAML."""
    import json
    import zlib

    doc = json.loads(sigdata.COMPILED.read_text(encoding="utf-8"))
    source = sigdata.DATA.read_bytes()
    assert doc["stamp"] == f"crc32:{zlib.crc32(source):08x}:{len(source)}"
    assert doc["signatures"] == sigdata.compiled_form(RAW)


def test_the_stored_guard_finder_is_the_one_built_now_and_finds_what_substring_tests_find():
    from triage.evidence import guard_trie, signatures

    stored = sigdata.compiled_guard_finder(signatures._BY_GUARD)
    assert stored == guard_trie.finder_source(signatures._BY_GUARD)
    # a table built from other entries (a leave-one-engine-out run) does not take it
    assert sigdata.compiled_guard_finder(list(signatures._BY_GUARD)[1:]) is None
    index = signatures._GuardIndex(signatures._BY_GUARD, trie_after=0, stored=stored)
    plain = signatures._GuardIndex(signatures._BY_GUARD, trie_after=10**9)
    lines = [example["line"] if isinstance(example, dict) else example
             for item in RAW for example in item["examples"] + item.get("counter_examples", [])]
    assert len(lines) > 500
    for line in lines:
        assert index(line) == plain(line), line
    assert index.finder is not None and plain.finder is None


def test_a_guard_finder_written_by_other_code_is_not_used(tmp_path):
    import json

    from triage.evidence import guard_trie, signatures

    guards = signatures._BY_GUARD
    (tmp_path / "signatures.yaml").write_bytes(sigdata.DATA.read_bytes())
    doc = json.loads(sigdata.COMPILED.read_text(encoding="utf-8"))
    doc["guard_finder"] = {"stamp": "crc32:00000000:1", "guards": guard_trie.guards_digest(guards), "source": "(?=(x))"}
    (tmp_path / "signatures.compiled.json").write_text(json.dumps(doc), encoding="utf-8")
    assert sigdata.compiled_guard_finder(guards, tmp_path / "signatures.yaml") is None
    doc["guard_finder"]["stamp"] = guard_trie.code_stamp()
    (tmp_path / "signatures.compiled.json").write_text(json.dumps(doc), encoding="utf-8")
    sigdata._current.cache_clear()
    assert sigdata.compiled_guard_finder(guards, tmp_path / "signatures.yaml") == "(?=(x))"
    sigdata._current.cache_clear()


@pytest.mark.parametrize("item", RAW, ids=[i["id"] for i in RAW])
def test_examples_match_and_counter_examples_do_not(item):
    entry = ENTRIES[item["id"]]
    for example in item["examples"]:
        line, want = (example["line"], example.get("fields", {})) if isinstance(example, dict) else (example, {})
        fields = _match(entry, line)
        assert fields is not None, f"{entry.id}: example does not match: {line!r}"
        for key, value in want.items():
            assert fields.get(key) == value, f"{entry.id}: {key}={fields.get(key)!r}, expected {value!r}"
    for line in item.get("counter_examples") or []:
        assert _match(entry, line) is None, f"{entry.id}: counter-example matches: {line!r}"


def _hostile_lines(entry: sigdata.Entry) -> list[str]:
    guard = entry.guards[0]
    n = 20_000
    return [guard + " " * n + "x", guard + ("a " * (n // 2)) + "!", (guard + " ") * 200 + "(" * 2000,
            guard + "\t" * n + "\n", guard + "1." * (n // 2), guard + ":" + "=" * n + "'", "(" + guard + "a" * n]


@pytest.mark.parametrize("entry", list(ENTRIES.values()), ids=list(ENTRIES))
def test_patterns_stay_linear_on_long_hostile_lines(entry):
    pattern = re.compile(entry.pattern)
    for line in _hostile_lines(entry):
        start = time.perf_counter()
        pattern.search(line)
        assert time.perf_counter() - start < 0.25, f"{entry.id}: slow on a long line"


def test_entries_cite_a_source_and_a_reason():
    for item in RAW:
        assert len(item["why"]) >= 30 and item["source"], item["id"]


def test_a_stale_compiled_form_falls_back_to_the_yaml(tmp_path):
    """An edited data file whose compiled form was not rebuilt is still read (from the YAML)."""
    data = tmp_path / "signatures.yaml"
    data.write_text(sigdata.DATA.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "signatures.compiled.json").write_text('{"stamp": "stale", "signatures": []}')
    loaded = sigdata.entries.__wrapped__(data)
    assert [e.id for e in loaded] == [i["id"] for i in RAW]


def test_a_typo_in_the_data_file_is_refused():
    bad = [dict(RAW[0], fields={"pid": {"group": "no_such_group", "type": "int"}})]
    with pytest.raises(sigdata.SignatureDataError):
        sigdata.validate(bad)
    with pytest.raises(sigdata.SignatureDataError):
        sigdata.validate([dict(RAW[0], kind="not_a_kind")], kinds={k.value for k in Kind})


def test_the_guard_trie_finds_the_same_signatures_as_testing_every_guard():
    """A long log's lines are searched for the guards with one trie regex instead of one substring
    test per guard: on every line of the corpora, both find the same signatures."""
    from pathlib import Path

    import yaml

    from triage.evidence import signatures

    corpus = Path(__file__).parent / "corpus"
    lines = [ln for p in sorted(corpus.glob("**/*.yaml")) if p.name != "excluded.yaml"
             for ln in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}).get("log", "").splitlines() if ln.strip()]
    lines += ["out of memory out of", "CUDA out of memory. Tried", "x" * 5000]
    plain = signatures._GuardIndex(signatures._BY_GUARD, trie_after=10**9)
    trie = signatures._GuardIndex(signatures._BY_GUARD, trie_after=0)
    assert len(lines) > 5000
    assert [trie(ln) for ln in lines] == [plain(ln) for ln in lines]
    # the plain index files guards by their first two characters: it finds what testing every guard finds
    every = [{i for guard, ids in signatures._BY_GUARD.items() if guard in ln for i in ids} for ln in lines]
    assert [plain(ln) for ln in lines] == every
    assert trie.finder is not None and plain.finder is None
