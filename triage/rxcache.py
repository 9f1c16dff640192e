"""Compiled regular expressions carried from one run to the next, the way .pyc files carry code.

A cold `triage classify` compiles some 150 patterns (the signatures a log's lines select, the
line grammar, the masking tables): about 20 ms of a ~0.12 s run, spent in the `re` module's
Python-level parser and code generator. What they produce, the program the C matcher runs,
depends only on the pattern's text, its flags and the interpreter.

`python -m triage.rxcache_build build` records that program for the patterns the classify path
compiles on the bundled samples and for every signature's pattern, and writes
triage/data/regex.<cache tag>.marshal, stamped with the interpreter that built it
(implementation, version, the matcher's MAGIC and word size). Two parts:
- `eager`: what the samples' runs compile directly (module-level patterns, in-call `re` use).
  `seed()`, first thing at start-up, hands them to `re`'s own cache, so `re.compile(text, flags)`
  and `re.search(text, ...)` of the same text and flags find them there instead of compiling.
- `lazy`: the rest, each kept marshalled until `compiled(text, flags)` asks for it (the
  signatures and lazily compiled patterns go through it): a log selects a few dozen of them.

Nothing here can change what a pattern matches: an entry is keyed by its exact text and flags
and was produced by this interpreter's own compiler. Another interpreter, a missing or
unreadable file, a layout of `re` other than the one known here, or a program the C matcher's own
validation refuses: those patterns compile as they always did. The file sits in the package
beside the code, as trusted as its bytecode (the same marshal format), and only the build
command writes it, never a run. tests/test_rxcache.py compiles every entry afresh and requires
the same program.
"""
from __future__ import annotations

import marshal
import re
import sys
from pathlib import Path
from typing import Any

import _sre

from .paths import data_file

FORMAT = 2
_MISSES = (TypeError, ValueError, RuntimeError, OverflowError, EOFError)

_seeded: int | None = None
_lazy: dict[tuple[str, int], bytes] = {}


def table_path() -> Path:
    return data_file(f"regex.{sys.implementation.cache_tag or 'none'}.marshal")


def interpreter_stamp() -> tuple[Any, ...]:
    """What a compiled program depends on besides the pattern: a table built under another stamp
    is never used."""
    return (FORMAT, sys.implementation.name, tuple(sys.version_info[:3]), _sre.MAGIC, _sre.CODESIZE,
            getattr(_sre, "MAXREPEAT", None), getattr(_sre, "MAXGROUPS", None))


def _re_cache() -> dict | None:
    """`re`'s compiled-pattern cache, when it has the layout this module knows: a dict keyed by
    (type of the pattern, pattern, int flags), bounded by re._MAXCACHE."""
    cache = getattr(re, "_cache", None)
    return cache if isinstance(cache, dict) and isinstance(getattr(re, "_MAXCACHE", None), int) else None


def _read_table(path: Path) -> dict[str, Any] | None:
    try:
        doc = marshal.loads(path.read_bytes())
    except (OSError, *_MISSES):
        return None
    if (not isinstance(doc, dict) or doc.get("stamp") != interpreter_stamp()
            or not isinstance(doc.get("eager"), list) or not isinstance(doc.get("lazy"), dict)):
        return None
    return doc


def _program(source: Any, flags: Any, entry: Any) -> re.Pattern[str] | None:
    """The pattern of one entry (final flags, program, groups, group names), or None when it is
    not one: _sre.compile validates the program before it accepts it."""
    try:
        final_flags, code, groups, groupindex, indexgroup = entry
        if not isinstance(source, str) or not isinstance(flags, int):
            return None
        return _sre.compile(source, final_flags, code, groups, groupindex, indexgroup)
    except _MISSES:
        return None


def seed(path: Path | None = None) -> int:
    """Once per process: put the table's eager patterns into `re`'s cache and keep its lazy part
    for `compiled`; how many eager patterns were put."""
    global _seeded, _lazy
    if _seeded is not None:
        return _seeded
    _seeded = 0
    cache = _re_cache()
    doc = _read_table(path or table_path()) if cache is not None else None
    if doc is None:
        return 0
    room = max(re._MAXCACHE * 3 // 4 - len(cache), 0)   # type: ignore[attr-defined]   # a quarter stays for the run
    for item in doc["eager"][:room]:
        try:
            source, flags, entry = item
        except _MISSES:
            continue
        pattern = _program(source, flags, entry)
        if pattern is not None:
            cache.setdefault((str, source, flags), pattern)
            _seeded += 1
    _lazy = doc["lazy"]
    return _seeded


def holds(source: str, flags: int = 0) -> bool:
    """Whether compiling `source` costs nothing here: the table's lazy part or re's cache has it."""
    seed()
    cache = _re_cache()
    return (source, int(flags)) in _lazy or (cache is not None and (str, source, int(flags)) in cache)


def compiled(source: str, flags: int = 0) -> re.Pattern[str]:
    """re.compile(source, flags), from the table's lazy part when it holds the pattern."""
    seed()
    flags = int(flags)
    blob = _lazy.pop((source, flags), None)
    if blob is not None:
        try:
            pattern = _program(source, flags, marshal.loads(blob))
        except _MISSES:
            pattern = None
        cache = _re_cache()
        if pattern is not None and cache is not None:
            cache.setdefault((str, source, flags), pattern)
    return re.compile(source, flags)
