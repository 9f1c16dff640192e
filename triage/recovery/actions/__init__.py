"""The closed set of recovery actions: every `Action` object a module of this package defines.

A module holds one action (or two close ones) as a class plus the object the package registers
(`drain = Drain()`); adding a file with a new one adds the action, its parameters to the runbook
validator and its lines to the plan. `REGISTRY` maps each `action:` name to its object, in the
order of the modules; `RUNNERS` is the executor's view of it (name -> callable(step, ctx, deadline)),
a plain dict so that a test can swap one runner.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from ..context import Deadline, Outcome, RunbookStep, RunContext
from .base import Action, Param

Runner = Callable[[RunbookStep, RunContext, Deadline], Outcome]


def _discover() -> dict[str, Action]:
    found: dict[str, Action] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, Action) and type(value).__module__ == module.__name__:
                if value.name in found:
                    raise TypeError(f"two recovery actions are called {value.name!r}: "
                                    f"{type(found[value.name]).__qualname__} and {type(value).__qualname__}")
                found[value.name] = value
    return found


REGISTRY: dict[str, Action] = _discover()
RUNNERS: dict[str, Runner] = dict(REGISTRY)
# Steps that change what runs: the executor checks the server still fails before the first one.
DESTRUCTIVE: frozenset[str] = frozenset(name for name, action in REGISTRY.items() if action.destructive)

__all__ = ["Action", "DESTRUCTIVE", "Param", "REGISTRY", "RUNNERS", "Runner"]
