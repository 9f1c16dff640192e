"""Raised and cleared: the conditions of successive readings, de-duplicated.

A condition that stays true is said once, when it is first raised; it is said again only after
it cleared. It clears once it has been absent for CLEAR_AFTER readings in a row, so a value
hovering at a threshold (KV usage 89.9%, 90.1%, 89.9% ...) does not write a line every few
seconds. The same events feed the incident's timeline (--incident) and the plain output of a
watch whose stdout is not a terminal.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from .readings import Condition

CLEAR_AFTER = 3


@dataclass(frozen=True)
class Event:
    kind: str               # "raised" | "cleared"
    time: datetime
    condition: Condition
    since: datetime | None = None      # cleared: when it was raised

    @property
    def text(self) -> str:
        if self.kind == "raised":
            return self.condition.text
        span = f" after {_duration(self.time - self.since)}" if self.since else ""
        return f"cleared{span}: {self.condition.title}"


@dataclass
class _Active:
    condition: Condition
    since: datetime
    absent: int = 0


class Tracker:
    def __init__(self, clear_after: int = CLEAR_AFTER) -> None:
        self.clear_after = clear_after
        self._active: dict[tuple[str, ...], _Active] = {}

    def update(self, conditions: Iterable[Condition], when: datetime) -> list[Event]:
        events = []
        present = set()
        for c in conditions:
            present.add(c.key)
            active = self._active.get(c.key)
            if active is None:
                self._active[c.key] = _Active(c, when)
                events.append(Event("raised", when, c))
            else:
                active.absent = 0
        for key, active in list(self._active.items()):
            if key in present:
                continue
            active.absent += 1
            if active.absent >= self.clear_after:
                del self._active[key]
                events.append(Event("cleared", when, active.condition, active.since))
        return events


def _duration(delta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"
