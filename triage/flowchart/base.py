"""The result types of the flowchart modules."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Cause, Evidence, OomClass


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
