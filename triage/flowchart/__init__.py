"""The OOM flowchart: the questions in order, and one module per class (registered below).

    Is it a GPU OOM?  (gpu_or_not)      no  -> not_gpu_oom
    Any failure?                        no  -> no_oom (or unknown if nothing is recognisable)
    Before serving?   (phase)           yes -> startup
    While serving:    prefix_cache | chronic | burst, the best-supported one
    Too little to tell                      -> unknown, with what to attach
"""
from __future__ import annotations

from typing import Mapping

from ..model import EvidenceSet, OomClass, Step, Verdict
from ..thresholds import MIN_CONFIDENCE, SPECIFIC_WINS
from . import burst, chronic, gpu_or_not, no_oom, not_gpu_oom, phase, prefix_cache, startup, unknown
from .base import Assessment
from .context import Context

#: One module per verdict class: the walk below calls the module registered for each class, so
#: a class's rules live in (and are replaced by) its module alone. Runtime classes declare a
#: RUNTIME_RANK: they compete for an OOM that happened while serving, lower rank first on ties.
CLASS_MODULES = {
    OomClass.NOT_GPU_OOM: not_gpu_oom,
    OomClass.NO_OOM: no_oom,
    OomClass.STARTUP: startup,
    OomClass.PREFIX_CACHE: prefix_cache,
    OomClass.CHRONIC: chronic,
    OomClass.BURST: burst,
    OomClass.UNKNOWN: unknown,
}
Registry = Mapping[OomClass, object]


def runtime_modules(registry: Registry = CLASS_MODULES) -> list:
    """The registered classes that compete for a runtime OOM, in tie-break order."""
    found = [m for m in registry.values() if getattr(m, "RUNTIME_RANK", None) is not None]
    return sorted(found, key=lambda m: m.RUNTIME_RANK)


def walk(ev: EvidenceSet, registry: Registry = CLASS_MODULES) -> tuple[Assessment, list[Step], Context]:
    reg = registry
    ctx = Context(ev)
    steps: list[Step] = []
    gpu = gpu_or_not.assess(ctx)
    steps.append(Step(gpu_or_not.QUESTION, _yes_no(gpu.answer), gpu.why, tuple(gpu.evidence)))
    if gpu.answer == "no":
        return reg[OomClass.NOT_GPU_OOM].assess(ctx, gpu), steps, ctx
    if gpu.answer == "no_failure":
        # Memory climbing with no OOM yet is still a chronic finding worth reporting.
        growth = reg[OomClass.CHRONIC].assess(ctx, phase.PhaseAnswer("unknown", "", 0.0))
        if growth.supported and growth.confidence >= 0.5:
            steps.append(Step("Is GPU memory growing over time?", "yes", growth.causes[0].title,
                              tuple(growth.evidence)))
            return growth, steps, ctx
        stall = getattr(reg[OomClass.PREFIX_CACHE], "stall", None)
        thrash = stall(ctx) if stall is not None else None
        if thrash is not None:
            steps.append(Step("Is the prefix cache starving live requests?", "yes", thrash.why, tuple(thrash.evidence)))
            return thrash, steps, ctx
        healthy = reg[OomClass.NO_OOM].assess(ctx)
        if healthy.supported:
            steps.append(Step("Does the evidence show a working server?", "yes", healthy.why, tuple(healthy.evidence)))
            return healthy, steps, ctx
        steps.append(Step("Does the evidence show a working server?", "unknown", healthy.why))
        return reg[OomClass.UNKNOWN].assess(ctx, "no failure and no recognisable server activity in the evidence"), \
            steps, ctx
    if gpu.answer == "unclear":
        return reg[OomClass.UNKNOWN].assess(ctx, gpu.why, gpu.evidence), steps, ctx

    anchor = ctx.primary
    assert anchor is not None
    ph = phase.assess(ctx, anchor)
    steps.append(Step(phase.QUESTION, {"startup": "yes", "runtime": "no"}.get(ph.phase, "unknown"), ph.why,
                      tuple(ph.evidence)))
    if ph.phase == "startup":
        return reg[OomClass.STARTUP].assess(ctx, ph), steps, ctx
    candidates = [m.assess(ctx, ph) for m in runtime_modules(reg)]
    for cand in candidates:
        question = f"Does the evidence fit a {cand.oom_class.value.replace('_', '-')} OOM?"
        steps.append(Step(question, "yes" if cand.confidence >= MIN_CONFIDENCE else "no",
                          cand.why if cand.confidence >= MIN_CONFIDENCE else (cand.summary or cand.why),
                          tuple(cand.evidence[:3]) if cand.confidence >= MIN_CONFIDENCE else ()))
    best = max(candidates, key=lambda a: a.confidence)   # max() keeps the first of equals
    # Burst is the generic runtime class: KV usage near 100% and a queue are also what a crowded
    # prefix cache or a fragmented allocator look like from outside. A specific class that is
    # well supported on its own evidence explains the pressure better.
    specific = [c for c in candidates if c.oom_class is not OomClass.BURST and c.confidence >= SPECIFIC_WINS]
    if best.oom_class is OomClass.BURST and specific:
        best = specific[0]
    if best.confidence < MIN_CONFIDENCE:
        why = ("a GPU OOM, but " + ph.why) if ph.phase == "unknown" else \
              "a GPU OOM while serving, with nothing that tells burst, chronic or prefix-cache apart"
        attach = [a for c in candidates for a in c.attach]
        return reg[OomClass.UNKNOWN].assess(ctx, why, [anchor], attach), steps, ctx
    return best, steps, ctx


def _yes_no(answer: str) -> str:
    return {"yes": "yes", "no": "no", "no_failure": "no failure", "unclear": "unknown"}[answer]


def decide(ev: EvidenceSet, registry: Registry = CLASS_MODULES) -> tuple[Verdict, Context]:
    """Evidence in, verdict out (with facts, without advice), and the context the walk built."""
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
    return verdict, ctx


def classify(ev: EvidenceSet) -> Verdict:
    """The flowchart's verdict followed by the advice for it (triage.api.classify_evidence)."""
    from ..api import classify_evidence

    return classify_evidence(ev)
