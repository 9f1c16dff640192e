"""The log lines that matter and the numbers they carry: matching driven by the signature data.

The signatures themselves are data: triage/data/signatures.yaml holds one reviewed entry per
engine message (kind, engine, versions, guard, pattern, fields with units, examples that must
and must not match, why, and a source), loaded through triage.evidence.sigdata (a compiled
JSON form keeps the cold start fast). The Python extractors that entries name live in
triage.evidence.extractors. This module turns the entries into `Signature`s and matches them.

Each `Signature` has a cheap substring guard (checked first, so a 1 GB log does not pay for
every pattern on every line), a pattern and an extractor. `match_message` returns every
(kind, fields) pair a message carries, in the file's priority order: a message that says "Out of
memory: Killed process" is the kernel's host OOM killer, not a CUDA OOM.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .. import rxcache
from . import guard_trie, sigdata
from .extractors import (EXTRACTORS, Extractor, Fields, _int, argv_to_args,  # noqa: F401 (re-exported)
                         literal, parse_config_pairs)
from .kinds import GPU_OOM_KINDS, HEALTHY_KINDS, NOT_GPU_KINDS, Kind


@dataclass(frozen=True)
class Signature:
    """A signature ready to match: its kind, guards, pattern and extractor."""
    kind: Kind
    guards: tuple[str, ...]          # at least one must be a substring of the message
    regex: "str | re.Pattern[str]"   # compiled on first use: most runs need a handful of them
    extract: Extractor | None = None
    final: bool = False              # stop matching further signatures after this one
    id: str = ""
    # An entry of the engine-independent layer (`generic-*`): it adds coverage where no engine's own
    # entry read the line, never a second reading of a line one read the same way (_family).
    generic: bool = False
    engine_specific: bool = False    # written for one engine (not `any`)

    @property
    def pattern(self) -> re.Pattern[str]:
        return self.regex if isinstance(self.regex, re.Pattern) else _compiled(self.regex)


_COMPILED: dict[str, re.Pattern[str]] = {}


def _compiled(regex: str) -> re.Pattern[str]:
    pat = _COMPILED.get(regex)
    if pat is None:
        pat = _COMPILED[regex] = rxcache.compiled(regex)
    return pat


GENERIC_PREFIX = "generic-"


def load_signatures() -> tuple[Signature, ...]:
    """The data file's entries as Signatures, in priority order."""
    return tuple(Signature(Kind(e.kind), e.guards, e.pattern, sigdata.matcher(e, EXTRACTORS), e.final, e.id,
                           e.id.startswith(GENERIC_PREFIX), e.engine != "any")
                 for e in sigdata.entries())


SIGNATURES: tuple[Signature, ...] = load_signatures()
#: Continuation lines of a multi-line SGLang pool OOM ("Available full tokens: ...").
# SGLang prints the pool state after a prefill OOM, in several wordings over versions:
#   "Available full tokens: 320512 (full_available_size=192 + full_evictable_size_=320320)"
#   "Available tokens: 201344" / "self.token_to_kv_pool_allocator.available_size()=1152" /
#   "self.tree_cache.evictable_size()=200192"
POOL_FIELDS = (
    ("available_tokens", re.compile(r"Available (?:full )?tokens: (\d+)")),
    ("free_tokens", re.compile(r"available_size(?:\(\))?=(\d+)")),
    ("evictable_tokens", re.compile(r"evictable_size_?(?:\(\))?=(\d+)")),
)


def pool_detail(text: str) -> Fields:
    out: Fields = {}
    for key, rx in POOL_FIELDS:
        m = rx.search(text)
        if m and _int(m.group(1)) is not None:
            out[key] = _int(m.group(1))
    return out

# The guards present in a message select the signatures worth trying. A big log's lines are
# searched for them in one pass: a regex shaped as the guards' trie (guard_trie.py) finds the
# longest guard at each position, whose prefixes among the guards are there too; testing each of
# some 860 guards with `in` costs ~70 us a line, the trie ~15 us. The trie's text is stored with
# the compiled signatures and its program in the pattern table (rxcache): with both it costs ~5 ms
# to set up and is used after TRIE_AFTER_CACHED lines; without, building it costs ~25 ms more
# and waits for TRIE_AFTER_LINES, so a small log never pays for it.
_BY_GUARD: dict[str, list[int]] = {}
for _i, _sig in enumerate(SIGNATURES):
    for _g in _sig.guards:
        _BY_GUARD.setdefault(_g, []).append(_i)
TRIE_AFTER_LINES = 2000
TRIE_AFTER_CACHED = 64


class _GuardIndex:
    """Which signatures' guards a message holds: plain substring tests for the first lines, the
    trie once a log has proved long enough to pay for setting it up."""

    def __init__(self, by_guard: dict[str, list[int]], trie_after: int | None = None,
                 stored: str | None = None):
        self.by_guard = by_guard
        self.source = stored
        if trie_after is None:
            ready = self.source is not None and rxcache.holds(self.source)
            trie_after = TRIE_AFTER_CACHED if ready else TRIE_AFTER_LINES
        self.trie_after = trie_after
        # Before the trie: each guard filed under its first two characters, so a message tests only
        # the guards that start with a pair it holds (about a third of the time of testing all of
        # them with `in`); a guard shorter than that is always tested.
        pairs: dict[str, list[tuple[str, list[int]]]] = {}
        self.always: tuple[tuple[str, list[int]], ...] = tuple((g, ids) for g, ids in by_guard.items() if len(g) < 2)
        for guard, indexes in by_guard.items():
            if len(guard) >= 2:
                pairs.setdefault(guard[:2], []).append((guard, indexes))
        self.by_pair = {pair: tuple(entries) for pair, entries in pairs.items()}
        self.calls = 0
        self.finder: re.Pattern[str] | None = None
        self.at_guard: dict[str, frozenset[int]] = {}

    def __call__(self, msg: str) -> set[int]:
        finder = self.finder
        if finder is None:
            self.calls += 1
            if self.calls <= self.trie_after:
                return self._plain(msg)
            finder = self._build()
        return {i for m in finder.finditer(msg) if m.group(1) for i in self.at_guard[m.group(1)]}

    def _plain(self, msg: str) -> set[int]:
        found = {i for guard, indexes in self.always if guard in msg for i in indexes}
        by_pair = self.by_pair
        for pair in by_pair.keys() & {msg[k:k + 2] for k in range(len(msg) - 1)}:
            for guard, indexes in by_pair[pair]:
                if guard in msg:
                    found.update(indexes)
        return found

    def _build(self) -> re.Pattern[str]:
        by_guard = self.by_guard
        # each guard -> the signatures of it and of every guard that is a prefix of it
        self.at_guard = {g: frozenset(i for k in range(1, len(g) + 1) for i in by_guard.get(g[:k], ()))
                         for g in by_guard}
        if self.source is None:
            self.source = guard_trie.finder_source(by_guard)
        self.finder = rxcache.compiled(self.source)
        return self.finder


_GUARD_INDEX = _GuardIndex(_BY_GUARD, stored=sigdata.compiled_guard_finder(_BY_GUARD))


@lru_cache(maxsize=4096)
def _candidates(msg: str) -> tuple[int, ...]:
    # Cached: a storm repeats the same messages (a dead engine's per-request error).
    return tuple(sorted(_GUARD_INDEX(msg)))


def _family(kind: Kind) -> str:
    """What a reading says of the line: a GPU memory exhaustion, a look-alike, normal work, or its
    own kind. A generic entry adds nothing to a line an engine's entry read the same way (a second
    reading of one start-up check), but may name what a wrapper line carries (an engine that died
    of a missed heartbeat)."""
    if kind in GPU_OOM_KINDS:
        return "gpu_oom"
    if kind in NOT_GPU_KINDS:
        return "not_gpu"
    if kind in HEALTHY_KINDS:
        return "healthy"
    return kind.value


def match_message(msg: str) -> list[tuple[Kind, Fields]]:
    """Every signature the message matches, most specific first."""
    candidates = _candidates(msg)
    if not candidates:
        return []
    out: list[tuple[Kind, Fields]] = []
    seen: set[Kind] = set()
    read: set[str] = set()             # the families an engine's own entry already read the line as
    for i in candidates:
        sig = SIGNATURES[i]
        if sig.kind in seen or (sig.generic and _family(sig.kind) in read):
            continue
        m = sig.pattern.search(msg)
        if not m:
            continue
        fields = sig.extract(m, msg) if sig.extract is not None else {}
        if fields is None:
            continue
        out.append((sig.kind, fields))
        seen.add(sig.kind)
        if sig.engine_specific:
            read.add(_family(sig.kind))
        if sig.final:
            break
    # One failure line is one failure: the specific start-up checks and the allocator message
    # already say "GPU OOM"; a raw CUDA_OOM on the same line adds nothing.
    kinds = {k for k, _ in out}
    if Kind.CUDA_OOM in kinds and kinds & {Kind.TORCH_OOM, Kind.WARMUP_OOM, Kind.KV_POOL_OOM, Kind.LOAD_MODEL_OOM}:
        out = [(k, f) for k, f in out if k != Kind.CUDA_OOM]
    # A line that only states it failed ("[ERROR] ...", "Error: ...") is read that way when no entry
    # says what failed; where one does, the statement adds nothing but an unknown failure beside it.
    # A healthy reading of the same line (a request id, a start-up step) does not say what failed.
    if any(k is Kind.EXCEPTION and "statement" in f for k, f in out) and \
            any(k is not Kind.EXCEPTION and k not in HEALTHY_KINDS for k, _ in out):
        out = [(k, f) for k, f in out if not (k is Kind.EXCEPTION and "statement" in f)]
    return _fold_failed_function(out)


def _fold_failed_function(out: list[tuple[Kind, Fields]]) -> list[tuple[Kind, Fields]]:
    """A native function's name on a failure line another entry already read says where, not what:
    it rides on those readings (the phase question reads it there) instead of adding a failure of
    unknown kind beside them."""
    named = [f for k, f in out if k is Kind.EXCEPTION and "failed_function" in f]
    rest = [(k, f) for k, f in out if not (k is Kind.EXCEPTION and "failed_function" in f)]
    if not named or not rest:
        return out
    return [(k, {**f, "failed_function": named[0]["failed_function"]}) for k, f in rest]
