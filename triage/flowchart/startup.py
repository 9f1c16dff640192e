"""Startup OOM: the server ran out of GPU memory before it ever served.

**Signature**: vLLM's start-up checks (KV cache cannot hold max_model_len, no memory for cache
blocks, free memory below the utilisation budget, sampler warm-up OOM, weight loading OOM), or
an allocator OOM whose stack is in weight loading / profiling / KV sizing / graph capture, or
that comes after start-up lines only.
**Not to be confused with**: a runtime OOM on the first request after start-up.
**Recovery**: runbooks/startup.yaml
"""
from __future__ import annotations

from ..model import OomClass
from .base import Assessment
from .causes import detect
from .context import Context
from .phase import PhaseAnswer

CLASS = OomClass.STARTUP
# Causes read straight off a failure line first; inferred ones (a high utilisation target) last.
CAUSE_ORDER = ("kv_cache_blowout", "other_processes", "concurrency_misjudged", "model_too_large",
               "config_overshoot", "accounting_discrepancy", "known_engine_bug")


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    if phase.phase != "startup":
        return Assessment(CLASS, 0.0, "", "it did not fail during start-up")
    causes = detect(ctx, *CAUSE_ORDER, oom_class=CLASS.value)
    confidence = min(0.97, 0.55 + 0.45 * phase.strength)
    if causes:
        confidence = min(0.97, confidence + 0.05)
    oom = ctx.primary
    lead = causes[0].detail or causes[0].title if causes else f"{oom.kind} at {oom.where}" if oom else ""
    summary = f"Start-up OOM: {lead}" if lead else "Start-up OOM"
    evidence = list(phase.evidence) + ([oom] if oom else [])
    attach = []
    if not causes:
        attach.append("the launch arguments (the 'non-default args' line or the command) and the memory-profiling lines")
    return Assessment(CLASS, round(confidence, 2), summary, phase.why, evidence, causes, attach)
