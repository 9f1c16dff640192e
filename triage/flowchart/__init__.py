"""The OOM flowchart: the questions in order, and the walk through the registered classes.

    Is it a GPU OOM?  (gpu_or_not)      no  -> the look-alike class
    Any failure?                        no  -> a class seen coming (early), or the healthy class,
                                               or the fallback if nothing is recognisable
    Before serving?   (phase)           yes -> the start-up class
    While serving:    the runtime classes compete, the best-supported one wins
    Too little to tell                      -> the fallback class, with what to attach

The classes are the modules registered in triage.classes; each declares in its spec where the
walk reaches it (`Branch`), so the walk names none of them.
"""
from __future__ import annotations

from typing import Any

from ..classes.base import Assessment, Branch
from ..classes import Registry
from ..model import EvidenceSet, Step, Verdict
from ..thresholds import MIN_CONFIDENCE, SPECIFIC_WINS
from . import gpu_or_not, phase
from .context import Context
from .incident import Incident, incident_of


def default_registry() -> Registry:
    from ..classes import registry

    return registry()


def walk(ev: EvidenceSet, registry: Registry | None = None) -> tuple[Assessment, list[Step], Context]:
    reg = registry or default_registry()
    ctx = Context(ev)
    steps: list[Step] = []
    gpu = gpu_or_not.assess(ctx)
    steps.append(Step(gpu_or_not.QUESTION, _yes_no(gpu.answer), gpu.why, tuple(gpu.evidence)))
    fallback = reg.only(Branch.FALLBACK)
    if gpu.answer == "no":
        return reg.only(Branch.NOT_GPU).assess(ctx, gpu), steps, ctx
    if gpu.answer == "no_failure":
        return _without_failure(ctx, reg, steps), steps, ctx
    if gpu.answer == "unclear":
        return fallback.assess(ctx, gpu.why, gpu.evidence), steps, ctx

    anchor = ctx.primary
    assert anchor is not None
    ph = phase.assess(ctx, anchor)
    steps.append(Step(phase.QUESTION, {"startup": "yes", "runtime": "no"}.get(ph.phase, "unknown"), ph.why,
                      tuple(ph.evidence)))
    if ph.phase == "startup":
        return reg.only(Branch.STARTUP).assess(ctx, ph), steps, ctx
    runtime = reg.runtime()
    candidates = [m.assess(ctx, ph) for m in runtime]
    for cand in candidates:
        question = f"Does the evidence fit a {_spoken(cand.oom_class.value)} OOM?"
        steps.append(Step(question, "yes" if cand.confidence >= MIN_CONFIDENCE else "no",
                          cand.why if cand.confidence >= MIN_CONFIDENCE else (cand.summary or cand.why),
                          tuple(cand.evidence[:3]) if cand.confidence >= MIN_CONFIDENCE else ()))
    best = max(candidates, key=lambda a: a.confidence)   # max() keeps the first of equals
    # The generic runtime class (burst) is what a crowded prefix cache or a fragmented allocator
    # also look like from outside (KV usage near 100%, a queue). A specific class that is well
    # supported on its own evidence explains the pressure better.
    specific = [c for c in candidates if not reg.spec(c.oom_class).generic and c.confidence >= SPECIFIC_WINS]
    if reg.spec(best.oom_class).generic and specific:
        best = specific[0]
    if best.confidence < MIN_CONFIDENCE:
        named = [_spoken(s.id.value) for s in reg.specs if s.branch is Branch.RUNTIME]
        why = ("a GPU OOM, but " + ph.why) if ph.phase == "unknown" else \
              f"a GPU OOM while serving, with nothing that tells {', '.join(named[:-1])} or {named[-1]} apart"
        attach = [a for c in candidates for a in c.attach]
        return fallback.assess(ctx, why, [anchor], attach), steps, ctx
    return best, steps, ctx


def _without_failure(ctx: Context, reg: Registry, steps: list[Step]) -> Assessment:
    """No failure: a class that can be seen coming (memory growing, a starved prefix cache), else a
    working server, else nothing recognisable (the fallback)."""
    for module in reg.early():
        found = module.early(ctx)
        if found is not None:
            steps.append(Step(module.SPEC.early_question, "yes", found.why, tuple(found.evidence)))
            return found
    healthy_class = reg.only(Branch.HEALTHY)
    healthy = healthy_class.assess(ctx)
    if healthy.supported:
        steps.append(Step(healthy_class.QUESTION, "yes", healthy.why, tuple(healthy.evidence)))
        return healthy
    steps.append(Step(healthy_class.QUESTION, "unknown", healthy.why))
    return reg.only(Branch.FALLBACK).assess(ctx, "no failure and no recognisable server activity in the evidence")


def _spoken(class_id: str) -> str:
    return class_id.replace("_", "-")


def _yes_no(answer: str) -> str:
    return {"yes": "yes", "no": "no", "no_failure": "no failure", "unclear": "unknown"}[answer]


def decide(ev: EvidenceSet, registry: Registry | None = None) -> tuple[Verdict, Incident]:
    """Evidence in, verdict out (with facts, without advice), and what advice may read of it."""
    from .facts import collect_facts

    result, steps, ctx = walk(ev, registry)
    verdict = Verdict(
        oom_class=result.oom_class,
        confidence=result.confidence,
        summary=result.summary,
        path=steps,
        causes=list(result.causes),
        evidence=list(result.evidence),
        attach=list(dict.fromkeys(result.attach)),
        facts=collect_facts(ctx),
    )
    return verdict, incident_of(ctx, verdict)

