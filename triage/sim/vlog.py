"""Writes log lines exactly as vLLM 0.11 does (formats.md 2.1).

* `LEVEL MM-DD HH:MM:SS [file.py:N] message`, local time, no year.
* A stream-level process prefix, ANSI-coloured as 0.11 writes it even when not on a TTY:
  `\\x1b[1;36m(APIServer pid=N)\\x1b[0;0m `.
* A multi-line record (a `logger.exception` traceback) continues with `\\r\\n` and the whole
  prefix again (NewLineFormatter); text the interpreter prints itself carries only the stream
  prefix; uvicorn lines use `INFO:     ...`.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import IO, Iterable

CYAN = "\x1b[1;36m"
RESET = "\x1b[0;0m"


@dataclass(frozen=True)
class Proc:
    """A process as vLLM names it in its log prefix."""

    name: str      # APIServer, EngineCore_DP0, Worker_TP0
    pid: int

    @property
    def prefix(self) -> str:
        return f"{CYAN}({self.name} pid={self.pid}){RESET} "


class VllmLog:
    """Thread-safe writer; every write is flushed so a crash loses nothing and tests can tail it."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        # Append: a restarted server keeps writing the same incident log. newline="" keeps the \r\n.
        self._stream: IO[str] = open(path, "a", encoding="utf-8", newline="") if path else sys.stderr
        self._owned = path is not None

    def record(self, proc: Proc | None, level: str, where: str, message: str) -> None:
        """One logger record; `where` is `file.py:line`."""
        head = f"{proc.prefix if proc else ''}{level} {time.strftime('%m-%d %H:%M:%S')} [{where}] "
        self._write("\r\n".join(head + line for line in message.split("\n")) + "\n")

    def raw(self, proc: Proc | None, lines: Iterable[str]) -> None:
        """Text a process prints outside the logger (interpreter tracebacks, progress bars)."""
        prefix = proc.prefix if proc else ""
        self._write("".join(f"{prefix}{line}\n" for line in lines))

    def uvicorn(self, proc: Proc, message: str, level: str = "INFO") -> None:
        self._write(f"{proc.prefix}{(level + ':').ljust(9)} {message}\n")

    def access(self, proc: Proc, client: tuple[str, int], request_line: str, status: int) -> None:
        phrase = HTTPStatus(status).phrase
        self.uvicorn(proc, f'{client[0]}:{client[1]} - "{request_line}" {status} {phrase}')

    def close(self) -> None:
        with self._lock:
            if self._owned:
                self._stream.close()

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                self._stream.write(text)
                self._stream.flush()
            except (ValueError, OSError):
                pass   # the log was closed during shutdown, or the disk is full: keep serving
