"""The library entry points the CLI (and other programs) call."""
from __future__ import annotations

from typing import Callable, Sequence

from .evidence import load_evidence, scrape
from .flowchart import classify
from .model import EvidenceSet, Verdict


def classify_paths(paths: Sequence[str], *, year: int | None = None, tz: str | None = None,
                   stdin_data: bytes | None = None, metrics_urls: Sequence[str] = (),
                   progress: Callable[[int], None] | None = None) -> tuple[Verdict, EvidenceSet]:
    extra = [scrape(url) for url in metrics_urls]
    evidence = load_evidence(paths, year=year, tz=tz, stdin_data=stdin_data, progress=progress, extra=extra)
    return classify(evidence), evidence
