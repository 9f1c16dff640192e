"""What a class module declares (its spec) and returns (its assessment).

The specs are NamedTuples, not frozen dataclasses: every classify builds them on its cold path,
and a NamedTuple class costs a tenth as much to create.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from ..model import Cause, Evidence, OomClass


class Branch(str, Enum):
    """Where the flowchart's walk reaches a class."""

    NOT_GPU = "not_gpu"          # the GPU-or-not question answered no
    HEALTHY = "healthy"          # no failure, and the evidence shows a working server
    STARTUP = "startup"          # a GPU OOM before the engine served
    RUNTIME = "runtime"          # a GPU OOM while serving: the runtime classes compete for it
    FALLBACK = "fallback"        # a failure, but too little evidence to name its class


class CauseSpec(NamedTuple):
    """A sub-cause a verdict may name (`causes[].id`), and the thresholds it is judged by."""

    id: str
    title: str
    thresholds: tuple[str, ...] = ()     # names in triage.thresholds.TABLE


class ClassSpec(NamedTuple):
    """Everything outside a class module needs to know about its class."""

    id: OomClass
    label: str                           # how a postmortem names it ("runtime burst OOM")
    short_label: str                     # how the fleet summary counts it ("burst OOM")
    colour: str                          # the console's colour for it
    branch: Branch
    causes: tuple[CauseSpec, ...] = ()
    # Runtime classes compete for an OOM while serving; on equal confidence the lower rank wins.
    runtime_rank: int | None = None
    # The generic runtime class: a specific one that is well supported explains the pressure better.
    generic: bool = False
    # The order `triage watch` lists risks in, most specific first (GPU OOM classes only).
    specificity: int | None = None
    # Asked on the no-failure branch, before the healthy check: a class that can be seen coming.
    early_question: str | None = None

    @property
    def gpu_oom(self) -> bool:
        """A GPU out-of-memory class: watch warns of it, advice relaunches with new settings."""
        return self.branch in (Branch.STARTUP, Branch.RUNTIME)

    @property
    def settles(self) -> bool:
        """The verdict names what failed (a GPU OOM or a look-alike), not "healthy" or "unknown"."""
        return self.gpu_oom or self.branch is Branch.NOT_GPU

    @property
    def cause_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.causes)


@dataclass
class Assessment:
    """One class module's answer: how well the evidence supports its class, and why."""

    oom_class: OomClass
    confidence: float                      # 0 = no support at all
    summary: str
    why: str                               # the flowchart branch explanation
    evidence: list[Evidence] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    attach: list[str] = field(default_factory=list)

    @property
    def supported(self) -> bool:
        return self.confidence > 0


def pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:.1f}%"
