"""The library entry points the CLI (and other programs) call.

The flowchart decides the class from the evidence; the advice (new settings, a command line,
the runbook) is worked out afterwards, here, from the verdict and what the flowchart hands over
of the incident (its launch arguments, the failure and the readings around it).
"""
from __future__ import annotations

from typing import Callable, Sequence

from .evidence import load_evidence, scrape
from .model import EvidenceSet, Verdict


def classify_evidence(evidence: EvidenceSet) -> Verdict:
    """The flowchart's verdict, then the advice for it."""
    from .advice import advise
    from .flowchart import decide

    verdict, incident = decide(evidence)
    advise(verdict, incident)
    return verdict


def classify_paths(paths: Sequence[str], *, year: int | None = None, tz: str | None = None,
                   stdin_data: bytes | None = None, metrics_urls: Sequence[str] = (),
                   progress: Callable[[int], None] | None = None,
                   max_bytes: int | None = None) -> tuple[Verdict, EvidenceSet]:
    """`max_bytes`: the most a compressed input may expand to (see evidence.base.input_limit)."""
    extra = [scrape(url) for url in metrics_urls]
    evidence = load_evidence(paths, year=year, tz=tz, stdin_data=stdin_data, progress=progress, extra=extra,
                             max_bytes=max_bytes)
    return classify_evidence(evidence), evidence
