"""The literals a log line must hold to matter to the log reader, derived from the data.

Every signature in triage/data/signatures.yaml is tried on a message only when one of its guards
is a substring of it, and matches only when its pattern does: so a line that holds none of an
entry's guards, or none of the literals every match of its pattern must hold, cannot make that
entry's record. Per entry the more selective of the two sets is kept (a guard such as "137" would
send every line with that number to Python; the pattern says "exit status 137" or a verb first).
The reader's own structural lines add theirs: traceback frames, exception lines, the memory
summary table, Prometheus samples pasted into a log.

Literals are cut to their longest stretch that no log path rewrites: JSON and Go escape quotes,
backslashes and `<>&`, and non-ASCII text may be escaped, so `File "` is looked for as `File `.

Deriving them parses every pattern (tens of milliseconds), so `python -m triage.evidence.sigdata
build` stores them in the compiled signatures JSON, stamped with `code_stamp()` (this module's
and log_patterns.py's source, and the Python version whose regex parser read the patterns);
prefilter.anchors() reads them from there when the stamps match and derives them when not.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

try:                                          # Python 3.11+: the parser's private home
    from re import _constants as _sre_c       # type: ignore[attr-defined]
    from re import _parser as _sre_p          # type: ignore[attr-defined]
except ImportError:                           # pragma: no cover - Python 3.10
    import sre_constants as _sre_c            # type: ignore[no-redef]
    import sre_parse as _sre_p                # type: ignore[no-redef]

from .kinds import Kind
from .log_patterns import ACCESS_MARK, EXCEPTION

# What a log path may write differently from the message the reader sees (escaped or re-encoded).
_UNSAFE = frozenset('"\\\'<>&\t\r\n')
WORD_END = "\\b"         # suffix of a literal that must end a word ("-9" of "exit code -9", not of "-9f3a")

# The reader's structural lines (log_scanner.LogScanner.feed): a traceback's header and frames,
# the memory_summary() table's title, Prometheus samples pasted into a log, and the logger levels a
# failure is stated at (a line at one of them is a failure even when no entry names it).
STRUCTURAL = ("Traceback (most recent call last)", 'File "', "PyTorch CUDA memory summary",
              "vllm:", "DCGM_", "dcgm_", "ERROR", "CRITICAL", "FATAL")


def safe_core(text: str) -> str:
    """The longest stretch of `text` that every log path keeps as it is."""
    best, run = "", []
    for ch in text:
        if ch in _UNSAFE or not (" " <= ch <= "~"):
            run = []
            continue
        run.append(ch)
        if len(run) > len(best):
            best = "".join(run)
    return best


def necessary_literals(pattern: str) -> frozenset[str] | None:
    """A set of literals one of which is in every match of `pattern`, or None when none is known
    (case-insensitive parts, nothing literal to hold on to)."""
    try:
        parsed = _sre_p.parse(pattern)
    except re.error:
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    return _sequence(list(parsed))


def _score(found: frozenset[str] | None) -> tuple[float, float]:
    """Longer literals are rarer: the shortest decides, the average breaks ties."""
    if not found or not all(found):
        return (-1, 0)
    sizes = [len(s.removesuffix(WORD_END)) + (1 if s.endswith(WORD_END) else 0) for s in found]
    return (min(sizes), sum(sizes) / len(sizes))


def _sequence(items: list) -> frozenset[str] | None:
    """The best necessary set of a sequence of parsed items: each item's own set is necessary, and
    so is the set of strings a stretch of items matches exactly ("batch{" ... "}:" then "prefill"
    or "decode" gives "}:prefill" and "}:decode", rarer than each part)."""
    best: frozenset[str] | None = None
    run: frozenset[str] | None = None          # the strings the items since the last break match

    def consider(found: frozenset[str] | None) -> None:
        nonlocal best
        if found and _score(found) > _score(best):
            best = found

    def end_run(word_end: bool = False) -> None:
        nonlocal run
        if run:
            cores = set()
            for text in run:
                core = safe_core(text)
                bounded = word_end and core and text.endswith(core) and core[-1].isalnum()
                cores.add(core + WORD_END if bounded else core)
            consider(frozenset(cores))
        run = None

    for op, av in items:
        exact = _exact(op, av)
        if exact is not None:
            joined = exact if run is None else _product(run, exact)
            if joined is None:
                end_run()
                joined = exact
            run = joined
            continue
        end_run(op is _sre_c.AT and av is _sre_c.AT_BOUNDARY)
        if op is _sre_c.SUBPATTERN:
            _group, add_flags, _del, sub = av
            if not add_flags & re.IGNORECASE:
                consider(_sequence(list(sub)))
        elif op is _sre_c.BRANCH:
            sets = [_sequence(list(branch)) for branch in av[1]]
            if all(sets):
                consider(frozenset().union(*sets))        # type: ignore[arg-type]
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT) or op.name == "POSSESSIVE_REPEAT":
            low, _high, sub = av
            if low >= 1:
                consider(_sequence(list(sub)))
        elif op.name == "ATOMIC_GROUP":
            consider(_sequence(list(av)))
        # anything else (classes, anchors, look-arounds, back-references) breaks the literal run
    end_run()
    return best


MAX_EXACT = 16           # the most strings a stretch matched exactly is spelled out as


def _product(heads: frozenset[str], tails: frozenset[str]) -> frozenset[str] | None:
    if len(heads) * len(tails) > MAX_EXACT:
        return None
    return frozenset(h + t for h in heads for t in tails)


def _exact(op, av) -> frozenset[str] | None:
    """The strings a parsed item matches, when they are few (a literal, a small class of literal
    characters, a group or alternation of such, an optional or short fixed repeat of one)."""
    if op is _sre_c.LITERAL:
        return frozenset({chr(av)})
    if op is _sre_c.SUBPATTERN:
        _group, add_flags, _del, sub = av
        return None if add_flags & re.IGNORECASE else _exact_sequence(list(sub))
    if op is _sre_c.BRANCH:
        found: set[str] = set()
        for branch in av[1]:
            alt = _exact_sequence(list(branch))
            if alt is None or len(found | alt) > MAX_EXACT:
                return None
            found |= alt
        return frozenset(found)
    if op is _sre_c.IN:
        if len(av) > MAX_EXACT or not all(o is _sre_c.LITERAL for o, _ in av):
            return None                            # a range, a category, a negated class
        return frozenset(chr(v) for _, v in av)
    if op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT) or op.name == "POSSESSIVE_REPEAT":
        low, high, sub = av
        unit = _exact_sequence(list(sub))
        if unit is None or high > 3:
            return None
        out: set[str] = set()
        power: frozenset[str] | None = frozenset({""})
        for count in range(high + 1):
            if count >= low:
                out |= power
            if count < high:
                power = _product(power, unit)
                if power is None:
                    return None
        return frozenset(out) if len(out) <= MAX_EXACT else None
    return None


def _exact_sequence(items: list) -> frozenset[str] | None:
    out: frozenset[str] | None = frozenset({""})
    for op, av in items:
        part = _exact(op, av)
        if part is None:
            return None
        out = _product(out, part)
        if out is None:
            return None
    return out


def _best(*options: frozenset[str] | None) -> frozenset[str]:
    found = max(options, key=_score)
    return found if found else frozenset()


@dataclass(frozen=True)
class Anchors:
    """The literals, by what a line holding them is to the reader once the server serves."""

    feed: tuple[str, ...]          # may make a record at any time: the line is read
    served: tuple[str, ...]        # only ever an access-log record: says nothing once serving
    stats: tuple[str, ...]         # only ever a stats line: held raw once serving

    @property
    def every(self) -> tuple[str, ...]:
        return self.feed + self.served + self.stats


    def to_json(self) -> dict[str, list[str]]:
        return {"feed": list(self.feed), "served": list(self.served), "stats": list(self.stats)}

    @classmethod
    def from_json(cls, doc: Any) -> "Anchors | None":
        """The anchors stored by to_json, or None when `doc` is not such a record."""
        if not isinstance(doc, dict):
            return None
        groups = [doc.get(k) for k in ("feed", "served", "stats")]
        if not all(isinstance(g, list) and all(isinstance(x, str) and x for x in g) for g in groups):
            return None
        return cls(*(tuple(g) for g in groups))


def derive(entries: Iterable[Any]) -> Anchors:
    """The anchors of the signature entries (sigdata.Entry: guards, pattern, kind) and of the
    reader's own structural lines."""
    kinds_of: dict[str, set[str]] = {}
    for entry in entries:
        guards = frozenset(safe_core(g) for g in entry.guards)
        for literal in _best(guards, necessary_literals(entry.pattern)):
            kinds_of.setdefault(literal, set()).add(entry.kind)
    exception = necessary_literals(EXCEPTION.pattern) or frozenset()
    for literal in {safe_core(s) for s in STRUCTURAL} | exception:
        kinds_of.setdefault(literal, set()).add("structure")
    kinds_of.setdefault(safe_core(ACCESS_MARK.decode()), set()).add(Kind.REQUEST_SERVED.value)
    if "" in kinds_of:            # a guard made only of escapable characters: every line may matter
        raise ValueError("a signature guard has no literal that survives escaping")
    feed, served, stats = [], [], []
    for literal, kinds in sorted(kinds_of.items()):
        if kinds == {Kind.REQUEST_SERVED.value}:
            served.append(literal)
        elif kinds == {Kind.STATS.value}:
            stats.append(literal)
        else:
            feed.append(literal)
    return Anchors(_minimal(feed), _minimal(served), _minimal(stats))


_SOURCES = ("prefilter_anchors.py", "log_patterns.py", "kinds.py")


def code_stamp() -> str:
    """What the derivation depends on besides the signature data: its own code, the reader's
    structural patterns and kinds, and the regex parser (the Python version)."""
    from ..datastamp import stamp

    here = Path(__file__).resolve().parent
    return stamp([b"%d.%d\0" % sys.version_info[:2],
                  *(name.encode() + b"\0" + (here / name).read_bytes() + b"\0" for name in _SOURCES)])


def _minimal(literals: list[str]) -> tuple[str, ...]:
    """Drop a literal that holds another of the same group: the shorter one finds its lines (one
    that must end a word finds only its own)."""
    keep = sorted(set(literals), key=len)
    out: list[str] = []
    for lit in keep:
        if not any(short in lit for short in out if not short.endswith(WORD_END)):
            out.append(lit)
    return tuple(sorted(out))
