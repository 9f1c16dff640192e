"""The regex that finds every signature guard a message holds in one pass, shaped as their trie.

It is tried at every position (a lookahead, so guards that overlap are all seen) and matches the
longest guard there. Building its text from ~860 guards costs ~11 ms of Python and compiling it
~13 ms: `python -m triage.evidence.sigdata build` stores the text with the signatures' compiled
JSON (stamped with this file, so a change here is never read through a stale text) and
`python -m triage.rxcache_build build` the compiled program.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterable


def trie_regex(words: Iterable[str]) -> str:
    """The longest-match regex of a set of literals, shaped as their trie."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


def finder_source(guards: Iterable[str]) -> str:
    """The text of the finder: group 1 is the longest guard at each position."""
    return "(?=(" + trie_regex(guards) + "))"


def guards_digest(guards: Iterable[str]) -> str:
    """What the finder's text depends on in the data: the set of guards (a table built from other
    entries, as a leave-one-engine-out run builds, has another)."""
    from ..datastamp import stamp

    return stamp(["\0".join(sorted(set(guards))).encode("utf-8")])


def code_stamp() -> str:
    """What a stored finder text depends on besides the guards: this file and the Python version."""
    from ..datastamp import stamp

    return stamp([b"%d.%d\0" % sys.version_info[:2], Path(__file__).read_bytes()])
