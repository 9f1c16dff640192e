"""A regular expression compiled the first time it is used.

`triage classify` pays, at start-up, for every pattern the modules on its path compile when they
are imported; most of those read inputs one incident does not have (nvidia-smi tables,
memory_summary() rows, kernel OOM lines, API error bodies), and compiling them all costs about
10 ms of a 0.15 s classify. `lazy(...)` stands in for `re.compile(...)` at module level where a
pattern is not needed on every run: it compiles on first use and then answers as the compiled
pattern does (search, match, finditer, sub, pattern, ...), at the same cost per call once compiled.
"""
from __future__ import annotations

import re
from typing import Any

from . import rxcache


class LazyPattern:
    """re.compile(source, flags), done when the pattern is first used."""

    def __init__(self, source: str | bytes, flags: int = 0) -> None:
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern[Any] | None = None

    @property
    def compiled(self) -> re.Pattern[Any]:
        if self._compiled is None:
            # from the table of compiled patterns when it holds this one (triage/rxcache.py)
            self._compiled = rxcache.compiled(self._source, self._flags) if isinstance(self._source, str) \
                else re.compile(self._source, self._flags)
        return self._compiled

    @property
    def pattern(self) -> str | bytes:  # read without compiling (other patterns are built from it)
        return self._source

    def __getattr__(self, name: str) -> Any:
        # Reached only for names the instance lacks: the compiled pattern's methods and attributes.
        # A method is kept on the instance, so later calls cost what a compiled pattern's do.
        value = getattr(self.compiled, name)
        if callable(value):
            self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"lazy({self._source!r}, {self._flags})"


def lazy(source: str | bytes, flags: int = 0) -> LazyPattern:
    return LazyPattern(source, flags)
