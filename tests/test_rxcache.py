"""The compiled-pattern table (triage/rxcache.py): a pattern taken from it is the very program
`re` compiles from the same text and flags, and a table that does not fit this interpreter, or is
damaged, is left unused without a trace."""
from __future__ import annotations

import marshal
import re
from pathlib import Path

import pytest

from triage import rxcache, rxcache_build



def _table() -> tuple[list[tuple], dict]:
    doc = marshal.loads(rxcache.table_path().read_bytes()) if rxcache.table_path().is_file() else None
    if not doc or doc.get("stamp") != rxcache.interpreter_stamp():
        pytest.skip("the committed table was built by another interpreter: it is unused here, patterns compile as usual")
    return doc["eager"], doc["lazy"]


@pytest.fixture
def fresh_seed(monkeypatch):
    """seed() as in a new process: not yet run, re's cache emptied (and emptied again after)."""
    monkeypatch.setattr(rxcache, "_seeded", None)
    monkeypatch.setattr(rxcache, "_lazy", {})
    re.purge()
    yield
    re.purge()


def test_every_entry_is_the_program_re_compiles_from_the_same_text(fresh_seed):
    from re import _compiler  # the compiler itself, past re's cache

    eager, lazy = _table()
    assert rxcache.seed() == len(eager) > 50 and len(lazy) > 200
    for source, flags, _ in eager:
        cached = re.compile(source, flags)
        fresh = _compiler.compile(source, flags)
        assert cached is not fresh
        # Pattern equality compares text, flags and the compiled program word for word
        assert cached == fresh and cached.groupindex == fresh.groupindex and cached.groups == fresh.groups, source[:80]
    for source, flags in list(lazy):
        asked = rxcache.compiled(source, flags)
        fresh = _compiler.compile(source, flags)
        assert asked is not fresh and (source, flags) not in rxcache._lazy       # taken from the table
        assert asked == fresh and asked.groupindex == fresh.groupindex and asked.groups == fresh.groups, source[:80]


def test_seeding_happens_once_and_leaves_room_in_re_cache(fresh_seed):
    eager, _ = _table()
    assert rxcache.seed() == len(eager)
    assert rxcache.seed() == len(eager)       # the second call does nothing more
    assert len(re._cache) <= re._MAXCACHE * 3 // 4


def test_a_pattern_the_table_lacks_compiles_as_usual(fresh_seed):
    rxcache.seed()
    text = r"an unlisted (pattern) \d+ of this test"
    assert rxcache.compiled(text).search("an unlisted pattern 42 of this test").group(1) == "pattern"
    assert rxcache.compiled(text, re.IGNORECASE).flags & re.IGNORECASE


def _write(path: Path, stamp, eager, lazy=None) -> Path:
    path.write_bytes(marshal.dumps({"stamp": stamp, "eager": eager, "lazy": lazy or {}}))
    return path


def test_a_table_stamped_by_another_interpreter_is_not_used(tmp_path, fresh_seed):
    text = r"Tried to allocate (\d+) MiB"
    entry = rxcache_build.compile_entry(text, 0)
    other = (*rxcache.interpreter_stamp()[:2], (2, 7, 18), *rxcache.interpreter_stamp()[3:])
    assert rxcache.seed(_write(tmp_path / "t.marshal", other, [(text, 0, entry)])) == 0
    assert re.compile(text).search("Tried to allocate 20 MiB").group(1) == "20"


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", b"\xe3" + b"\x00" * 10, marshal.dumps([1, 2, 3]),
                                     marshal.dumps({"stamp": None, "eager": [], "lazy": {}})])
def test_a_damaged_or_foreign_file_is_ignored(tmp_path, fresh_seed, content):
    path = tmp_path / "t.marshal"
    path.write_bytes(content)
    assert rxcache.seed(path) == 0 and rxcache._lazy == {}


def test_a_program_the_matcher_refuses_is_skipped_and_the_pattern_compiles_as_usual(tmp_path, fresh_seed):
    good_text = r"CUDA out of memory\. Tried to allocate (\S+)"
    bad_text = r"No available memory for the cache blocks"
    lazy_text = r"Killed process (\d+)"
    bad = list(rxcache_build.compile_entry(bad_text, 0))
    bad[1] = [99999] + bad[1][1:]       # an opcode that does not exist
    lazy_bad = list(rxcache_build.compile_entry(lazy_text, 0))
    lazy_bad[1] = lazy_bad[1][:3]       # a program cut short
    eager = [(bad_text, 0, tuple(bad)), (b"bytes pattern", 0, (0, [1], 0, {}, (None,))), ("x", 0, "not an entry"),
             (good_text, 0, rxcache_build.compile_entry(good_text, 0))]
    path = _write(tmp_path / "t.marshal", rxcache.interpreter_stamp(), eager,
                  {(lazy_text, 0): marshal.dumps(tuple(lazy_bad)), ("y", 0): b"\x00not marshal"})
    assert rxcache.seed(path) == 1
    assert re.compile(bad_text).search("ValueError: No available memory for the cache blocks.") is not None
    assert re.compile(good_text).search("CUDA out of memory. Tried to allocate 2.00 GiB").group(1) == "2.00"
    assert rxcache.compiled(lazy_text).search("Out of memory: Killed process 4242 (python)").group(1) == "4242"
    assert rxcache.compiled("y").search("xyz")


def test_a_missing_file_is_no_error(tmp_path, fresh_seed):
    assert rxcache.seed(tmp_path / "absent.marshal") == 0


def test_the_table_covers_what_classify_compiles_on_the_samples():
    # Stale is never wrong (a pattern missing from the table compiles as before), only slower: this
    # says when `python -m triage.rxcache_build build` should be run again after a pattern changed.
    eager, lazy = _table()
    want_eager, want_lazy = rxcache_build.eager_and_lazy(rxcache_build.build_inputs())
    have_eager = {(source, flags) for source, flags, _ in eager}
    missing = [s[:80] for s, f in want_eager if (s, f) not in have_eager] + \
              [s[:80] for s, f in want_lazy if (s, f) not in lazy]
    assert not missing, f"run `python -m triage.rxcache_build build`: {len(missing)} patterns missing, e.g. {missing[:3]}"
