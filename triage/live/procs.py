"""Processes as /proc shows them: the one place recovery and collect read a process from.

A PID alone names nothing stable: once a process exits its number is free for the next program.
So a process is identified by (pid, start time in clock ticks since boot, command line), and two
readings are the same process only when all three agree (`ProcInfo.same_process`). Nothing here
changes a process; signalling one is recovery's (`triage/recovery/signals.py`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str                  # R, S, D, Z, ...
    start_ticks: int            # clock ticks after boot: with the pid, unique until reboot
    uid: int
    comm: str                   # the kernel's 15-character name (prctl / setproctitle)
    cmdline: tuple[str, ...]
    pgid: int = 0               # process group and session: an orphan keeps its server's
    sid: int = 0

    @property
    def start_utc(self) -> datetime | None:
        boot = boot_time()
        if boot is None:
            return None
        return datetime.fromtimestamp(boot + self.start_ticks / os.sysconf("SC_CLK_TCK"), timezone.utc)

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")

    def command(self, limit: int = 160) -> str:
        text = " ".join(self.cmdline) or f"[{self.comm}]"
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def same_process(self, other: "ProcInfo | None") -> bool:
        return other is not None and (other.pid, other.start_ticks, other.cmdline) == \
            (self.pid, self.start_ticks, self.cmdline)

    def exiting(self, other: "ProcInfo | None") -> bool:
        """`other` is this process on its way out: same PID and start time, its command line already
        gone with its memory (the kernel empties /proc/PID/cmdline before the process is a zombie).
        A reused PID has another start time."""
        return other is not None and not other.cmdline and (other.pid, other.start_ticks) == (self.pid, self.start_ticks)


def read_proc(pid: int) -> ProcInfo | None:
    """The process `pid` as /proc shows it now, or None when there is none (or only a zombie)."""
    base = PROC / str(pid)
    try:
        stat = (base / "stat").read_text()
        raw_cmd = (base / "cmdline").read_bytes()
        uid = (base).stat().st_uid
    except (OSError, ValueError):
        return None
    open_paren, close_paren = stat.find("("), stat.rfind(")")
    fields = stat[close_paren + 2:].split()     # comm may hold spaces and parentheses
    if open_paren < 0 or len(fields) < 20:
        return None
    try:
        info = ProcInfo(pid=pid, ppid=int(fields[1]), state=fields[0], start_ticks=int(fields[19]), uid=uid,
                        comm=stat[open_paren + 1:close_paren],
                        cmdline=tuple(a.decode("utf-8", "replace") for a in raw_cmd.split(b"\0") if a),
                        pgid=int(fields[2]), sid=int(fields[3]))
    except ValueError:
        return None
    return info if info.alive else None


def all_procs() -> dict[int, ProcInfo]:
    out: dict[int, ProcInfo] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            info = read_proc(int(name))
            if info is not None:
                out[info.pid] = info
    return out


def descendants(root: ProcInfo, procs: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
    """Children, grandchildren... of `root`, parents before children.

    A child must have started no earlier than its parent: a PID whose number was reused cannot
    sneak into the tree through a stale parent link."""
    procs = all_procs() if procs is None else procs
    by_parent: dict[int, list[ProcInfo]] = {}
    for p in procs.values():
        by_parent.setdefault(p.ppid, []).append(p)
    out: list[ProcInfo] = []
    queue = [root]
    while queue:
        parent = queue.pop(0)
        for child in sorted(by_parent.get(parent.pid, []), key=lambda p: p.pid):
            if child.start_ticks >= parent.start_ticks and child.pid != root.pid and child not in out:
                out.append(child)
                queue.append(child)
    return out


def protected_pids() -> set[int]:
    """PIDs never to signal: init, this process and every ancestor of it (our shell, our tmux...)."""
    pids = {0, 1, os.getpid()}
    pid = os.getppid()
    for _ in range(64):
        if pid <= 1 or pid in pids:
            break
        pids.add(pid)
        info = read_proc(pid)
        if info is None:
            break
        pid = info.ppid
    return pids


def read_cwd(pid: int) -> str | None:
    """The process's working directory, or None (gone, or another user's)."""
    try:
        return os.readlink(PROC / str(pid) / "cwd")
    except OSError:
        return None


def read_environ(pid: int, limit: int = -1) -> dict[str, str]:
    """The process's environment as it was started (the first `limit` bytes of it, when given);
    OSError when it cannot be read (gone, or another user's: PermissionError)."""
    with open(PROC / str(pid) / "environ", "rb") as fh:
        raw = fh.read(limit)
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key:
            env[key] = value
    return env


def read_status(pid: int) -> dict[str, list[str]]:
    """/proc/PID/status as `Name: [words]` (Uid, Gid, Groups...); OSError when it cannot be read."""
    with open(PROC / str(pid) / "status", encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    return fields


_BOOT: list[float | None] = []


def boot_time() -> float | None:
    if not _BOOT:
        value = None
        try:
            for line in (PROC / "stat").read_text().splitlines():
                if line.startswith("btime "):
                    value = float(line.split()[1])
        except OSError:
            pass
        _BOOT.append(value)
    return _BOOT[0]


def boot_id() -> str | None:
    """This boot's random id: start ticks only compare within one boot."""
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


# -- TCP sockets ------------------------------------------------------------------------------------
LISTEN = "0A"                     # TCP_LISTEN in /proc/net/tcp's state column


def listening_sockets() -> list[tuple[str, int, str]]:
    """(local address as /proc/net prints it, port, inode) of every listening TCP socket, IPv4 and
    IPv6 (a socket whose inode is 0 belongs to no process this user can see)."""
    out: list[tuple[str, int, str]] = []
    for table in ("tcp", "tcp6"):
        try:
            rows = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == LISTEN and cols[9] != "0":
                try:
                    port = int(cols[1].rsplit(":", 1)[1], 16)
                except (IndexError, ValueError):
                    continue
                out.append((cols[1], port, cols[9]))
    return out


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets among `pid`'s open descriptors (empty when gone or not ours)."""
    fd_dir = PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return set()
    inodes: set[str] = set()
    for name in names:
        try:
            link = os.readlink(fd_dir / name)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def pids_holding(inodes: set[str]) -> set[int]:
    """The processes with one of these socket inodes open."""
    if not inodes:
        return set()
    try:
        pids = [int(n) for n in os.listdir(PROC) if n.isdigit()]
    except OSError:
        return set()
    return {pid for pid in pids if socket_inodes(pid) & inodes}
