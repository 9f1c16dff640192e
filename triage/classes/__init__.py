"""The OOM classes, one module each, registered once.

A class is a member of the verdict vocabulary (`triage.model.OomClass`, the schema's contract)
and the module `triage/classes/<id>.py`, which holds:

  SPEC       its label, colour, the branch of the walk that reaches it, its causes with their
             thresholds, its runtime rank and specificity (base.ClassSpec)
  assess()   its rules: a pure function of the walk's context and of what its branch knows (the
             GPU-or-not answer, the phase answer, or a reason), returning an Assessment
  recommend(incident, verdict)   optional: the settings advice for a verdict of this class
  early(ctx)                     optional: a finding before any failure (with SPEC.early_question)

`registry()` imports the module of every member, in the vocabulary's order, once; the walk,
advice, the schemas and every command that lists classes read it. Beside the class modules
live the types they share (base), the helpers of several recommenders (settings,
concurrency), the runbook lookup (runbooks) and the build step of what is generated from them
(compiled, schemas, build).

Importing this package imports no class module: only `registry()` does, so the flowchart's
questions can use the shared types without a cycle.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import import_module
from types import ModuleType
from typing import Iterable, Sequence

from ..model import OomClass
from .base import Branch, ClassSpec

# Branches the walk reaches with one class only.
_SINGLE = (Branch.NOT_GPU, Branch.HEALTHY, Branch.STARTUP, Branch.FALLBACK)


class RegistryError(ValueError):
    """Class modules that do not fit together (a class twice, a branch with no class)."""


class Registry:
    """The registered class modules, and everything other modules ask of them."""

    def __init__(self, modules: Sequence[ModuleType]) -> None:
        self.modules = tuple(modules)
        self.specs: tuple[ClassSpec, ...] = tuple(m.SPEC for m in self.modules)
        self._by_id = {s.id.value: m for s, m in zip(self.specs, self.modules)}
        if len(self._by_id) != len(self.modules):
            raise RegistryError("a class is registered twice")
        for branch in _SINGLE:
            found = [s.id.value for s in self.specs if s.branch is branch]
            if len(found) != 1:
                raise RegistryError(f"the {branch.value} branch needs exactly one class, has {found}")
        runtime = [s for s in self.specs if s.branch is Branch.RUNTIME]
        if any(s.runtime_rank is None for s in runtime) or len({s.runtime_rank for s in runtime}) != len(runtime):
            raise RegistryError("every runtime class needs its own runtime_rank")

    # -- one class -------------------------------------------------------------------------------
    def module(self, cls: OomClass | str) -> ModuleType:
        return self._by_id[OomClass(cls).value]

    def spec(self, cls: OomClass | str) -> ClassSpec:
        return self.module(cls).SPEC

    def only(self, branch: Branch) -> ModuleType:
        """The module of the one class the walk reaches on `branch` (not RUNTIME)."""
        return next(m for m in self.modules if m.SPEC.branch is branch)

    @property
    def healthy(self) -> ClassSpec:
        """The class of a server that did not fail."""
        return self.only(Branch.HEALTHY).SPEC

    @property
    def fallback(self) -> ClassSpec:
        """The class of a failure the evidence cannot name (unknown: say what to attach)."""
        return self.only(Branch.FALLBACK).SPEC

    def replaced(self, module: ModuleType) -> "Registry":
        """This registry with `module` in place of the module registered for its class."""
        return Registry(tuple(module if m.SPEC.id is module.SPEC.id else m for m in self.modules))

    # -- lists -----------------------------------------------------------------------------------
    def ids(self, specs: Iterable[ClassSpec] | None = None) -> tuple[str, ...]:
        return tuple(s.id.value for s in (self.specs if specs is None else specs))

    def gpu_oom_ids(self) -> tuple[str, ...]:
        return self.ids(s for s in self.specs if s.gpu_oom)

    def settled_ids(self) -> tuple[str, ...]:
        return self.ids(s for s in self.specs if s.settles)

    def runtime(self) -> list[ModuleType]:
        """The runtime classes, in tie-break order (lowest rank first)."""
        return sorted((m for m in self.modules if m.SPEC.branch is Branch.RUNTIME), key=lambda m: m.SPEC.runtime_rank)

    def early(self) -> list[ModuleType]:
        """The classes with a finding before any failure, asked in registration order."""
        return [m for m in self.modules if m.SPEC.early_question]

    def by_specificity(self) -> tuple[str, ...]:
        ranked = [s for s in self.specs if s.specificity is not None]
        return self.ids(sorted(ranked, key=lambda s: s.specificity))

    def labels(self) -> dict[str, str]:
        return {s.id.value: s.label for s in self.specs}

    def short_labels(self) -> dict[str, str]:
        return {s.id.value: s.short_label for s in self.specs}

    def colours(self) -> dict[str, str]:
        return {s.id.value: s.colour for s in self.specs}

    def cause_ids(self) -> tuple[str, ...]:
        """Every cause a verdict may name, in the order the classes list them."""
        return tuple(dict.fromkeys(c.id for s in self.specs for c in s.causes))


@lru_cache(maxsize=1)
def registry() -> Registry:
    """Every registered class module."""
    return Registry(tuple(import_module(f"{__name__}.{cls.value}") for cls in OomClass))
