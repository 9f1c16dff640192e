"""What a recovery action is: its parameters, whether it changes what runs, how the plan
describes it, and how it runs.

An action is a class with a `name` (the runbook's `action:`), its `params` (type, default,
bounds) and `destructive`; it writes its plan lines in `describe(step, plan)` and does its work
in `run(step, ctx, deadline)`. Calling the object runs it, so the registry's objects are the
executor's runners. The runbook validator, the plan and the executor read all of this from the
class: a parameter's default is written once, on its `Param`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping

from ..context import Deadline, Outcome, RunbookStep, RunContext
from ..plan import Plan

NUMBER = (int, float)


@dataclass(frozen=True)
class Param:
    """One parameter a runbook step may give its action."""
    name: str
    types: type | tuple[type, ...]
    default: Any = None                  # what the action uses when the step leaves it out
    low: float | None = None             # the bounds a number must keep, both included
    high: float | None = None
    words: tuple[str, ...] = ()          # words accepted instead of a number
    # Checks a value of the right type further: (where under the parameter, problem) or None.
    check: Callable[[Any], tuple[str, str] | None] | None = None

    @property
    def bounds(self) -> tuple[float, float | None] | None:
        return None if self.low is None else (self.low, self.high)


class Action:
    """One step kind of a runbook. Subclasses set `name` and `params` and implement `run`."""

    name: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    # It acts on the server (drains, signals, restarts, resets): before the first such step the
    # executor checks that the server still fails — one that serves again needs no recovery.
    destructive: ClassVar[bool] = False

    def __call__(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        return self.run(step, ctx, deadline)

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(f"{self.name} has no parameter {name!r}")

    def value(self, step: RunbookStep, name: str) -> Any:
        """The step's value of parameter `name`, or its default."""
        return step.params.get(name, self.param(name).default)

    def check(self, params: Mapping[str, Any]) -> tuple[str, str] | None:
        """A problem of the parameters taken together, once each passed on its own: (parameter, problem)."""
        return None

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        """The plan's lines for this step: exactly what it will do, with every number it will use."""
        return []

    def audit_args(self, step: RunbookStep, ctx: RunContext) -> dict[str, Any]:
        """What the step's start record holds besides its parameters: what it is about to act on."""
        return {}

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        raise NotImplementedError
