"""Running `triage serve`: the pieces put together, signals, and a stop that loses nothing.

The HTTP server runs in a thread; the main thread waits for SIGTERM or SIGINT. On either it stops
accepting connections, lets the workers finish the alerts in hand within the grace period, and
exits; every alert it accepted and did not turn into an incident is still in the journal, and
the next start queues it again.
"""
from __future__ import annotations

import logging
import shutil
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ...errors import TriageError

log = logging.getLogger("triage.serve")


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    incidents: Path
    logs_from: object | None          # alert_sources.LogsFrom
    prometheus: str | None
    post: str | None
    bound: int
    workers: int
    rate: float
    max_body: int
    lookback_s: float
    after_s: float
    source_timeout_s: float
    log_max_bytes: int
    grace_s: float
    token: str | None
    verbose: bool
    step_s: float | None = None       # the series' query step; None follows the window


def run(cfg: Config) -> None:
    from .alert_incident import Settings
    from .alert_post import Poster
    from .alert_queue import AlertQueue
    from .serve_http import Limits, Server

    _logging(cfg.verbose)
    incidents = _incidents(cfg.incidents)
    client = None
    if cfg.prometheus:
        from ..fleet.promapi import PromClient

        client = PromClient(cfg.prometheus, timeout_s=cfg.source_timeout_s, pool=max(2, cfg.workers * 2))
    settings = Settings(incidents, cfg.logs_from, client, cfg.lookback_s, cfg.after_s, cfg.source_timeout_s,
                        cfg.log_max_bytes, cfg.step_s)
    poster = Poster(cfg.post, incidents, timeout_s=10.0) if cfg.post else None
    try:
        queue = AlertQueue(settings, bound=cfg.bound, workers=cfg.workers, poster=poster)
    except OSError as exc:
        raise TriageError(f"--incidents {incidents}: cannot keep the receiver's journal: {exc.strerror or exc}") \
            from None
    server_class = Server
    if ":" in cfg.host:
        server_class = type("Server6", (Server,), {"address_family": socket.AF_INET6})
    try:
        server = server_class((cfg.host, cfg.port), queue, Limits(cfg.token, cfg.max_body, cfg.rate))
    except OSError as exc:
        raise TriageError(f"--listen {cfg.host}:{cfg.port}: cannot listen: {exc.strerror or exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    queue.start()
    http = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="triage-serve-http",
                            daemon=True)
    http.start()
    port = server.server_address[1]
    log.info("listening on http://%s:%d/alertmanager; incidents in %s; logs from %s; prometheus %s; posting to %s",
             cfg.host if ":" not in cfg.host else f"[{cfg.host}]", port, incidents,
             cfg.logs_from.describe() if cfg.logs_from is not None else "(none)", client.url if client else "(none)",
             cfg.post or "(nowhere)")
    while not stop.wait(1.0):
        pass
    log.info("stopping: no new requests; %d alert(s) queued", queue.depth())
    server.shutdown()
    server.server_close()
    queued, unfinished = queue.stop(cfg.grace_s)
    if queued or unfinished:
        log.info("stopped with %d alert(s) queued and %d unfinished after %gs: journaled in %s, queued again at the "
                 "next start", queued, unfinished, cfg.grace_s, queue.journal.path)
    else:
        log.info("stopped: nothing left to do")
    if client is not None:
        client.close()
    logging.shutdown()


def _incidents(path: Path) -> Path:
    """The incidents directory, made when missing, with what a killed run left half-written removed."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TriageError(f"--incidents {path}: cannot create: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise TriageError(f"--incidents {path}: not a directory")
    for entry in path.iterdir():
        # a bundle being written when the process died: Staging's hidden directories, never shown
        if entry.name.startswith(".") and entry.name.endswith((".partial", ".spool")) and entry.is_dir() \
                and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
    return path.resolve()


def _logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s triage serve: %(levelname)s: %(message)s",
                                           "%Y-%m-%dT%H:%M:%S"))
    logger = logging.getLogger("triage.serve")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
