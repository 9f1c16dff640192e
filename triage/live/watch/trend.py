"""A bounded window of (time, value) points and its least-squares slope.

The memory trend asks "is used memory climbing", not "is it high": a leak of 12.8 MB per 1k
requests never trips a level alert. The window is bounded twice, so a watch left running for
weeks holds a fixed amount: by age (WINDOW_S, the leak_window_s threshold: a day, over which a
slow leak stands out) and by count (a point is kept at most every WINDOW_S / MAX_POINTS seconds;
readings in between only refresh the last point).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...thresholds import LEAK_WINDOW_S

WINDOW_S = LEAK_WINDOW_S
MAX_POINTS = 720


@dataclass(frozen=True)
class Fit:
    slope_per_s: float
    span_s: float
    points: int


class Window:
    def __init__(self, window_s: float = WINDOW_S, max_points: int = MAX_POINTS) -> None:
        self.window_s = window_s
        self.gap_s = window_s / max_points
        self.points: deque[tuple[float, float]] = deque()
        self._newest_kept = False        # whether the last point is a kept one (else: refreshable)

    def add(self, t: float, value: float) -> None:
        if self.points and not self._newest_kept:
            self.points.pop()            # a between-points reading: replaced by the newer one
        self.points.append((t, value))
        # The newest point stays for good once it is a full gap past the one before it.
        self._newest_kept = len(self.points) == 1 or t - self.points[-2][0] >= self.gap_s
        while len(self.points) > 1 and t - self.points[0][0] > self.window_s:
            self.points.popleft()

    def values(self) -> list[float]:
        return [v for _, v in self.points]

    def fit(self) -> Fit | None:
        """The least-squares slope (per second) over the window, or None below two points."""
        n = len(self.points)
        if n < 2:
            return None
        t0 = self.points[0][0]
        mean_t = sum(t - t0 for t, _ in self.points) / n
        mean_v = sum(v for _, v in self.points) / n
        var = sum((t - t0 - mean_t) ** 2 for t, _ in self.points)
        if var <= 0:
            return None
        cov = sum((t - t0 - mean_t) * (v - mean_v) for t, v in self.points)
        return Fit(cov / var, self.points[-1][0] - t0, n)

    def clear(self) -> None:
        self.points.clear()
        self._newest_kept = False
