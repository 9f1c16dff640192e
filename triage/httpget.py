"""Bounded HTTP requests to the servers triage diagnoses, and the one line that says why one failed.

A server wedged after an OOM accepts connections and never answers, or trickles bytes; a URL
may name something that is not a server's /metrics at all. So every request here has a deadline
for the whole exchange and a cap on the body, and never raises: a failure is a `Reply` with a
one-line `problem` (`connection refused (ConnectionError)`, `no answer within 5 s (a wedged
server?)`), never a traceback.

Two ways in, one reply:
- `get` / `post_json`: one request through requests, so proxies, CA bundles and redirects behave
  as users have set them up for requests (a --metrics-url scrape, `collect`, recovery's probes).
- `Endpoint`: one http.client connection kept open to a server read every second (`watch`).
  requests costs ~1.1-1.5 ms of CPU a request on loopback against ~0.3 ms here, which matters
  against watch's budget of 2% of a core.

Only the standard library is imported here; requests loads when `get` or `post_json` runs.
"""
from __future__ import annotations

import http.client
import re
import socket
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable
from urllib.parse import urlsplit

MAX_BODY_BYTES = 64 << 20          # a /metrics page is kilobytes; a DCGM exporter's a few MiB
CHUNK_BYTES = 1 << 16


class Failure(Enum):
    """What went wrong, for callers that word it their own way."""

    TIMEOUT = "timeout"            # no answer, or not all of it, within the time given
    TOO_LARGE = "too large"        # the body passed the size cap
    ERROR = "error"                # refused, DNS, TLS, a bad URL, a broken connection


@dataclass(frozen=True)
class Reply:
    status: int | None             # None: no answer (see problem)
    body: bytes = b""
    problem: str | None = None     # why there is no answer, or why its body was not kept
    failure: Failure | None = None
    took_s: float | None = None

    @property
    def refused(self) -> bool:
        return bool(self.problem and "refused" in self.problem)


def get(url: str, timeout_s: float, *, max_bytes: int = MAX_BODY_BYTES, follow_redirects: bool = False) -> Reply:
    """GET `url`: the answer within `timeout_s` seconds in all, its body up to `max_bytes`."""
    return _request("GET", url, timeout_s, max_bytes, follow_redirects)


def post_json(url: str, doc: Any, timeout_s: float, *, max_bytes: int = MAX_BODY_BYTES,
              follow_redirects: bool = True) -> Reply:
    """POST `doc` as JSON to `url`, with the same bounds as `get`."""
    return _request("POST", url, timeout_s, max_bytes, follow_redirects, doc)


def _request(method: str, url: str, timeout_s: float, max_bytes: int, follow_redirects: bool,
             doc: Any = None) -> Reply:
    import requests

    started = time.monotonic()
    try:
        with requests.request(method, url, json=doc, timeout=(timeout_s, timeout_s), stream=True,
                              allow_redirects=follow_redirects) as resp:
            return _read_body(resp.status_code, resp.iter_content(CHUNK_BYTES), max_bytes, timeout_s, started)
    except requests.Timeout:
        return _timed_out(timeout_s)
    except Exception as exc:       # refused, DNS, TLS, a bad URL: one line
        return Reply(None, problem=why(exc), failure=Failure.ERROR)


def _read_body(status: int, chunks: Iterable[bytes], max_bytes: int, timeout_s: float, started: float) -> Reply:
    """The body from `chunks`, or why it was not kept: over `max_bytes`, or still coming after
    `timeout_s` (checked between chunks)."""
    deadline = started + timeout_s
    kept: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            return Reply(status, problem=f"answer larger than {max_bytes >> 20} MiB: not kept",
                         failure=Failure.TOO_LARGE)
        if time.monotonic() > deadline:
            return Reply(status, problem=f"the answer took longer than {timeout_s:.3g} s: not kept",
                         failure=Failure.TIMEOUT)
        kept.append(chunk)
    return Reply(status, b"".join(kept), took_s=time.monotonic() - started)


def _timed_out(timeout_s: float) -> Reply:
    return Reply(None, problem=f"no answer within {timeout_s:.3g} s (a wedged server?)", failure=Failure.TIMEOUT)


class BadUrl(ValueError):
    pass


class Endpoint:
    """A server's base URL and the one connection kept open to it (used by one thread at a time)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadUrl(f"{url!r} is not an http(s) URL with a host (e.g. http://127.0.0.1:8000)")
        try:
            self.port = parts.port
        except ValueError:
            raise BadUrl(f"{url!r} has no valid port") from None
        self.url = url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.prefix = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def get(self, path: str, timeout_s: float, max_bytes: int = MAX_BODY_BYTES) -> Reply:
        """GET prefix+path on the kept connection (a failed one is dropped: the next call opens a
        new one). `timeout_s` bounds each socket operation; the body is read whole, up to `max_bytes`."""
        started = time.monotonic()
        reused = self._conn is not None
        try:
            try:
                return self._get(path, timeout_s, started, max_bytes)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
            # The server closed the kept-alive connection between readings (its idle timeout, a
            # restart): that says nothing about its health, so once more on a new connection.
            return self._get(path, max(0.05, timeout_s - (time.monotonic() - started)), started, max_bytes)
        except (socket.timeout, TimeoutError):
            return _timed_out(timeout_s)
        except (OSError, http.client.HTTPException, ValueError) as exc:   # ValueError: a host http.client refuses
            return Reply(None, problem=why(exc), failure=Failure.ERROR)

    def _get(self, path: str, timeout_s: float, started: float, max_bytes: int) -> Reply:
        conn = self._conn
        if conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = self._conn = cls(self.host, self.port, timeout=timeout_s)
        elif conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        conn.timeout = timeout_s
        try:
            conn.request("GET", self.prefix + path, headers={"Accept": "text/plain, */*"})
            resp = conn.getresponse()
            body = resp.read(max_bytes + 1)
            if len(body) > max_bytes:
                self.close()           # the rest of that answer is still on the connection
                return Reply(resp.status, problem=f"answer larger than {max_bytes >> 20} MiB: not kept",
                             failure=Failure.TOO_LARGE)
            if resp.will_close:
                self.close()
        except BaseException:
            self.close()
            raise
        return Reply(resp.status, body, took_s=time.monotonic() - started)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None


_ERRNO_WORDS = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def why(exc: BaseException) -> str:
    """A failed request in a few words: `connection refused`, `host not found (...)`. requests
    nests urllib3's retry story in its messages; of those, the root errno's words and the class
    requests raised are kept: `connection refused (ConnectionError)`."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"host not found ({exc.strerror or exc})"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    found = _ERRNO_WORDS.search(str(exc))
    if found:
        return f"{found.group(1).strip().rstrip('.').lower()} ({exc.__class__.__name__})"
    text = first_line(exc)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, shortened ('' when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else ""


# -- a server's base URL, and whether it is this machine --------------------------------------------

def server_base_url(url: str, flag: str = "--url"):
    """`url` split (urllib's SplitResult) when it names a server's base URL (http(s), a host, no
    blanks, not port 0); else a one-line BadInput naming the option it came from."""
    from .errors import BadInput

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadInput(flag, f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise BadInput(flag, f"{url!r} is not a server's base URL (like http://127.0.0.1:8000)")
    if port == 0:
        raise BadInput(flag, f"{url!r}: port 0 is no server's port")
    return parts


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback one (127.0.0.0/8, ::1): a name that
    also resolves to another address, or does not resolve, is not."""
    import ipaddress

    def loopback_ip(text: str) -> bool:
        try:
            return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback
        except ValueError:
            return False

    if loopback_ip(host.strip("[]")):
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addresses) and all(loopback_ip(a) for a in addresses)
