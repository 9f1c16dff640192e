"""Which runbook a verdict names, read from the runbooks' own `applies_to` (runbooks/*.yaml).

A runbook applies to verdict classes and cause ids. The one that names one of the verdict's
causes wins (host memory exhausted is handled the same whatever else was seen); else the one
that names its class; a class no runbook names (a healthy server, an unknown failure) gets none.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Sequence

from .base import ClassSpec
from .compiled import RUNBOOKS, load


@lru_cache(maxsize=1)
def index() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(runbook id, applies_to) of every bundled runbook, in file-name order."""
    return tuple((str(b["id"]), tuple(b["applies_to"])) for b in load(RUNBOOKS))


def runbook_for(oom_class: str, cause_ids: Sequence[str]) -> str | None:
    books = index()
    for cause in cause_ids:
        for book, applies in books:
            if cause in applies:
                return book
    return next((book for book, applies in books if oom_class in applies), None)


def verdict_runbooks(specs: Iterable[ClassSpec]) -> list[str]:
    """Every runbook a verdict can name, class by class (cause runbooks before the class's own)."""
    out: list[str] = []
    for spec in specs:
        for name in (*spec.cause_ids, spec.id.value):
            out += [book for book, applies in index() if name in applies and book not in out]
    return out
