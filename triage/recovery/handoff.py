"""A step only a person can carry out (gateway limits, a ticket), handed to one.

`--yes` answers the tool's own questions; it cannot rate-limit a gateway. Under `--yes` a
`manual` step is therefore recorded as handed to a person (result `handed`), never as done, and
the timeline keeps it open until a note closes it: `triage note INCIDENT "#done:STEP ..."`.
"""
from __future__ import annotations

import re
import shlex

HANDED = "handed"                 # the audit result of a step handed to a person
MARKER = "#done:"                 # a note carrying `#done:STEP` closes the hand-off of STEP
_CLOSES = re.compile(r"(?<![\w#])#done:([A-Za-z0-9][\w.\-]*)")


def close_command(incident: str, step: str) -> str:
    """The note that closes the hand-off of `step`, ready to paste."""
    return f"triage note {shlex.quote(incident)} {shlex.quote(f'{MARKER}{step} what was done')}"


def closed_steps(text: str) -> set[str]:
    """The step ids a note's text closes (`#done:shed-load`, several allowed)."""
    return {m.rstrip(".-") for m in _CLOSES.findall(text)}
