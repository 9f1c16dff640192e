"""The bounded work queue of `triage serve` and its workers.

`submit` takes one whole payload or none of it: the alerts not seen before are journaled and
queued together when there is room for all of them, else the payload is answered 429 (and
Alertmanager sends it again later; what was already known then counts as a duplicate). The
queue never holds more than its bound, so a flood of alerts costs a bounded amount of memory.
Resolutions of open incidents are written at once (a file and a note); a resolution whose
incident is still being opened is kept in the journal and written by the worker that opens it.

`stop` ends the workers: they take no new alert, the ones in hand get until the deadline, and
whatever is still queued stays journaled as accepted, to be queued again at the next start.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import TriageError
from .alert_incident import Settings, close_incident, open_incident
from .alert_journal import CLOSED, OPEN, QUEUED, Journal
from .alert_payload import Alert, Payload, from_envelope
from .alert_post import Poster, firing_message, resolved_message
from .serve_stats import ServeStats

log = logging.getLogger("triage.serve")


class QueueFull(Exception):
    """No room for the payload's new alerts: answered 429."""


class Stopping(Exception):
    """The receiver is shutting down: answered 503."""


@dataclass(frozen=True)
class Receipt:
    accepted: int
    duplicates: int
    resolved: int

    def json(self) -> dict[str, int]:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "resolved": self.resolved}


class AlertQueue:
    def __init__(self, settings: Settings, *, bound: int, workers: int, poster: Poster | None = None) -> None:
        self.settings = settings
        self.bound = bound
        self.poster = poster
        self.journal = Journal(settings.incidents)
        self.stats = ServeStats(lambda: float(len(self.items)))
        self.items: deque[str] = deque()          # keys; the alerts live in the journal
        self.cond = threading.Condition()
        self.busy: set[str] = set()
        self.stopping = False
        self.threads = [threading.Thread(target=self._work, name=f"triage-serve-{i}", daemon=True)
                        for i in range(max(1, workers))]

    # -- start -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Queue what the last run left, finish its resolutions and posts, start the workers."""
        for problem in self.journal.problems:
            log.warning("journal: %s", problem)
        left = self.journal.queued()
        if left:
            log.info("re-queued %d alert(s) accepted by the last run", len(left))
        with self.cond:
            # accepted before: admitted past the bound
            self.items.extend([*(e.key for e in left), *(e.key for e in self.journal.unclosed())])
        for t in self.threads:
            t.start()
        if self.poster is not None and self.poster.left():
            threading.Thread(target=self._flush_outbox, name="triage-serve-outbox", daemon=True).start()

    # -- the HTTP side -----------------------------------------------------------------------------

    def submit(self, payload: Payload) -> Receipt:
        firing: list[Alert] = []
        resolved: list[Alert] = []
        duplicates = 0
        with self.cond:
            if self.stopping:
                raise Stopping()
            seen: set[str] = set()
            for alert in payload.alerts:
                entry = self.journal.get(alert.key)
                if alert.status == "resolved":
                    if entry is None or entry.state != CLOSED and entry.resolution is None:
                        resolved.append(alert)
                    else:
                        duplicates += 1
                elif entry is None and alert.key not in seen:
                    firing.append(alert)
                    seen.add(alert.key)
                else:
                    duplicates += 1
            fresh = len(firing) + len(resolved)
            if fresh and len(self.items) + fresh > self.bound:
                self.stats.alerts.labels("rejected").inc(len(payload.alerts))
                raise QueueFull(f"{len(self.items)} alerts queued (bound {self.bound}); "
                                f"{fresh} more do not fit")
            if firing:
                self.journal.accept([(a.key, a.envelope) for a in firing])
                self.items.extend(a.key for a in firing)
            for alert in resolved:
                # an alert never seen firing is opened (and closed) from its resolution alone
                self.journal.record("resolve", alert.key, alert=alert.envelope)
                if alert.key not in self.items:
                    self.items.append(alert.key)
            self.cond.notify_all()
        self.stats.alerts.labels("accepted").inc(len(firing))
        self.stats.alerts.labels("duplicate").inc(duplicates)
        self.stats.alerts.labels("resolved").inc(len(resolved))
        return Receipt(len(firing), duplicates, len(resolved))

    def depth(self) -> int:
        return len(self.items)

    # -- the workers -------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.items and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                key = self.items.popleft()
                if key in self.busy:
                    continue            # its worker looks for a resolution when it is done
                self.busy.add(key)
            try:
                self._open(key)
                self._close(key)
            except (OSError, TriageError) as exc:    # the journal cannot be written: kept, tried at the next start
                self.stats.failures.labels("incident").inc()
                log.error("alert %s: journal not written: %s", key, exc)
            finally:
                with self.cond:
                    self.busy.discard(key)
                    entry = self.journal.get(key)
                    # a resolution that came while this worker was past looking for one
                    if entry is not None and entry.state == OPEN and entry.resolution is not None \
                            and key not in self.items:
                        self.items.append(key)
                    self.cond.notify_all()

    def _open(self, key: str) -> None:
        entry = self.journal.get(key)
        if entry is None or entry.state != QUEUED:
            return
        try:
            alert = from_envelope(entry.alert)
            opened = open_incident(alert, self.settings)
        except (TriageError, OSError, ValueError) as exc:
            self.stats.failures.labels("incident").inc()
            log.error("alert %s: no incident: %s", key, exc)
            self.journal.record("fail", key, reason=str(exc)[:300])
            return
        except Exception as exc:       # a bug must cost one alert, never the receiver
            self.stats.failures.labels("incident").inc()
            log.exception("alert %s: no incident: %s", key, exc)
            self.journal.record("fail", key, reason=f"{exc.__class__.__name__}: {exc}"[:300])
            return
        cls = opened.verdict.oom_class.value
        self.journal.record("open", key, incident=opened.path.name, **{"class": cls})
        self.stats.verdicts.labels(cls).inc()
        log.info("alert %s: %s (%s) -> %s", key, cls, opened.verdict.summary[:160], opened.path)
        self._post(opened.path.name, firing_message(opened))

    def _close(self, key: str) -> None:
        entry = self.journal.get(key)
        if entry is None or entry.state != OPEN or entry.resolution is None or not entry.incident:
            return
        path = self.settings.incidents / entry.incident
        try:
            alert = from_envelope(entry.resolution)
            note = close_incident(path, alert)
        except (TriageError, OSError, ValueError) as exc:
            self.stats.failures.labels("resolve").inc()
            log.error("alert %s: resolution not written to %s: %s", key, path, exc)
            # recorded as done all the same: a bundle that refuses the note would be retried forever
            self.journal.record("close", key, incident=entry.incident, error=str(exc)[:300])
            return
        self.journal.record("close", key, incident=entry.incident)
        log.info("alert %s: resolved at %s -> %s", key, note["time"], path)
        self._post(entry.incident, resolved_message(alert, path, note))

    def _post(self, name: str, message: dict[str, Any]) -> None:
        if self.poster is None:
            return
        try:
            kept = self.poster.keep(name, message)
        except OSError as exc:
            self.stats.failures.labels("post").inc()
            log.error("%s: message not kept for posting: %s", name, exc)
            return
        self._send(kept)

    def _send(self, kept: Path) -> None:
        problem = self.poster.send(kept) if self.poster is not None else None
        if problem is None:
            self.stats.posts.labels("ok").inc()
            return
        self.stats.posts.labels("failed").inc()
        self.stats.failures.labels("post").inc()
        log.error("post to %s failed: %s (kept in %s, sent again at the next start)", self.poster.url, problem,
                  kept.parent)

    def _flush_outbox(self) -> None:
        for kept in self.poster.left() if self.poster is not None else []:
            if self.stopping:
                return
            self._send(kept)

    # -- stop --------------------------------------------------------------------------------------

    def stop(self, grace_s: float) -> tuple[int, int]:
        """(alerts left queued, alerts still in hand at the deadline); both stay journaled."""
        deadline = time.monotonic() + grace_s
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            while self.busy and time.monotonic() < deadline:
                self.cond.wait(max(0.01, deadline - time.monotonic()))
            return len(self.items), len(self.busy)
