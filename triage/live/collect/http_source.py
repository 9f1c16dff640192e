"""The server over HTTP: /metrics scrapes named by their UTC time, /health, /v1/models, /version.

A /health 503 or a 404 on /version is an answer, and recorded as one; only a server that cannot
be reached (refused, no answer in time) makes the source fail. Bodies are read in chunks with a
size cap and a deadline, so a server that trickles bytes cannot hold the collection.
"""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from ...httpget import Reply, get
from ..source import SourceRun

MAX_JSON_BYTES = 1 << 20
SCRAPE_TIMEOUT_S = 5.0             # one scrape; a wedged server then costs the next one, not the run


def _down(reply: Reply) -> str:
    return f"server down: {reply.problem}" if reply.refused else str(reply.problem)


def health(run: SourceRun, base: str) -> None:
    reply = get(base + "/health", run.left(), max_bytes=MAX_JSON_BYTES)
    if reply.status is None:
        run.data["health"] = reply.problem
        run.fail(_down(reply))
        return
    run.data["health"] = reply.status
    run.ok(f"HTTP {reply.status}" + ("" if reply.status == 200 else ": the server answers but is not healthy"))


def models(run: SourceRun, base: str) -> None:
    doc = _json(run, base + "/v1/models")
    if doc is None:
        return
    data = doc.get("data") if isinstance(doc, dict) else None
    ids = [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m] if isinstance(data, list) else None
    if ids is None:
        run.fail("the answer is not a model list")
        return
    run.data["models"] = ids
    run.ok(", ".join(ids) or "no models")


def version(run: SourceRun, base: str) -> None:
    doc = _json(run, base + "/version")
    if doc is None:
        return
    found = doc.get("version") if isinstance(doc, dict) else None
    if not isinstance(found, str) or not found.strip():
        run.fail("the answer names no version")
        return
    run.data["version"] = found.strip()[:64]
    run.ok(run.data["version"])


def _json(run: SourceRun, url: str) -> object | None:
    reply = get(url, run.left(), max_bytes=MAX_JSON_BYTES)
    if reply.status != 200:
        run.fail(_down(reply) if reply.status is None else f"HTTP {reply.status}")
        return None
    try:
        return json.loads(reply.body)
    except ValueError:
        run.fail("the answer is not JSON")
        return None


def scrapes(run: SourceRun, base: str, count: int, every_s: float) -> None:
    """`count` scrapes of /metrics, `every_s` apart, each in metrics/<UTC time>.prom; stops
    early when the next one would land past the source's deadline, or the server is down."""
    url = base + "/metrics"
    taken, problems = 0, []
    next_at = time.monotonic()
    for i in range(count):
        if i:
            if next_at >= run.deadline - 0.2:
                problems.append(f"{count - i} more not taken: the deadline")
                break
            time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = time.monotonic() + every_s
        reply = get(url, min(run.left(), SCRAPE_TIMEOUT_S))
        if reply.status == 200 and reply.body:
            run.write(f"metrics/{_stamp()}.prom", reply.body, f"GET {url}")
            taken += 1
            continue
        problems.append(_down(reply) if reply.status is None else f"HTTP {reply.status}")
        if reply.refused:
            break                           # nothing listens: the remaining scrapes would say the same
    if taken:
        run.ok(f"{taken} of {count} scrapes" + (f"; {problems[-1]}" if problems else ""))
    else:
        run.fail(problems[-1] if problems else "no scrape taken")


def _stamp() -> str:
    """2026-03-12T14-16-00.123Z: the scrape's UTC time, a valid file name that sorts in time order."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H-%M-%S.") + f"{now.microsecond // 1000:03d}Z"
