"""Bytes per parameter and per KV-cache element, by dtype and quantisation.

flowchart.md: "AWQ/GPTQ int4 ~ 1/4 of fp16 weight size; FP8 ~ 1/2". The group-wise 4-bit
formats also keep a 16-bit scale (and a 4-bit zero point) per group of 128 weights.
"""
from __future__ import annotations

import re

#: Bytes per element of an unquantised dtype, by the names engines and configs use.
DTYPE_BYTES = (("float32", 4.0), ("fp32", 4.0), ("bfloat16", 2.0), ("float16", 2.0), ("half", 2.0),
               ("bf16", 2.0), ("fp16", 2.0))
#: Bytes per weight of a quantised linear layer, by a word of the quantisation's name.
QUANT_BYTES = (("fp8", 1.0), ("int8", 1.0), ("w8a8", 1.0), ("8bit", 1.0), ("awq", 0.5), ("gptq", 0.5),
               ("int4", 0.5), ("w4a16", 0.5), ("4bit", 0.5), ("bitsandbytes", 0.5), ("bnb", 0.5), ("marlin", 0.5))
#: Quantised checkpoints worth suggesting, most faithful first.
QUANT_OPTIONS = (("FP8", 1.0), ("int4 (AWQ or GPTQ)", 0.5))
#: A 4-bit group of 128 weights also stores a 16-bit scale and a 4-bit zero point.
GROUP_SIZE = 128
GROUP_OVERHEAD = (2.0 + 0.5) / GROUP_SIZE
#: KV-cache dtypes (vLLM --kv-cache-dtype, SGLang --kv-cache-dtype); "auto" is the model's dtype.
KV_DTYPE_BYTES = (("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0), ("fp8_inc", 1.0), ("fp8_ds_mla", 1.0), ("fp8", 1.0),
                  ("int8", 1.0), *DTYPE_BYTES)


def dtype_bytes(name: str | None) -> float | None:
    """`bfloat16`, `torch.float16`, `half` -> bytes per element; None for `auto` or an unknown name."""
    key = str(name or "").lower().replace("torch.", "").strip()
    return next((size for word, size in DTYPE_BYTES if key == word), None)


def quant_bytes(name: str | None) -> float | None:
    """Bytes per weight of a quantisation method (`awq_marlin`, `fp8`, `gptq`); None when unknown."""
    key = str(name or "").lower()
    return next((size for word, size in QUANT_BYTES if word in key), None)


def quant_in_name(model: str | None) -> tuple[str, float] | None:
    """A quantisation named as a word of the model name (`...-AWQ`, `...-FP8`): (word, bytes)."""
    text = str(model or "").lower()
    for word, size in QUANT_BYTES:
        if re.search(rf"(?:^|[-_/.]){re.escape(word)}(?:$|[-_/.])", text):
            return word, size
    return None


def kv_dtype_bytes(name: str | None, model_dtype_bytes: float) -> float | None:
    """Bytes per KV element for --kv-cache-dtype (`auto`: the model's dtype); None when unknown."""
    key = str(name or "auto").lower().replace("torch.", "").strip()
    if key in ("auto", ""):
        return model_dtype_bytes
    return next((size for word, size in KV_DTYPE_BYTES if key == word), None)


def weight_bytes(size: float) -> float:
    """Bytes a quantised weight takes with its group scales (4-bit: 0.5 + 2.5/128)."""
    return size + GROUP_OVERHEAD if size < 1 else size
