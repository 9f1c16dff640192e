"""The incident timeline: every source of a bundle merged into one ordered list of events, with
the key moments (impact start, detected, first response, mitigated, resolved) and durations.

    from triage.timeline import build_timeline, to_frame
    tl = build_timeline("samples/incident-a-multimodal-fleet")
    tl.durations["total"]        # timedelta(seconds=1787)

Names load on first use: `triage classify` registers the `note` and `timeline` commands
without paying for the timeline, and pandas is imported only when a timeline is merged or framed.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # for type checkers and IDEs; at run time names load on first use
    from .build import build_timeline
    from .model import CATEGORIES, DURATION_LABELS, DURATIONS, MOMENT_NAMES, Event, Moment, Timeline
    from .render import to_csv, to_frame, to_json

_EXPORTS = {
    "build_timeline": "build",
    "to_frame": "render", "to_json": "render", "to_csv": "render",
    "Event": "model", "Moment": "model", "Timeline": "model", "CATEGORIES": "model", "MOMENT_NAMES": "model",
    "DURATIONS": "model", "DURATION_LABELS": "model",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
