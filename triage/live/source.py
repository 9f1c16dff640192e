"""One source of `triage collect`: its time limit, the files it wrote and how it ended.

A source runs in a thread of its own and reports through its `SourceRun`: files go through it
(so a source cut off at its timeout cannot add any more) and it ends `ok`, `failed` or `skipped`
with a reason a person can act on (no GPU, permission denied, server down, kubectl absent).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable

from .staging import FileRecord, Staging

OK, FAILED, SKIPPED, TIMEOUT = "ok", "failed", "skipped", "timeout"


@dataclass
class SourceRun:
    name: str                     # what it is: nvml, metrics, log, dmesg ...
    source: str                   # where from: a command line, a URL, an API
    timeout_s: float
    staging: Staging
    started: float = field(default_factory=time.monotonic)
    status: str | None = None     # None while running
    reason: str | None = None     # why it failed or was skipped
    detail: str | None = None     # what it found, in a few words
    files: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)     # what incident.yaml says of it (a model list...)
    ended: float | None = None
    _closed: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def deadline(self) -> float:
        return self.started + self.timeout_s

    def left(self) -> float:
        """Seconds left before this source is cut off (never below a small floor, for timeouts)."""
        return max(0.05, self.deadline - time.monotonic())

    def is_open(self) -> bool:
        return not self._closed.is_set()

    def write(self, rel: str, data: bytes, source: str | None = None) -> FileRecord:
        record = self.staging.write(rel, data, source or self.source, self.started, self.is_open)
        self.files.append(record.path)
        return record

    def write_with(self, rel: str, fill: Callable[[BinaryIO], object], source: str | None = None) -> FileRecord:
        record = self.staging.write_with(rel, fill, source or self.source, self.started, self.is_open)
        self.files.append(record.path)
        return record

    def ok(self, detail: str | None = None) -> None:
        self._end(OK, None, detail)

    def fail(self, reason: str) -> None:
        self._end(FAILED, reason, None)

    def skip(self, reason: str) -> None:
        self._end(SKIPPED, reason, None)

    def cut(self, reason: str | None = None) -> None:
        """Called by the collector when the time is up: no more files, status `timeout`."""
        self._closed.set()
        if self.status is None:
            self.status, self.reason = TIMEOUT, reason or f"no answer within {self.timeout_s:.3g} s: cut off"
            self.ended = time.monotonic()

    def _end(self, status: str, reason: str | None, detail: str | None) -> None:
        if self._closed.is_set() or self.status is not None:
            return                          # cut off already: the late answer is not taken
        self.status, self.reason, self.detail = status, reason, detail
        self.ended = time.monotonic()

    @property
    def duration_s(self) -> float:
        return round((self.ended or time.monotonic()) - self.started, 3)

    def line(self) -> str:
        """The progress line for stderr: `metrics: ok (3 scrapes) 4.1 s`."""
        said = self.detail if self.status == OK else self.reason
        return f"{self.name}: {self.status}" + (f" ({said})" if said else "") + f", {self.duration_s:.1f} s"

    def to_json(self) -> dict:
        doc = {"name": self.name, "source": self.source, "status": self.status, "duration_s": self.duration_s,
               "timeout_s": round(self.timeout_s, 3), "files": list(self.files)}
        if self.reason:
            doc["reason"] = self.reason
        if self.detail:
            doc["detail"] = self.detail
        return doc
