"""The types every recovery module shares: a runbook and its steps, what was prepared before
acting, a planned step, what a step gets to work with while it runs, and what it gives back.

An action (`actions/`) runs as `action(step, ctx, deadline) -> Outcome`. It reads the identified
processes, launch spec and server URL from the `RunContext`, bounds every wait by the `Deadline`,
and never writes the audit log itself: the executor records each step around it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..safedir import HeldDir
from . import interrupts
from .identify import Identification
from .privileges import RunAs

# Where a launch command came from. Only the first two count as confirmed by --yes: anything read
# from the incident directory (actions.jsonl, incident.yaml, the logs) can be written by whoever
# can write the bundle, and runs only once the operator confirmed that very command.
LIVE = "live"          # /proc/PID/cmdline of the confirmed, running server
FLAG = "flag"          # --launch-command, typed by the operator
BUNDLE = "bundle"

# How a relaunch starts the server; a step that does not say uses the first.
DRIVERS = ("process", "systemctl", "kubectl")


@dataclass(frozen=True)
class RunbookStep:
    id: str
    title: str
    action: str
    timeout_s: float
    on_failure: str                      # "stop" | "continue"
    verify: str                          # what proves the step worked, in words
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Runbook:
    id: str
    title: str
    applies_to: tuple[str, ...]
    summary: str
    steps: tuple[RunbookStep, ...]
    source: str


@dataclass(frozen=True)
class PlannedStep:
    number: int
    step: RunbookStep
    details: tuple[str, ...]


def relaunch_driver(step: RunbookStep, override: str | None = None) -> str:
    """How a restart or rollback step starts the server: --driver, else the step's own, else the first."""
    return override or str(step.params.get("driver", DRIVERS[0]))


class StepTimeout(TimeoutError):
    """A step ran past its timeout (recorded as `timeout` in the audit log)."""


class Deadline:
    """A step's time budget on the monotonic clock; every wait inside a step is cut to it."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.end = clock() + seconds

    def left(self) -> float:
        return max(0.0, self.end - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.end

    def check(self, what: str) -> None:
        if self.expired():
            raise StepTimeout(f"{what}: step timeout of {self.seconds:g} s reached")

    def sleep(self, seconds: float) -> None:
        interrupts.check()
        time.sleep(max(0.0, min(seconds, self.left())))
        interrupts.check()


@dataclass(frozen=True)
class LaunchSpec:
    """How to start the server again: argv (no shell), environment overrides, working directory."""
    argv: list[str]
    env: dict[str, str]                 # overrides on top of the base environment
    cwd: str | None
    base_env: dict[str, str] | None     # the old server's environment when readable, else ours
    source: str                         # where argv came from ("the running APIServer pid 12", "--launch-command")
    old_argv: list[str] | None = None   # the command line before the verdict's changes
    origin: str = BUNDLE                # LIVE | FLAG | BUNDLE (see above)
    bundle_env: tuple[str, ...] = ()    # keys of `env` whose values came from the bundle
    base_env_uid: int | None = None     # whose environment base_env is (None with base_env: unknown)
    missing: tuple[str, ...] = ()       # what the command lacks (a secret the log masked): refused before step 1


def rollback_spec(known_good: list[str], base: LaunchSpec | None) -> LaunchSpec:
    """The launch a rollback runs: the last command that served (read from actions.jsonl), in the
    current server's working directory and environment."""
    return LaunchSpec(argv=list(known_good), env={}, cwd=base.cwd if base else None,
                      base_env=base.base_env if base else None, source="the last launch that served (actions.jsonl)",
                      old_argv=base.argv if base else None, origin=BUNDLE,
                      base_env_uid=base.base_env_uid if base else None)


@dataclass
class Prepared:
    """Everything recovery knows before it acts, read without changing anything (`prepare.py`)."""
    model: str | None
    url: str | None
    identification: Identification
    launch: LaunchSpec | None
    known_good: list[str] | None
    notes: list[str]
    run_as: RunAs | None = None          # who a relaunch runs as (read before anything is stopped)


@dataclass
class ExecOptions:
    yes: bool = False                           # answer every confirmation with yes
    allow_gpu_reset: bool = False
    driver: str | None = None                   # overrides the runbook's restart driver
    unit: str | None = None                     # systemd unit for the systemctl driver
    deployment: str | None = None               # NAMESPACE/NAME for the kubectl driver
    force: bool = False                         # act even if the server answers a real completion
    trusted_launches: tuple[str, ...] = ()      # --trust-bundle-launch: digests of bundle commands the operator read
    confirm: Callable[[str], bool] = lambda prompt: False
    say: Callable[[str], None] = lambda line: None


@dataclass
class RunContext:
    incident: Path
    runbook_id: str
    model: str | None
    url: str | None
    identification: Identification
    launch: LaunchSpec | None
    options: ExecOptions
    known_good: list[str] | None = None        # last argv that served (for rollback)
    verdict: Any = None                         # the Verdict: its recommendations drive kubectl's args patch
    launched: list[dict[str, Any]] = field(default_factory=list)   # servers started by this run
    relaunch_driver: str | None = None          # how the runbook starts the server again (None: it does not)
    run_as: RunAs | None = None                 # the stopped server's identity (None: this process's)
    held: HeldDir | None = None                 # the incident directory held open: relaunch logs go beneath it


@dataclass
class Outcome:
    result: str                     # ok | failed | skipped | aborted | handed (to a person: handoff.py)
    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)   # recorded in the step's end record
    by_hand: str | None = None      # what the operator should do when this step failed

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def ok(*lines: str, **data: Any) -> Outcome:
    return Outcome("ok", list(lines), data)


def failed(by_hand: str, *lines: str, **data: Any) -> Outcome:
    return Outcome("failed", list(lines), data, by_hand)


def skipped(*lines: str, **data: Any) -> Outcome:
    return Outcome("skipped", list(lines), data)


def aborted(by_hand: str, *lines: str, **data: Any) -> Outcome:
    return Outcome("aborted", list(lines), data, by_hand)
