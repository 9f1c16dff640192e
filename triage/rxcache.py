"""Compiled regular expressions carried from one run to the next, the way .pyc files carry code.

A cold `triage classify` compiles some 150 patterns (the signatures a log's lines select, the
line grammar, the masking tables): about 20 ms of a ~0.12 s run, spent in the `re` module's
Python-level parser and code generator. What they produce, the program the C matcher runs,
depends only on the pattern's text, its flags and the interpreter.

`python -m triage.rxcache build` records that program for the patterns the classify path
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


# ---- the build (python -m triage.rxcache build) -------------------------------------------------

def compile_entry(source: str, flags: int) -> tuple:
    """(final flags, program, groups, group names): what re._compiler.compile hands to
    _sre.compile for this text and these flags."""
    from re import _compiler, _parser   # type: ignore[attr-defined]

    parsed = _parser.parse(source, flags)
    code = [int(op) for op in _compiler._code(parsed, flags)]
    groupindex = dict(parsed.state.groupdict)
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, index in groupindex.items():
        indexgroup[index] = name
    return (int(flags | parsed.state.flags), code, parsed.state.groups - 1, groupindex, tuple(indexgroup))


def _record(paths: list[str]) -> dict[str, list[tuple[str, int]]]:
    """Run classify over PATHS in this (fresh) process, recording every str pattern compiled from
    the first import on, in order, once each: under "asked" those that came through `compiled`,
    under "direct" the others (module-level and in-call `re` use); "signatures": every
    signature's pattern."""
    import contextlib
    import io
    from re import _compiler   # type: ignore[attr-defined]

    direct: dict[tuple[str, int], None] = {}
    asked: dict[tuple[str, int], None] = {}
    original, original_compiled = _compiler.compile, compiled
    this = sys.modules[__name__]
    asking: list[bool] = [False]

    def recording(p: Any, flags: int = 0) -> Any:
        if isinstance(p, str):
            (asked if asking[0] else direct).setdefault((p, int(flags)), None)
        return original(p, flags)

    def asked_for(source: str, flags: int = 0) -> re.Pattern[str]:
        asking[0] = True
        try:
            return original_compiled(source, flags)
        finally:
            asking[0] = False

    _compiler.compile = recording
    # this file runs as __main__; the package imports its own copy: both record, neither seeds
    # (a seeded pattern would not be compiled, so not recorded)
    from . import rxcache as package_copy

    for module in {this, package_copy}:
        module.compiled = asked_for
        module._seeded = 0
    try:
        from .evidence import guard_trie, signatures
        from .fastpath import run_classify

        for path in paths:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                run_classify([path], as_json=True)
        every_signature = [(sig.regex if isinstance(sig.regex, str) else sig.regex.pattern, 0)
                           for sig in signatures.SIGNATURES]
        every_signature.append((signatures._GUARD_INDEX.source or guard_trie.finder_source(signatures._BY_GUARD), 0))
    finally:
        _compiler.compile = original
    return {"direct": list(direct), "asked": list(asked), "signatures": every_signature}


def build_inputs() -> list[str]:
    """The bundled samples: the incidents the classify path is built for."""
    from .paths import PACKAGE

    samples = PACKAGE.parent / "samples"
    return sorted(str(p) for p in samples.iterdir() if p.is_dir()) if samples.is_dir() else []


def recorded(paths: list[str]) -> dict[str, list[tuple[str, int]]]:
    """What a fresh interpreter compiles classifying PATHS (python -m triage.rxcache record)."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "triage.rxcache", "record", *paths],
                          capture_output=True, text=True, check=True)
    return {part: [(source, flags) for source, flags in keys] for part, keys in json.loads(proc.stdout).items()}


def eager_and_lazy(inputs: list[str]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Eager: the patterns the samples' runs compile directly (module level, in-call `re` use);
    lazy: those asked of `compiled` (signatures, lazily compiled patterns) and every signature's."""
    seen = recorded(inputs)
    lazy = list(dict.fromkeys(seen["asked"] + seen["signatures"]))
    return [key for key in seen["direct"] if key not in set(lazy)], lazy


def build(path: Path | None = None) -> tuple[int, int]:
    """Record (in fresh interpreters, so that import-time patterns are seen), compile and write
    the table; (eager, lazy) counts."""
    if _re_cache() is None:
        raise SystemExit("rxcache: this interpreter's re module has another cache layout; no table written")
    eager, lazy = eager_and_lazy(build_inputs())
    doc = {"stamp": interpreter_stamp(),
           "eager": [(source, flags, compile_entry(source, flags)) for source, flags in eager],
           "lazy": {(source, flags): marshal.dumps(compile_entry(source, flags)) for source, flags in lazy}}
    target = path or table_path()
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(marshal.dumps(doc))
    tmp.replace(target)
    return len(eager), len(lazy)


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"]:
        import json

        print(json.dumps(_record(sys.argv[2:])))
    elif sys.argv[1:] == ["build"]:
        n_eager, n_lazy = build()
        print(f"{n_eager} eager and {n_lazy} lazy patterns -> {table_path()}")
    else:
        raise SystemExit("usage: python -m triage.rxcache build")
