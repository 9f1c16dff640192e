"""oom-triage: classify vLLM GPU out-of-memory incidents, recover safely, write the postmortem.

    from triage import classify
    verdict = classify(["incident/"])          # a Verdict (triage.model)
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "classify"]


def classify(paths, **options):
    """Classify the evidence at `paths` (files, bundle directories). Returns a Verdict."""
    from .api import classify_paths

    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    return classify_paths([str(p) for p in paths], **options)[0]
