"""The watch loop: read, publish (screen, exporter, incident), sleep to the next tick, until stopped.

Readings keep a fixed schedule (a slow reading shortens the next sleep; missed ticks are skipped,
never made up in a burst). Output goes where it is read: a live dashboard on a terminal; on a
pipe or a log (a sidecar) one line per raised or cleared condition, or with --json one
triage.watch/v1 object per reading (JSON Lines). Ctrl-C ends the loop through KeyboardInterrupt
(the CLI's exit 130); SIGTERM, a supervisor's stop, ends it normally (exit 0).
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Protocol

from ...timestamps import rfc3339
from .alerts import Event, Tracker
from .exporter import Exporter
from .incident_notes import IncidentNotes
from .readings import Reading
from .watcher import Watcher


class View(Protocol):
    def show(self, reading: Reading, events: list[Event]) -> None: ...
    def close(self) -> None: ...


class Publisher:
    """Everything a reading goes to besides the screen: the exporter and the incident."""

    def __init__(self, exporter: Exporter | None, notes: IncidentNotes | None, warn: Callable[[str], None]) -> None:
        self.exporter, self.notes, self.warn = exporter, notes, warn
        self.tracker = Tracker()
        self._note_problem: str | None = None

    def publish(self, reading: Reading) -> list[Event]:
        if self.exporter is not None:
            self.exporter.update(reading)
        events = self.tracker.update(reading.warnings, reading.time)
        if self.notes is not None:
            for event in events:
                if not self.notes.write(event) and self.notes.failed != self._note_problem:
                    self._note_problem = self.notes.failed      # said once, not every reading
                    self.warn(f"cannot write to the incident: {self.notes.failed}")
        return events


def run(watcher: Watcher, view: View, publisher: Publisher, stop: threading.Event | None = None, *,
        after: Callable[[Reading], object] | None = None, readings: int | None = None) -> None:
    """`after`: called with each reading once it is shown (watch --act); `readings`: stop after that many."""
    stop = stop or threading.Event()
    with _sigterm_stops(stop):
        next_at = time.monotonic()
        count = 0
        while not stop.is_set():
            reading = watcher.read()
            view.show(reading, publisher.publish(reading))
            if after is not None:
                after(reading)
            count += 1
            if readings is not None and count >= readings:
                break
            next_at += watcher.interval_s
            now = time.monotonic()
            if next_at < now:           # the reading took longer than the interval: skip, do not catch up
                next_at = now
            stop.wait(next_at - now)


@contextmanager
def _sigterm_stops(stop: threading.Event) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class LiveView:
    """rich.live on a terminal: redrawn once per reading (no refresh thread of its own)."""

    def __init__(self, extra: str = "") -> None:
        from rich.live import Live

        from ...console import Console

        self.extra = extra
        self.live = Live(console=Console(highlight=False), auto_refresh=False, transient=False,
                         redirect_stdout=False, redirect_stderr=False)
        self.live.start()

    def show(self, reading: Reading, events: list[Event]) -> None:
        from .dashboard import render

        self.live.update(render(reading, extra=self.extra), refresh=True)

    def close(self) -> None:
        self.live.stop()


class LinesView:
    """A pipe or a log: one line per raised or cleared condition, nothing while all is steady."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write

    def show(self, reading: Reading, events: list[Event]) -> None:
        for event in events:
            self.write(f"{rfc3339(event.time)} {event.kind}: {event.text}")

    def close(self) -> None:
        pass


class JsonLinesView:
    def __init__(self, write: Callable[[dict], None]) -> None:
        self.write = write

    def show(self, reading: Reading, events: list[Event]) -> None:
        self.write(reading.to_json())
        sys.stdout.flush()

    def close(self) -> None:
        pass
