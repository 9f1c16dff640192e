"""Records shared by every layer: evidence in, verdict out.

Parsers produce `Evidence`; the flowchart reads an `EvidenceSet` and returns a `Verdict`.
Everything here is plain data (frozen dataclasses), so a test can build any of it in memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Iterable, Iterator, Mapping


class OomClass(str, Enum):
    """The verdict's classes: the schema's contract, and the registration of the class modules
    (each member's rules, advice and spec are triage/classes/<value>.py, in this order)."""

    STARTUP = "startup"
    BURST = "burst"
    CHRONIC = "chronic"
    PREFIX_CACHE = "prefix_cache"
    NOT_GPU_OOM = "not_gpu_oom"
    NO_OOM = "no_oom"
    UNKNOWN = "unknown"


class Phase(str, Enum):
    """Where in the server's life a line was written."""

    STARTING = "starting"      # loading weights, profiling, sizing the KV cache, capturing graphs
    READY = "ready"            # engine initialised / API server listening, no request seen yet
    SERVING = "serving"        # it answered requests (or logged non-idle stats) at least once
    UNKNOWN = "unknown"


@dataclass(frozen=True, eq=False)
class Evidence:
    """One fact read from one place. `fields` holds the numbers the rules use."""

    source: str                      # display path of the file ("-" for stdin)
    line: int | None                 # 1-based line number, None for whole-file facts
    kind: str                        # a `triage.evidence.kinds.Kind` value
    text: str                        # the cleaned line (or a one-line rendering of the fact)
    time: datetime | None = None     # UTC, None when the source carries no time
    fields: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0                     # order of appearance across all inputs (stable sort key)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


@dataclass(frozen=True)
class SourceInfo:
    """What was read from one input and how its times were interpreted."""

    path: str
    kind: str                        # the parser that read it ("log", "prometheus", "nvidia_smi", ...)
    records: int
    time_note: str | None = None     # e.g. "year 2026 from file mtime; times taken as UTC"
    error: str | None = None         # why it could not be read (whole or in part); the rest was read


@dataclass
class EvidenceSet:
    """Everything the parsers found, in order of appearance."""

    items: list[Evidence] = field(default_factory=list)
    sources: list[SourceInfo] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def of(self, *kinds: str) -> list[Evidence]:
        wanted = set(kinds)
        return [e for e in self.items if e.kind in wanted]

    def first(self, *kinds: str) -> Evidence | None:
        found = self.of(*kinds)
        return found[0] if found else None

    def last(self, *kinds: str) -> Evidence | None:
        found = self.of(*kinds)
        return found[-1] if found else None

    def has(self, *kinds: str) -> bool:
        wanted = set(kinds)
        return any(e.kind in wanted for e in self.items)

    def __iter__(self) -> Iterator[Evidence]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def extend(self, items: Iterable[Evidence]) -> None:
        self.items.extend(items)


@dataclass(frozen=True, eq=False)
class Cause:
    """A sub-cause of the verdict, with the evidence that names it."""
    id: str
    title: str
    evidence: tuple[Evidence, ...] = ()
    detail: str = ""


@dataclass(frozen=True, eq=False)
class Step:
    """One question of the flowchart walk, with the branch taken and why."""

    question: str
    answer: str
    why: str
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class Recommendation:
    """One setting to change, from what to what, and why."""
    setting: str                     # a CLI flag name without dashes, or an env var
    from_value: Any
    to_value: Any
    why: str
    basis: str = "incident"          # "incident" (own numbers) | "rule_of_thumb" | "knowledge_base"
    env: bool = False                # an environment variable, not a flag
    # A step for a person, not a launch change: an engine upgrade, a restart schedule, freeing the
    # GPU of another process, another GPU or checkpoint. No relaunch makes it (kept out of the diff).
    manual: bool = False


@dataclass
class Verdict:
    """The answer: the class of OOM, how sure, the flowchart path taken, the causes, evidence and advice."""
    oom_class: OomClass
    confidence: float
    summary: str
    path: list[Step] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)   # what the summary rests on
    attach: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    recommendations: list[Recommendation] = field(default_factory=list)
    command: str | None = None
    runbook: str | None = None
