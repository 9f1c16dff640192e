"""Unknown: a failure is in the evidence, but not enough to name its class.

Reached when the failure's kind is not stated (a cut traceback, a bare exception), when a GPU
OOM's lifecycle phase cannot be told and no class-specific signal stands out, or when nothing
in the input is recognisable, or when nothing failed in what was read but an input was cut short
or could not be read (the failure may be in what is missing). It always says what to attach: a confident wrong class sends the
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
    evidence = list(evidence or [])
    from .no_oom import cut_inputs, describe_cut

    cut = cut_inputs(ctx)     # inputs cut short or unreadable: each is named in what to attach
    if cut and not ctx.any_failure:
        # Nothing failed in what was read, but part of the input was not read: no all-clear.
        names = ", ".join(src.path for src, _ in cut)
        why = (f"no failure in what was read, but {names} {'was' if len(cut) == 1 else 'were'} cut short "
               "or unreadable: the failure may be in the missing part")
        evidence += [last for _, last in cut if last is not None and last not in evidence]
    if not ctx.any_failure and not ctx.ev.items:
        wanted.append("the server log covering the failure (nothing in the input was recognised)")
    tbs = ctx.ev.of(Kind.TRACEBACK)
    if tbs and not ctx.gpu_oom and not ctx.not_gpu:
        wanted.append("the end of the traceback: its final exception line says what failed")
    if ctx.gpu_oom and not wanted:
        wanted.append("the log lines before the OOM (start-up lines, or requests/stats showing it was serving)")
    if not wanted and not cut:
        wanted.append("the full server log and dmesg from the time of the failure")
    wanted += [describe_cut(src, last) for src, last in cut]
    return Assessment(SPEC.id, conf.NONE, f"Unknown: {why}", why, evidence, [], wanted)
