"""The proof in the incident's record: one step of `actions.jsonl`, written the way recovery
writes its steps (a start record before the load, an end record after it, hash-chained and
signed), so the timeline shows "fix proven under the incident's peak" — or the failure — with
the other recovery steps. The incident directory is held by descriptor (`HeldDir`): it may
belong to another user, and nothing is written through a link.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ..recovery.audit import AuditLog
from ..safedir import HeldDir
from .result import FAILED, INTERRUPTED, ProveResult

STEP = "prove"
ACTION = "prove"


def outcome_lines(result: ProveResult) -> list[str]:
    """The step's output: the report, its one-line summary last (the timeline shows the last line)."""
    return [*result.lines()[1:], result.summary()]


def outcome_data(result: ProveResult) -> dict[str, Any]:
    doc = result.json()
    return {k: doc[k] for k in ("result", "summary", "target", "profile", "first_failure", "requests",
                                "latency_s", "server", "gpu", "reproduced")}


@contextmanager
def recorded(incident: str, args: dict[str, Any]) -> Iterator[list[ProveResult]]:
    """Write the start record, let the body run the proof (it appends its result), write the end.
    An exception or Ctrl-C in the body is recorded as such by the audit log, then re-raised."""
    held = HeldDir.open(incident)
    try:
        audit = AuditLog(held)
        box: list[ProveResult] = []
        with audit.step(STEP, ACTION, args=args) as handle:
            yield box
            if box:
                result = box[0]
                handle.result = {FAILED: "failed", INTERRUPTED: "interrupted"}.get(result.result)
                handle.output = "\n".join(outcome_lines(result))
                handle.data = outcome_data(result)
    finally:
        held.close()
