"""Building the table of compiled patterns that triage/rxcache.py reads (`python -m
triage.rxcache_build build`): which patterns the classify path compiles on the bundled samples,
recorded in fresh interpreters so that import-time patterns are seen, and the program `re`'s own
compiler makes of each, stamped with the interpreter that built them."""
from __future__ import annotations

import marshal
import re
import sys
from pathlib import Path
from typing import Any

from . import rxcache


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
    original, original_compiled = _compiler.compile, rxcache.compiled
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
    # nothing is seeded (a seeded pattern would not be compiled, so not recorded)
    rxcache.compiled = asked_for         # type: ignore[assignment]
    rxcache._seeded = 0
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

    proc = subprocess.run([sys.executable, "-m", "triage.rxcache_build", "record", *paths],
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
    if rxcache._re_cache() is None:
        raise SystemExit("rxcache_build: this interpreter's re module has another cache layout; no table written")
    eager, lazy = eager_and_lazy(build_inputs())
    doc = {"stamp": rxcache.interpreter_stamp(),
           "eager": [(source, flags, compile_entry(source, flags)) for source, flags in eager],
           "lazy": {(source, flags): marshal.dumps(compile_entry(source, flags)) for source, flags in lazy}}
    target = path or rxcache.table_path()
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
        print(f"{n_eager} eager and {n_lazy} lazy patterns -> {rxcache.table_path()}")
    else:
        raise SystemExit("usage: python -m triage.rxcache_build build")
