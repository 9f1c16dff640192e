"""Every single change that makes a plan start and survive a burst, each checked by evaluating the
plan again, with its arithmetic, best first.

The levers are the shared ones of triage/memory/levers.py (the classifier's fit advice offers the
same): another gpu_memory_utilization, an fp8 KV cache, more tensor parallelism, a shorter
max_model_len, a quantised checkpoint. Best first: a change of launch flags that keeps the
length and the GPUs, then a shorter length, then another checkpoint, then more GPUs; within
each, a verdict of fits before tight, then the fewest GPUs, the most faithful checkpoint, or
the larger KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..memory.config import ModelShape
from ..memory.levers import KV_FP8, QUANT_OPTIONS, TP_OPTIONS, UTIL_OPTIONS
from .checks import valid_tp
from .engines import Sizing
from ..units import count_noun
from .verdicts import FITS, TIGHT, gib

GiB = 1 << 30
_COST = {"gpu_memory_utilization": 0, "kv_cache_dtype": 0, "max_num_batched_tokens": 0, "max_model_len": 1,
         "checkpoint": 2, "tensor_parallel_size": 3}


@dataclass(frozen=True)
class Alternative:
    setting: str
    from_value: object
    to_value: object
    verdict: str
    kv_tokens: int
    arithmetic: str
    manual: bool = False        # needs more than a flag (another checkpoint)


def alternatives(shape: ModelShape, o, req, sizing: Sizing, evaluate: Callable) -> list[Alternative]:
    """`o` the plan's outcome, `req` its Request, `evaluate(shape, gpu, req, sizing) -> Outcome`."""
    if o.verdict == FITS:
        return []
    found: list[Alternative] = []

    def consider(setting: str, old: object, new: object, changed, manual: bool = False, what: str = "") -> None:
        got = evaluate(shape, o.gpu, changed, sizing)
        if got.verdict not in (FITS, TIGHT):
            return
        risk = f"; burst OOM likelihood {got.risk.likelihood}" if got.risk else ""
        found.append(Alternative(setting, old, new, got.verdict, got.capacity, (
            f"{what}{gib(got.figures['budget'].value)} budget - {gib(got.figures['weights_per_gpu'].value)} weights - "
            f"{gib(got.figures['profile_peak'].value)} activations - {gib(got.figures['non_torch'].value)} non-torch"
            f" = {gib(max(got.pool, 0))} KV cache = {got.capacity:,} tokens at {got.kv.per_token:,} bytes a token; "
            f"{count_noun(got.max_num_seqs_supported, 'sequence')} of {int(got.value('max_model_len')):,} at once{risk}"), manual))

    util = float(o.value("gpu_memory_utilization"))
    for target in UTIL_OPTIONS:
        if target != util:
            consider("gpu_memory_utilization", util, target, replace(req, util=target))
    if (req.kv_cache_dtype or "auto") == "auto" and o.kv.element_bytes > 1:
        consider("kv_cache_dtype", "auto", KV_FP8, replace(req, kv_cache_dtype=KV_FP8),
                 what=f"KV cache in 1 byte instead of {o.kv.element_bytes:g}: ")
    for tp in TP_OPTIONS:
        if tp > req.tp and valid_tp(shape, tp):
            consider("tensor_parallel_size", req.tp, tp, replace(req, tp=tp), what=f"{tp} GPUs: ")
    if 0 < o.pool < o.one_seq and o.longest >= o.kv.block:
        consider("max_model_len", int(o.value("max_model_len")), o.longest, replace(req, max_model_len=o.longest))
    if shape.quant is None and not req.quantization:
        for name, size in QUANT_OPTIONS:
            consider("checkpoint", shape.name, f"{name} checkpoint of it",
                     replace(req, quantization="fp8" if size >= 1 else "awq"), manual=True,
                     what=f"weights at {size:g} byte{'' if size == 1 else 's'} per parameter: ")
    # Within a lever: fits before tight, then the fewest GPUs (tensor parallelism), the most faithful
    # checkpoint (QUANT_OPTIONS' order, kept by the stable sort) or the largest KV cache (the rest).
    found.sort(key=lambda a: (_COST.get(a.setting, 9), a.verdict != FITS,
                              a.to_value if a.setting == "tensor_parallel_size" else
                              0 if a.setting == "checkpoint" else -a.kv_tokens))
    best: dict[object, Alternative] = {}
    for a in found:                     # one per lever (every checkpoint kind): its best value
        best.setdefault(a.to_value if a.setting == "checkpoint" else a.setting, a)
    return list(best.values())
