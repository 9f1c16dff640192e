"""Stats lines in bounded memory: the minutes before a failure in full, the rest thinned out."""
from __future__ import annotations

from collections import deque
from typing import Callable, Iterator, Union

from ..model import Evidence

# A stats line held unparsed: (line number, raw bytes, the sequence number its record takes).
RawStats = tuple


class StatsWindow:
    """Stats lines in bounded memory: the most recent ones in full, older ones thinned out.

    A month of V1 logs has ~260k stats lines; the rules need the minutes before a failure (kept
    whole, flushed when a failure is recorded) and a trend over the rest (every k-th line, k
    doubling whenever the history would pass HISTORY lines). Lines met on the serving fast path
    are held as raw bytes and parsed (by `parse`) only if they are still kept when flushed.
    """

    RECENT = 256
    HISTORY = 1024

    def __init__(self, parse: Callable[[RawStats], Evidence | None] = lambda raw: None) -> None:
        self.parse = parse
        self.recent: deque[Union[Evidence, RawStats]] = deque()
        self.history: list[Union[Evidence, RawStats]] = []
        self.step = 1
        self.count = 0

    def hold(self, record: Union[Evidence, RawStats]) -> None:
        self.recent.append(record)
        if len(self.recent) > self.RECENT:
            old = self.recent.popleft()
            self.count += 1
            if self.count % self.step == 0:
                self.history.append(old)
                if len(self.history) > self.HISTORY:
                    self.history = self.history[::2]
                    self.step *= 2

    def flush(self) -> Iterator[Evidence]:
        out = self.history + list(self.recent)
        self.history, self.recent = [], type(self.recent)()
        for item in out:
            record = self.parse(item) if isinstance(item, tuple) else item
            if record is not None:
                yield record
