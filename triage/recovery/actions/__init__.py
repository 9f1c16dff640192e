"""The closed set of recovery actions, registered in one place.

Each module holds the function for one action (or two close ones); the runbook validator's
ACTIONS table lists the same names with their parameters, and a test keeps the two in step.
"""
from __future__ import annotations

from typing import Callable

from ..context import Deadline, Outcome, RunContext
from ..runbooks import RunbookStep
from . import drain, gpu, health, launch, manual, stop

Runner = Callable[[RunbookStep, RunContext, Deadline], Outcome]

RUNNERS: dict[str, Runner] = {
    "drain": drain.run,
    "stop_server": stop.run,
    "check_gpu_free": gpu.check_free,
    "gpu_reset": gpu.reset,
    "restart": launch.restart,
    "rollback": launch.rollback,
    "wait_healthy": health.wait_healthy,
    "verify": health.verify,
    "manual": manual.run,
}
