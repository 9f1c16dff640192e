"""`--metrics-url`: a live scrape of a vLLM or DCGM /metrics endpoint, read beside the files.

A server wedged after an OOM accepts connections and never answers: that is when --metrics-url
is used, so a scrape gets SCRAPE_TIMEOUT_S all told (connect, headers, body), then the files
decide. A scrape that fails is an input with its `error` set (a warning), never an exception.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..errors import BadInput
from .base import InputFile

if TYPE_CHECKING:
    from ..httpget import Reply

SCRAPE_TIMEOUT_S = 5.0
SCRAPE_TIMEOUT_ENV = "TRIAGE_SCRAPE_TIMEOUT"
MAX_SCRAPE_BYTES = 64 << 20      # a /metrics page is kilobytes; a DCGM exporter's a few MiB


def scrape_timeout() -> float:
    """$TRIAGE_SCRAPE_TIMEOUT (seconds) or SCRAPE_TIMEOUT_S; BadInput for an unreadable value."""
    raw = os.environ.get(SCRAPE_TIMEOUT_ENV, "").strip()
    if not raw:
        return SCRAPE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise BadInput(SCRAPE_TIMEOUT_ENV, f"{raw!r} is not a number of seconds (e.g. 5)")
    return value


def scrape(url: str, timeout: float | None = None) -> InputFile:
    """A live /metrics scrape as an input (dated now, in UTC).

    Never raises for the server's sake: a refused connection, an error status or no answer
    within `timeout` seconds in all (default scrape_timeout()) gives an input whose `error` says
    so, and the files are read without it. The request runs in a daemon thread so that a server
    that trickles bytes, or a name that takes long to resolve, cannot hold the run past the
    deadline either."""
    import threading
    import time

    timeout = scrape_timeout() if timeout is None else timeout
    deadline = time.monotonic() + timeout
    outcome: list[Reply] = []

    def fetch() -> None:
        from ..httpget import get   # only this option needs HTTP: keep it off the cold path

        outcome.append(get(url, max(0.1, deadline - time.monotonic()), max_bytes=MAX_SCRAPE_BYTES,
                           follow_redirects=True))

    worker = threading.Thread(target=fetch, name="triage-scrape", daemon=True)
    worker.start()
    worker.join(timeout)
    taken = datetime.now(timezone.utc)
    error = _scrape_error(outcome[0], timeout) if outcome else _no_answer(timeout)
    if error is None:
        return InputFile(display=url, path=None, data=outcome[0].body, taken_at=taken)
    return InputFile(display=url, path=None, error=error, taken_at=taken)


def _scrape_error(reply: Reply, timeout: float) -> str | None:
    """What is wrong with a scrape's reply, in the words of a warning (None: nothing)."""
    from ..httpget import Failure

    if reply.status is not None and reply.status >= 400:
        return f"cannot scrape: HTTP {reply.status}"
    if reply.failure is Failure.TOO_LARGE:
        return f"cannot scrape: more than {MAX_SCRAPE_BYTES >> 20} MiB (not a /metrics page?)"
    if reply.failure is Failure.TIMEOUT:
        return _no_answer(timeout)      # said as for a server that trickles: the same to the user
    if reply.failure is not None:
        return f"cannot scrape: {reply.problem}"
    return None


def _no_answer(timeout: float) -> str:
    return (f"cannot scrape: no answer within {timeout:g} s (a wedged server?); "
            f"to wait longer, set {SCRAPE_TIMEOUT_ENV}=30")
