"""A small client of the Prometheus HTTP API: the three read endpoints every compatible server
speaks (Prometheus, Thanos Query, Mimir, Cortex, VictoriaMetrics): `/api/v1/series`,
`/api/v1/query` and `/api/v1/query_range`. Nothing Prometheus-only (no `/-/ready`, no
`/api/v1/status/*`).

Credentials come from the environment only, never from a flag that lands in shell history:
`TRIAGE_PROMETHEUS_TOKEN` (sent as `Authorization: Bearer ...`) or `TRIAGE_PROMETHEUS_USER` and
`TRIAGE_PROMETHEUS_PASSWORD` (basic auth). TLS certificates are verified; a private CA is named
by `TRIAGE_PROMETHEUS_CA_BUNDLE` (a PEM file). Turning verification off is a caller's explicit
choice (`insecure=True`), which the CLI warns about. Neither the token nor the password appears in
any message this module builds; errors name the URL without its user-info part.

Every request has a timeout (connect and read) and also passes `timeout=` to the server, so a slow
query is cut off on both sides. A request that fails raises `QueryFailed` with one line saying why;
the caller decides whether that fails one instance or the whole command.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from ...errors import TriageError

TOKEN_ENV = "TRIAGE_PROMETHEUS_TOKEN"
USER_ENV = "TRIAGE_PROMETHEUS_USER"
PASSWORD_ENV = "TRIAGE_PROMETHEUS_PASSWORD"
CA_BUNDLE_ENV = "TRIAGE_PROMETHEUS_CA_BUNDLE"
MAX_BODY_BYTES = 256 << 20     # one answer larger than this is refused, not held
USER_AGENT = "oom-triage"


class PrometheusError(TriageError):
    """The server cannot be used at all (unreachable, refused the credentials, not an HTTP API)."""


class QueryFailed(Exception):
    """One request failed (timeout, HTTP error, an error envelope, a body that is not JSON)."""


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and its (unix seconds, value) points in time order."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")


def display_url(url: str) -> str:
    """The URL as it may be printed: without a user-info part (user:password@)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def auth_from_env(env: Mapping[str, str] | None = None) -> tuple[str, Any]:
    """("bearer"|"basic"|"none", what requests needs): from the environment only."""
    env = os.environ if env is None else env
    token = env.get(TOKEN_ENV, "")
    user, password = env.get(USER_ENV, ""), env.get(PASSWORD_ENV, "")
    if token and (user or password):
        raise PrometheusError(f"set either {TOKEN_ENV} or {USER_ENV}/{PASSWORD_ENV}, not both")
    if token:
        return "bearer", token.strip()
    if user or password:
        if not (user and password):
            raise PrometheusError(f"{USER_ENV} and {PASSWORD_ENV} go together: one of them is empty")
        return "basic", (user, password)
    return "none", None


def tls_verify(insecure: bool, env: Mapping[str, str] | None = None) -> bool | str:
    env = os.environ if env is None else env
    bundle = env.get(CA_BUNDLE_ENV, "")
    if insecure:
        return False
    if bundle:
        if not os.path.isfile(bundle):
            raise PrometheusError(f"{CA_BUNDLE_ENV}={bundle}: no such file (a PEM bundle of the CA certificates)")
        return bundle
    return True


class PromClient:
    """The HTTP API of one Prometheus-compatible server. Thread-safe for concurrent GETs (one
    requests.Session, whose connection pool is sized for `pool` threads)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, insecure: bool = False, pool: int = 8,
                 env: Mapping[str, str] | None = None):
        import requests
        from requests.adapters import HTTPAdapter

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PrometheusError(f"{display_url(url)!r} is not an http(s) URL of a Prometheus-compatible server")
        if parts.username or parts.password:
            raise PrometheusError(f"{display_url(url)}: credentials go in {USER_ENV}/{PASSWORD_ENV} (or {TOKEN_ENV}), "
                                  "not in the URL, where shell history and process lists keep them")
        self.base = url.rstrip("/")
        self.url = display_url(self.base)
        self.timeout_s = timeout_s
        self.auth_kind, auth = auth_from_env(env)
        self.session = requests.Session()
        # No ~/.netrc: requests would send its credentials in place of the token. The proxy
        # variables (HTTPS_PROXY, NO_PROXY) still apply.
        self.session.trust_env = False
        self.session.proxies.update(requests.utils.get_environ_proxies(self.base))
        self.session.verify = tls_verify(insecure, env)
        self.session.headers["User-Agent"] = USER_AGENT
        if self.auth_kind == "bearer":
            self.session.headers["Authorization"] = f"Bearer {auth}"
        elif self.auth_kind == "basic":
            self.session.auth = auth
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=max(1, pool))
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        if insecure:
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)   # the CLI warns once

    @property
    def sends_credentials_in_clear(self) -> bool:
        """Credentials over plain http to a host other than loopback."""
        parts = urlsplit(self.base)
        return self.auth_kind != "none" and parts.scheme == "http" and not _loopback(parts.hostname or "")

    def close(self) -> None:
        self.session.close()

    # -- endpoints -----------------------------------------------------------------------------
    def series(self, matchers: Sequence[str], start: float, end: float, timeout_s: float | None = None) -> list[dict]:
        data = self._get("/api/v1/series", [("match[]", m) for m in matchers] +
                         [("start", _num(start)), ("end", _num(end))], timeout_s)
        if not isinstance(data, list):
            raise QueryFailed("/api/v1/series: the answer's data is not a list")
        return [s for s in data if isinstance(s, dict)]

    def query(self, query: str, at: float, timeout_s: float | None = None) -> list[Series]:
        data = self._get("/api/v1/query", [("query", query), ("time", _num(at))], timeout_s)
        return _result(data, "value")

    def query_range(self, query: str, start: float, end: float, step: float,
                    timeout_s: float | None = None) -> list[Series]:
        data = self._get("/api/v1/query_range", [("query", query), ("start", _num(start)), ("end", _num(end)),
                                                 ("step", _num(step))], timeout_s)
        return _result(data, "values")

    # -- plumbing ------------------------------------------------------------------------------
    def _get(self, path: str, params: list[tuple[str, str]], timeout_s: float | None) -> Any:
        import requests

        timeout = max(0.5, self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s))
        params = params + [("timeout", f"{max(1, math.floor(timeout))}s")]
        try:
            with self.session.get(self.base + path, params=params, timeout=(min(timeout, 5.0), timeout),
                                  stream=True, allow_redirects=True) as resp:
                body = _read_limited(resp)
        except requests.exceptions.SSLError as exc:
            raise PrometheusError(f"{self.url}: TLS verification failed ({_short(exc)}); set {CA_BUNDLE_ENV} to the "
                                  "CA's PEM bundle") from None
        except requests.exceptions.ConnectionError as exc:
            if isinstance(exc, requests.exceptions.ReadTimeout) or "Read timed out" in str(exc):
                raise QueryFailed(f"{path}: no answer within {timeout:g}s") from None
            raise QueryFailed(f"{path}: cannot connect to {self.url} ({_short(exc)})") from None
        except requests.exceptions.Timeout:
            raise QueryFailed(f"{path}: no answer within {timeout:g}s") from None
        except requests.RequestException as exc:
            raise QueryFailed(f"{path}: {_short(exc)}") from None
        if resp.status_code in (401, 403):
            how = {"none": "no credentials were sent (set " + TOKEN_ENV + " or " + USER_ENV + "/" + PASSWORD_ENV + ")",
                   "bearer": "the bearer token from " + TOKEN_ENV + " was refused",
                   "basic": "the user/password from " + USER_ENV + "/" + PASSWORD_ENV + " were refused"}[self.auth_kind]
            raise PrometheusError(f"{self.url}: HTTP {resp.status_code}: {how}")
        return _envelope(path, resp.status_code, body)


def _read_limited(resp: Any) -> bytes:
    chunks, size = [], 0
    for chunk in resp.iter_content(1 << 16):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise QueryFailed(f"an answer over {MAX_BODY_BYTES >> 20} MiB: narrow the selector or the window")
        chunks.append(chunk)
    return b"".join(chunks)


def _envelope(path: str, status: int, body: bytes) -> Any:
    import json

    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if not isinstance(doc, dict) or "status" not in doc:
        raise QueryFailed(f"{path}: HTTP {status}, not a Prometheus API answer")
    if doc.get("status") != "success":
        raise QueryFailed(f"{path}: HTTP {status}: {doc.get('errorType') or 'error'}: {str(doc.get('error'))[:300]}")
    return doc.get("data")


def _result(data: Any, key: str) -> list[Series]:
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise QueryFailed("the answer has no result list")
    out = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            continue
        raw = item.get(key)
        raw = [raw] if key == "value" and raw is not None else (raw or [])
        out.append(Series({str(k): str(v) for k, v in item["metric"].items()}, _points(raw)))
    return out


def _points(raw: list) -> tuple[tuple[float, float], ...]:
    """[[t, "v"], ...] -> ((t, v), ...) without the NaN and infinite samples (a stale or empty
    reading is no reading); a malformed pair is dropped."""
    try:
        # The server spells the non-finite values NaN, +Inf and -Inf: the only values ending so.
        return tuple([(float(t), float(v)) for t, v in raw if v[-1] not in "Nf"])
    except (TypeError, ValueError, IndexError):
        pairs = [p for p in (_point(x) for x in raw) if p is not None]
        return tuple(p for p in pairs if abs(p[1]) < math.inf and abs(p[0]) < math.inf)


def _point(pair: Any) -> tuple[float, float] | None:
    try:
        return float(pair[0]), float(pair[1])
    except (TypeError, ValueError, IndexError):
        return None


def _num(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text[:200]


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def unix(moment: datetime) -> float:
    return moment.astimezone(timezone.utc).timestamp()


def label_value(value: str) -> str:
    """A PromQL string literal (double quotes, backslashes and newlines escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
