"""The API server's periodic stats line (V1 0.11 format, formats.md 2.5).

vLLM writes it every 10 s; the simulator every STATS_INTERVAL_S so a test of a few seconds
still has a history of load before a failure. Like vLLM, an interval with no tokens after an
idle one is logged at DEBUG, i.e. not at all in an INFO log.
"""
from __future__ import annotations

import threading
import time

from .engine import Engine, Snapshot
from .vlog import Proc, VllmLog

STATS_INTERVAL_S = 1.0


def stats_line(snap: Snapshot, prompt_tps: float, generation_tps: float) -> str:
    return (f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: "
            f"{generation_tps:.1f} tokens/s, Running: {snap.running} reqs, Waiting: {snap.waiting} reqs, "
            f"GPU KV cache usage: {snap.kv_usage * 100:.1f}%, Prefix cache hit rate: {snap.recent_hit_rate * 100:.1f}%")


class StatsLogger:
    def __init__(self, engine: Engine, log: VllmLog, api: Proc) -> None:
        self._engine = engine
        self._log = log
        self._api = api
        self._was_active = False
        self._last = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        elapsed = max(now - self._last, 1e-3)
        self._last = now
        prompt, generation = self._engine.take_interval()
        snap = self._engine.snapshot()
        if snap.dead:
            return
        active = prompt > 0 or generation > 0 or snap.running > 0
        if active or self._was_active:
            line = stats_line(snap, prompt / elapsed, generation / elapsed)
            self._log.record(self._api, "INFO", "loggers.py:127", line)
        self._was_active = active

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(STATS_INTERVAL_S):
            if self._engine.dead:
                return
            self.tick()
