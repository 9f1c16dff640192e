"""Find a relaunched server without relying on what it prints to its stdout.

A server whose command line sends its log to a file (`--log FILE`, as a real one run with
`> server.log` or a logging config) writes nothing to the relaunch log. It is found by:

* the sockets its own process tree listens on (/proc/PID/fd matched against /proc/net/tcp{,6}),
  probed with /health: a port only counts when *our* process holds it, so a neighbour on
  another port, or one that took the port first, is never mistaken for it;
* the log file its command line names, read from where it ended when the server started (so
  the stopped server's old "Starting vLLM API server" line is not read as the new one's).
"""
from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

from ...live.procs import descendants, listening_sockets, read_proc, socket_inodes
from .relaunch_log import SERVING_URL

LOG_FLAGS = ("--log", "--log-file")          # flags that send a server's own log to a file
MAX_SCAN = 1 << 20


def listening_urls(pid: int) -> list[str]:
    """http://HOST:PORT for every TCP socket the process `pid` or its children listen on."""
    root = read_proc(pid)
    if root is None:
        return []
    inodes: set[str] = set()
    for proc in [root, *descendants(root)]:
        inodes |= socket_inodes(proc.pid)
    urls: list[str] = []
    for local, _port, inode in listening_sockets():
        url = _url(local) if inode in inodes else None
        if url and url not in urls:
            urls.append(url)
    return urls


def _url(local: str) -> str | None:
    """/proc/net/tcp's `0100007F:1F90` -> http://127.0.0.1:8080 (a wildcard bind -> loopback)."""
    hexaddr, _, hexport = local.partition(":")
    try:
        raw = bytes.fromhex(hexaddr)
        port = int(hexport, 16)
    except ValueError:
        return None
    # The kernel prints each 32-bit word in host (little-endian) order.
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    try:
        addr = ipaddress.ip_address(packed)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    if addr.is_unspecified:
        return f"http://{'127.0.0.1' if addr.version == 4 else '[::1]'}:{port}"
    return f"http://{addr}:{port}" if addr.version == 4 else f"http://[{addr}]:{port}"


def named_log(argv: list[str], cwd: str | None) -> Path | None:
    """The file the command line sends the server's log to (`--log FILE`, `--log-file=FILE`)."""
    for i, arg in enumerate(argv):
        for flag in LOG_FLAGS:
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(flag + "="):
                value = arg[len(flag) + 1:]
            else:
                continue
            path = Path(value)
            return path if path.is_absolute() else Path(cwd or os.getcwd()) / path
    return None


class NamedLog:
    """The log file a relaunched server writes, read from its end at launch onwards.

    Opened afresh at each look with O_NOFOLLOW and read only when it is a regular file owned by
    the user the server runs as (or root): a link or another user's file planted under that name
    is not read."""

    def __init__(self, path: Path, uid: int):
        self.path = path
        self.uid = uid
        self.start = self._size() or 0

    def _open(self) -> int | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (self.uid, 0):
            os.close(fd)
            return None
        return fd

    def _size(self) -> int | None:
        fd = self._open()
        if fd is None:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def announced_url(self) -> str | None:
        fd = self._open()
        if fd is None:
            return None
        try:
            end = os.fstat(fd).st_size
            start = self.start if end >= self.start else 0      # truncated or rewritten: read it all
            start = max(start, end - MAX_SCAN)
            chunk = os.pread(fd, end - start, start)
        except OSError:
            return None
        finally:
            os.close(fd)
        found = SERVING_URL.findall(chunk.decode("utf-8", errors="replace"))
        return found[-1].replace("0.0.0.0", "127.0.0.1") if found else None
