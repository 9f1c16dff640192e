"""The server process: found precisely, then its command line and the environment that matters.

Without --pid the server is the process that listens on the port of the server URL, when that
URL names this host: the socket's inode in /proc/net/tcp{,6} is matched against the open files
in /proc/*/fd. Never by a name pattern: a neighbour replica runs the same command. A port held
by several unrelated processes is ambiguous and nothing is guessed.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ...redact import redact, redact_argv
from ..procs import ProcInfo, descendants, listening_sockets, pids_holding, read_environ, read_proc
from ..source import SourceRun

# The variables that change how a server uses GPU memory or how its processes talk, and triage's own.
ENV_NAMES = frozenset({"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
                       "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                       "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "TZ"})
ENV_PREFIXES = ("VLLM_", "NCCL_", "TORCH_", "TRIAGE_HOOKS_")
MAX_ENVIRON_BYTES = 4 << 20


@dataclass
class ServerProcess:
    info: ProcInfo
    found_by: str
    env: dict[str, str] | None = None          # the relevant variables, unmasked (describe() masks)
    children: list[ProcInfo] = field(default_factory=list)

    def describe(self) -> dict:
        """For incident.yaml: secrets in the command line and the environment masked."""
        doc: dict = {"pid": self.info.pid, "found_by": self.found_by, "uid": self.info.uid,
                     "argv": redact_argv(list(self.info.cmdline))}
        started = self.info.start_utc
        if started is not None:
            doc["started"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.env is not None:
            doc["env"] = redact(dict(sorted(self.env.items())))
        if self.children:
            doc["children"] = [{"pid": c.pid, "name": c.comm} for c in self.children]
        return doc


def server_process(run: SourceRun, url: str, pid: int | None) -> ServerProcess | None:
    """The server process (from --pid, or the one listening on the URL's port), recorded in `run`."""
    if pid is not None:
        info, how = read_proc(pid), "--pid"
        if info is None:
            run.fail(f"no process {pid} (it exited?)")
            return None
    else:
        found = listening_process(url)
        if isinstance(found, str):
            run.skip(found)
            return None
        info, how = found
    server = ServerProcess(info, how, children=descendants(info))
    run.ok(f"pid {info.pid}, {how}")
    return server


def environ(run: SourceRun, server: ServerProcess) -> None:
    """The variables of ENV_NAMES / ENV_PREFIXES from /proc/PID/environ into `server.env`."""
    try:
        every = read_environ(server.info.pid, MAX_ENVIRON_BYTES)
    except PermissionError:
        run.fail("permission denied (another user's process: run as that user or root)")
        return
    except OSError as exc:
        run.fail(f"cannot read: {exc.strerror or exc}")
        return
    env = {name: value for name, value in every.items() if name in ENV_NAMES or name.startswith(ENV_PREFIXES)}
    server.env = env
    run.ok(f"{len(env)} relevant variables" if env else "none of the relevant variables set")


def listening_process(url: str) -> tuple[ProcInfo, str] | str:
    """(the process, how it was found) or why none was: the URL's host is not this host, nothing
    or several unrelated processes listen on its port, their files cannot be read."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"{url!r} has no valid port"
    host = parts.hostname or ""
    if not is_this_host(host):
        return f"{host} is not this host: the server's process is not looked for (give --pid)"
    inodes = _listening_inodes(port)
    if not inodes:
        return f"no process listens on port {port} here (server down?)"
    owners = _owners(inodes)
    if not owners:
        return f"cannot see which process listens on port {port} (another user's: run as root, or give --pid)"
    infos = [i for i in (read_proc(p) for p in sorted(owners)) if i is not None]
    # A forked front end shares its socket with its children: the one whose parent is not an owner.
    roots = [i for i in infos if i.ppid not in owners]
    if len(roots) != 1:
        pids = ", ".join(str(i.pid) for i in roots)
        return f"{len(roots)} unrelated processes listen on port {port} (pids {pids}): give --pid"
    return roots[0], f"listening on port {port}"


def is_this_host(host: str) -> bool:
    if host in ("localhost", "0.0.0.0", "::", ""):
        return True
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return False
    for addr in addrs:
        try:
            if ipaddress.ip_address(addr.split("%")[0]).is_loopback:
                return True
        except ValueError:
            continue
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((addr, 0))        # only an address of this host can be bound
                return True
        except OSError:
            continue
    return False


def _listening_inodes(port: int) -> set[str]:
    return {inode for _local, p, inode in listening_sockets() if p == port}


def _owners(inodes: set[str]) -> set[int]:
    return pids_holding(inodes)
