"""The engine's own GPU-memory budget (gpu_memory_utilization), read one way for every consumer.

The classifier's accounting-discrepancy cause, the timeline's discrepancy signal and the
postmortem's earlier-signals section all compare nvidia-smi/NVML readings with this number, so
they must agree on where it comes from: the most direct launch record wins (the command line,
then vLLM's 'non-default args', an argparse namespace, the engine-config line), and vLLM's
cache_config_info metric is the fallback.
"""
from __future__ import annotations

from typing import Any

from .evidence.kinds import Kind
from .model import Evidence, EvidenceSet

#: How directly a launch record states the operator's settings (higher wins).
ORIGIN_PRIORITY = {"command line": 4, "non-default args": 3, "argparse namespace": 2, "launcher args": 2,
                   "server_args": 2, "engine config": 1}


def engine_budget(evidence: EvidenceSet) -> tuple[float, Evidence | None] | None:
    """gpu_memory_utilization (0-1] and the record that states it, or None."""
    launches = sorted(evidence.of(Kind.LAUNCH_CONFIG), key=lambda e: ORIGIN_PRIORITY.get(str(e.fields.get("origin")), 0))
    for rec in reversed(launches):
        value = fraction((rec.fields.get("args") or {}).get("gpu_memory_utilization"))
        if value is not None:
            return value, rec
    for rec in evidence.of(Kind.METRIC):
        if rec.fields.get("name") == "cache_config":
            value = fraction((rec.fields.get("labels") or {}).get("gpu_memory_utilization"))
            if value is not None:
                return value, rec
    return None


def fraction(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if 0 < v <= 1 else None
