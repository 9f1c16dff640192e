"""The log a relaunched server writes: INCIDENT/recovery/relaunch-<UTC>.log, made safely.

It is created fresh (O_EXCL) beneath the held incident directory with no link followed on the
way, and read back through the same descriptor: whoever owns the incident directory can plant
nothing there that root then writes to or reads.
"""
from __future__ import annotations

import os
import re
import secrets
from datetime import datetime, timezone

from ...bundle import RELAUNCH_DIR
from ...errors import BadInput
from ...safedir import HeldDir
from ..context import RunContext

SERVING_URL = re.compile(r"(?:Starting vLLM API server(?: \d+)? on|Uvicorn running on) (https?://[\w.\-\[\]:]+)")


class RelaunchLog:
    """INCIDENT/recovery/relaunch-<UTC>.log: created fresh (O_EXCL) beneath the held incident
    directory, no link followed on the way, and read back through the same descriptor — the
    name is never opened again, so nothing planted there is written to or read."""

    MAX_SCAN = 1 << 20           # the serving line is looked for in what the server wrote since the last look

    def __init__(self, fd: int, name: str):
        self.fd = fd
        self.name = name
        self._seen = 0
        self._carry = b""

    @classmethod
    def create(cls, ctx: RunContext) -> "RelaunchLog":
        held = ctx.held if ctx.held is not None else HeldDir.open(ctx.incident)
        try:
            with held.subdir(RELAUNCH_DIR, create=True) as folder:
                stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
                for name in (f"relaunch-{stamp}.log", f"relaunch-{stamp}-{secrets.token_hex(4)}.log"):
                    try:
                        return cls(folder.create_new(name, 0o644, readable=True), f"{RELAUNCH_DIR}/{name}")
                    except BadInput as exc:
                        if "exists" not in exc.problem:
                            raise
                raise BadInput(folder.display(f"relaunch-{stamp}.log"), "exists already (planted?)")
        finally:
            if held is not ctx.held:
                held.close()

    def __enter__(self) -> "RelaunchLog":
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def _read(self, start: int, size: int) -> bytes:
        try:
            return os.pread(self.fd, size, start)
        except OSError:
            return b""

    def announced_url(self) -> str | None:
        end = os.fstat(self.fd).st_size
        start = max(self._seen, end - self.MAX_SCAN)
        chunk = self._carry + self._read(start, end - start)
        self._seen = end
        cut = chunk.rfind(b"\n") + 1
        self._carry = chunk[cut:][-4096:]
        found = SERVING_URL.findall(chunk[:cut].decode("utf-8", errors="replace"))
        return found[-1].replace("0.0.0.0", "127.0.0.1") if found else None

    def tail(self, lines: int = 15) -> str:
        end = os.fstat(self.fd).st_size
        text = self._read(max(0, end - 64 * 1024), 64 * 1024).decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "(no log)"
