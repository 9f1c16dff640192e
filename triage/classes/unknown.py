"""Unknown: a failure is in the evidence, but not enough to name its class.

Reached when the failure's kind is not stated (a cut traceback, a bare exception), when a GPU
OOM's lifecycle phase cannot be told and no class-specific signal stands out, or when nothing
in the input is recognisable. It always says what to attach: a confident wrong class sends the
on-call down the wrong path, "attach X" does not.
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..model import Evidence, OomClass
from .base import Assessment, Branch, ClassSpec

SPEC = ClassSpec(id=OomClass.UNKNOWN, label="unclassified failure", short_label="unknown (logs needed)",
                 colour="white", branch=Branch.FALLBACK)


def assess(ctx: Context, why: str, evidence: list[Evidence] | None = None,
           attach: list[str] | None = None) -> Assessment:
    wanted = list(attach or [])
    if not ctx.any_failure and not ctx.ev.items:
        wanted.append("the server log covering the failure (nothing in the input was recognised)")
    tbs = ctx.ev.of(Kind.TRACEBACK)
    if tbs and not ctx.gpu_oom and not ctx.not_gpu:
        wanted.append("the end of the traceback: its final exception line says what failed")
    if ctx.gpu_oom and not wanted:
        wanted.append("the log lines before the OOM (start-up lines, or requests/stats showing it was serving)")
    if not wanted:
        wanted.append("the full server log and dmesg from the time of the failure")
    return Assessment(SPEC.id, conf.NONE, f"Unknown: {why}", why, list(evidence or []), [], wanted)
