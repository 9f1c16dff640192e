"""Whether a process's command line starts a serving engine (`data/server_entrypoints.yaml`).

A log names PIDs, and whoever wrote the log chose the numbers: a PID read from a log is
signalled only when the process it names is a server by its command line — the engine's own
entry point, listening on the port the log says it served on — not merely a process whose argv
carries the model's name.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import yaml

from ..paths import data_file

DATA = data_file("server_entrypoints.yaml")


@dataclass(frozen=True)
class EntryPoint:
    engine: str
    program: str | None = None
    module: str | None = None
    subcommand: str | None = None
    port_flag: str | None = None
    source: str = ""

    def matches(self, argv: tuple[str, ...]) -> bool:
        for i, word in enumerate(argv):
            if self.module and word == "-m" and i + 1 < len(argv) and argv[i + 1] == self.module:
                return self._sub(argv, i + 2)
            if self.program and os.path.basename(word) == self.program:
                return self._sub(argv, i + 1)
        return False

    def _sub(self, argv: tuple[str, ...], at: int) -> bool:
        return self.subcommand is None or (at < len(argv) and argv[at] == self.subcommand)


@lru_cache(maxsize=1)
def entrypoints() -> tuple[EntryPoint, ...]:
    raw = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    return tuple(EntryPoint(**{k: str(v) for k, v in entry.items()}) for entry in raw["entrypoints"])


def server_entrypoint(argv: tuple[str, ...]) -> EntryPoint | None:
    """The entry point `argv` starts, or None when it starts no known server."""
    return next((e for e in entrypoints() if e.matches(argv)), None)


def listening_port(argv: tuple[str, ...], entry: EntryPoint) -> int | None:
    """The port `argv` sets with the entry point's port flag, or None when it sets none."""
    flag = entry.port_flag
    if not flag:
        return None
    for i, word in enumerate(argv):
        value = argv[i + 1] if word == flag and i + 1 < len(argv) else \
            word[len(flag) + 1:] if word.startswith(flag + "=") else None
        if value is not None:
            return int(value) if value.isdigit() and int(value) else None   # 0: any free port
    return None


def not_server_problem(argv: tuple[str, ...], port: int | None) -> str | None:
    """Why `argv` is not the server a log describes (serving on `port`), or None."""
    entry = server_entrypoint(argv)
    if entry is None:
        return "its command line starts no serving engine (vllm serve, python -m vllm.entrypoints…, sglang, TGI, …)"
    own = listening_port(argv, entry)
    if port is not None and own is not None and own != port:
        return f"it listens on port {own}, and the log's server served on port {port}"
    return None


__all__ = ["EntryPoint", "entrypoints", "listening_port", "not_server_problem", "server_entrypoint"]
