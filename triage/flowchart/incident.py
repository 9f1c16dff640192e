"""What advice may read of a classified incident: a frozen summary, not the walk's working state.

The recommenders and the command line need the evidence, the engine, its launch arguments, the
failure and a few readings around it. They get exactly that, built once after the walk, so the
classifier's `Context` (caches, notes, the anchor it derived) stays the classifier's own.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from ..evidence.kinds import Kind
from ..model import Evidence, EvidenceSet, Verdict
from .context import Context, first_arg
from .causes import bug_readings
from .knowledge import Bug, matching_bugs


class Incident(NamedTuple):
    """The incident as advice sees it, built once after the walk (a NamedTuple: read-only, and
    cheap to define on the cold path)."""

    ev: EvidenceSet
    engine: str
    version: str | None
    engine_mode: str | None
    launch: tuple[Evidence, ...]                  # the launch-configuration records
    args: Mapping[str, Any]                       # launch arguments merged, the most direct source winning
    failure: Evidence | None                      # the failure the verdict is about
    failure_frames: tuple[tuple, ...]             # (path, line, function, ...) of its tracebacks
    stats_before_failure: tuple[Evidence, ...]    # the engine's stats lines before it
    gpu_total_bytes: int | None
    block_size: int
    known_bugs: tuple[Bug, ...] = ()              # engine bugs of this version named for the verdict's class

    def arg(self, *names: str) -> Any:
        """The first of `names` the launch arguments set (None and "None" are not set)."""
        return first_arg(self.args, names)


def incident_of(ctx: Context, verdict: Verdict) -> Incident:
    failure = ctx.primary
    # Matched again only where the verdict names a known bug: loading the knowledge base costs.
    named_bug = any(c.id == "known_engine_bug" for c in verdict.causes)
    return Incident(
        ev=ctx.ev, engine=ctx.engine, version=ctx.version, engine_mode=ctx.engine_mode, launch=tuple(ctx.launch),
        args=dict(ctx.args), failure=failure,
        failure_frames=tuple(ctx.frames_near(failure)) if failure is not None else (),
        stats_before_failure=tuple(ctx.last_before(Kind.STATS.value, failure)),
        gpu_total_bytes=ctx.gpu_total_bytes, block_size=ctx.block_size,
        known_bugs=tuple(bug for bug, _ in matching_bugs(ctx, verdict.oom_class.value, bug_readings(ctx)))
        if named_bug else ())
