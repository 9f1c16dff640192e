"""The plan's verdicts and how it writes sizes: shared by the plan and the alternatives it lists."""
from __future__ import annotations

GiB = 1 << 30
FITS, TIGHT, FAILS_STARTUP, FAILS_BURST = "fits", "tight", "will_fail_at_startup", "will_fail_under_burst"
VERDICT_TEXT = {FITS: "fits", TIGHT: "tight", FAILS_STARTUP: "will fail at start-up",
                FAILS_BURST: "will fail under a burst"}


def gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"
