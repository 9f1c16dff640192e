"""Where the load goes, checked before a single request is sent.

Load is dangerous: pointed at a production replica by a typo it is the outage. So a target is
loopback unless the caller passed the explicit flag, and "loopback" means every address the host
name resolves to is one (a name that resolves to a public address too is not loopback).
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import BadInput, TriageError


@dataclass(frozen=True)
class Target:
    url: str                 # base URL, no trailing slash
    host: str
    loopback: bool


def parse_target(url: str, allow_remote: bool) -> Target:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise BadInput("--url", f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise BadInput("--url", f"{url!r} is not a server's base URL (like http://127.0.0.1:8000)")
    if port == 0:
        raise BadInput("--url", f"{url!r}: port 0 is no server's port")
    if parts.query or parts.fragment:
        raise BadInput("--url", f"{url!r}: give the base URL only (no query or fragment)")
    host = parts.hostname
    loopback = is_loopback(host)
    if not loopback and not allow_remote:
        raise TriageError(f"--url {url}: {host} is not a loopback address; load against another host needs "
                          "--allow-remote (the load is shown before anything is sent)")
    return Target(url.rstrip("/"), host, loopback)


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False               # unresolvable: certainly not known to be loopback
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(_loopback_ip(a) for a in addresses)


def _loopback_ip(text: str) -> bool:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
