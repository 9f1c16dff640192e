"""The levers a launch can pull when a model does not fit, shared by the classifier's advice
(triage/fit.py) and `triage plan`'s alternatives, so both offer the same options."""
from __future__ import annotations

from .precision import QUANT_OPTIONS

#: Tensor-parallel sizes worth proposing (the common node shapes), smallest first.
TP_OPTIONS = (2, 4, 8)
#: gpu_memory_utilization targets worth proposing, highest first.
UTIL_OPTIONS = (0.95, 0.92, 0.9, 0.88, 0.85, 0.8)
#: The KV-cache dtype that halves a 16-bit cache (vLLM and SGLang --kv-cache-dtype).
KV_FP8 = "fp8"

__all__ = ["QUANT_OPTIONS", "TP_OPTIONS", "UTIL_OPTIONS", "KV_FP8"]
