"""One error tree, translated to a message and an exit code at one boundary (the CLI)."""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0            # a verdict was reached (any class, no_oom included)
    BAD_INPUT = 1     # unreadable / wrong input, or a failed step
    USAGE = 2         # click's own usage errors
    UNKNOWN = 3       # a failure was seen, but the evidence does not settle its class
    WILL_FAIL = 4     # `triage plan`: the model and flags will fail on that GPU (at start-up or under a burst)


class TriageError(Exception):
    """An error the user can act on. The message is one line: what is wrong and with what."""

    exit_code = ExitCode.BAD_INPUT


class BadInput(TriageError):
    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")
