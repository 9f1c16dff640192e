"""The OOM flowchart: the questions in order, and one module per class (registered below).

    Is it a GPU OOM?  (gpu_or_not)      no  -> not_gpu_oom
    Any failure?                        no  -> no_oom (or unknown if nothing is recognisable)
    Before serving?   (phase)           yes -> startup
    While serving:    prefix_cache | chronic | burst, the best-supported one
    Too little to tell                      -> unknown, with what to attach
"""
from __future__ import annotations

from ..model import EvidenceSet, OomClass, Step, Verdict
from . import burst, chronic, gpu_or_not, no_oom, not_gpu_oom, phase, prefix_cache, startup, unknown
from .base import Assessment
from .context import Context

#: One module per verdict class, in the order the flowchart reaches them.
CLASS_MODULES = {
    OomClass.NOT_GPU_OOM: not_gpu_oom,
    OomClass.NO_OOM: no_oom,
    OomClass.STARTUP: startup,
    OomClass.PREFIX_CACHE: prefix_cache,
    OomClass.CHRONIC: chronic,
    OomClass.BURST: burst,
    OomClass.UNKNOWN: unknown,
}
RUNTIME_ORDER = (prefix_cache, chronic, burst)    # ties go to the more specific class
MIN_CONFIDENCE = 0.4                              # below this, say unknown
SPECIFIC_WINS = 0.6                               # a prefix-cache/chronic finding this strong beats burst


def walk(ev: EvidenceSet) -> tuple[Assessment, list[Step], Context]:
    ctx = Context(ev)
    steps: list[Step] = []
    gpu = gpu_or_not.assess(ctx)
    steps.append(Step(gpu_or_not.QUESTION, _yes_no(gpu.answer), gpu.why, tuple(gpu.evidence)))
    if gpu.answer == "no":
        return not_gpu_oom.assess(ctx, gpu), steps, ctx
    if gpu.answer == "no_failure":
        # Memory climbing with no OOM yet is still a chronic finding worth reporting.
        growth = chronic.assess(ctx, phase.PhaseAnswer("unknown", "", 0.0))
        if growth.supported and growth.confidence >= 0.5:
            steps.append(Step("Is GPU memory growing over time?", "yes", growth.causes[0].title,
                              tuple(growth.evidence)))
            return growth, steps, ctx
        thrash = prefix_cache.stall(ctx)
        if thrash is not None:
            steps.append(Step("Is the prefix cache starving live requests?", "yes", thrash.why, tuple(thrash.evidence)))
            return thrash, steps, ctx
        healthy = no_oom.assess(ctx)
        if healthy.supported:
            steps.append(Step("Does the evidence show a working server?", "yes", healthy.why, tuple(healthy.evidence)))
            return healthy, steps, ctx
        steps.append(Step("Does the evidence show a working server?", "unknown", healthy.why))
        return unknown.assess(ctx, "no failure and no recognisable server activity in the evidence"), steps, ctx
    if gpu.answer == "unclear":
        return unknown.assess(ctx, gpu.why, gpu.evidence), steps, ctx

    anchor = ctx.primary
    assert anchor is not None
    ph = phase.assess(ctx, anchor)
    steps.append(Step(phase.QUESTION, {"startup": "yes", "runtime": "no"}.get(ph.phase, "unknown"), ph.why,
                      tuple(ph.evidence)))
    if ph.phase == "startup":
        return startup.assess(ctx, ph), steps, ctx
    candidates = [m.assess(ctx, ph) for m in RUNTIME_ORDER]
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
        return unknown.assess(ctx, why, [anchor], attach), steps, ctx
    return best, steps, ctx


def _yes_no(answer: str) -> str:
    return {"yes": "yes", "no": "no", "no_failure": "no failure", "unclear": "unknown"}[answer]


def classify(ev: EvidenceSet) -> Verdict:
    """Evidence in, verdict out (with advice and facts)."""
    from ..advice import advise
    from .facts import collect_facts

    result, steps, ctx = walk(ev)
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
    advise(verdict, ctx)
    return verdict
