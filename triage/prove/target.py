"""Where the load goes, checked before a single request is sent.

Load is dangerous: pointed at a production replica by a typo it is the outage. So a target is
loopback unless the caller passed the explicit flag, and "loopback" means every address the host
name resolves to is one (a name that resolves to a public address too is not loopback).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput, TriageError
from ..httpget import is_loopback, server_base_url


@dataclass(frozen=True)
class Target:
    url: str                 # base URL, no trailing slash
    host: str
    loopback: bool


def parse_target(url: str, allow_remote: bool) -> Target:
    parts = server_base_url(url)
    if parts.query or parts.fragment:
        raise BadInput("--url", f"{url!r}: give the base URL only (no query or fragment)")
    host = parts.hostname
    loopback = is_loopback(host)
    if not loopback and not allow_remote:
        raise TriageError(f"--url {url}: {host} is not a loopback address; load against another host needs "
                          "--allow-remote (the load is shown before anything is sent)")
    return Target(url.rstrip("/"), host, loopback)
