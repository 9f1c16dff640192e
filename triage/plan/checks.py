"""Start-up refusals of the engine that no amount of memory changes: vLLM's configuration checks,
reproduced with the engine's own words and where they are in its source
(triage/data/vllm_releases.yaml `checks`)."""
from __future__ import annotations

from ..memory.config import ModelShape
from .releases import checks


def valid_tp(shape: ModelShape, tp: int) -> bool:
    """Whether vLLM accepts `tp` tensor-parallel GPUs for this model's heads."""
    return _heads(shape, tp) is None and _kv_heads(shape, tp) is None


def _heads(shape: ModelShape, tp: int) -> str | None:
    if shape.heads % tp:
        c = checks()["heads_tp"]
        return f"vLLM refuses it: \"{c.message.format(heads=shape.heads, tp=tp)}\" ({c.source})"
    return None


def _kv_heads(shape: ModelShape, tp: int) -> str | None:
    if shape.mla or shape.kv_heads == shape.heads:
        return None                 # one K/V head per query head: the heads check decides
    kv = shape.kv_heads
    bad = (tp % kv) if tp >= kv else (kv % tp)
    if bad:
        a, b = (tp, kv) if tp >= kv else (kv, tp)
        c = checks()["kv_heads_tp"]
        return (f"vLLM refuses it: {shape.kv_heads} KV heads cannot be split or replicated evenly over {tp} GPUs "
                f"(\"{c.message.format(a=a, b=b)}\", {c.source})")
    return None


def refusals(shape: ModelShape, tp: int, length: int, allow_long: bool) -> list[str]:
    """Why vLLM refuses these flags at start-up, whatever the GPU (empty: it does not)."""
    out = [r for r in (_heads(shape, tp), _kv_heads(shape, tp)) if r]
    derived = shape.derived_max_len
    if derived and length > derived and not allow_long:
        c = checks()["max_len"]
        key, _, value = shape.derived_max_key.partition("=")
        out.append(f"max_model_len {length:,} is above what the model's config.json allows "
                   f"({shape.derived_max_key}): vLLM refuses it: \"{c.message.format(length=length, key=key, derived=derived)}\" "
                   f"({c.source})")
    return out


def nearest_valid_tp(shape: ModelShape, tp: int, most: int = 8) -> list[int]:
    """The tensor-parallel sizes up to `most` that vLLM accepts, nearest to `tp` first."""
    ok = [n for n in range(1, max(most, tp) + 1) if valid_tp(shape, n)]
    return sorted(ok, key=lambda n: (abs(n - tp), n))
