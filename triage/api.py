"""The library entry points the CLI (and other programs) call."""
from __future__ import annotations

from typing import Callable, Sequence

from .evidence import load_evidence
from .flowchart import classify
from .model import EvidenceSet, Verdict


def classify_paths(paths: Sequence[str], *, year: int | None = None, tz: str | None = None,
                   stdin_data: bytes | None = None,
                   progress: Callable[[int], None] | None = None) -> tuple[Verdict, EvidenceSet]:
    evidence = load_evidence(paths, year=year, tz=tz, stdin_data=stdin_data, progress=progress)
    return classify(evidence), evidence
