"""KV-cache bytes per token, per block and per sequence, on one GPU.

flowchart.md: KV bytes per token = 2 (K and V) x layers x KV heads x head dim x dtype bytes
(Llama 3.1 70B, fp16: 327,680). On one GPU of a tensor-parallel group the KV heads are split
(never below one head: vLLM replicates them when there are more GPUs than heads); a pipeline
stage holds its share of the layers. Multi-head latent attention (DeepSeek-V2/V3) caches one
compressed vector of kv_lora_rank + qk_rope_head_dim per token and layer, the same on every
tensor-parallel GPU. A sliding-window (or chunked) layer keeps at most its window of a sequence;
a linear-attention or mamba layer keeps a fixed state per sequence instead of per token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .config import ModelShape

DEFAULT_BLOCK = 16


@dataclass(frozen=True)
class KvLayout:
    """One GPU's KV cache for a model: what each token and each sequence costs."""

    full: int                 # bytes per token of the layers that keep every token
    windowed: int             # bytes per token of the layers that keep at most `window` tokens
    window: int | None
    state: int                # bytes per sequence of linear / mamba layers
    block: int                # tokens per block (page)
    layers: int               # attention layers on this GPU
    heads: int                # KV heads per GPU (0 for MLA)
    element_bytes: float
    formula: str

    @property
    def per_token(self) -> int:
        """Bytes per token while a sequence is shorter than the window (every layer keeps it)."""
        return self.full + self.windowed

    @property
    def per_block(self) -> int:
        return self.per_token * self.block

    def sequence(self, tokens: int) -> int:
        """Bytes one sequence of `tokens` holds, in whole blocks."""
        blocks = math.ceil(tokens / self.block)
        kept = blocks if self.window is None else min(blocks, math.ceil(self.window / self.block) + 1)
        return blocks * self.block * self.full + kept * self.block * self.windowed + self.state

    def longest(self, pool: int, cap: int | None = None) -> int:
        """The longest sequence (in whole blocks) that fits `pool` bytes, as vLLM estimates its
        maximum model length; at most `cap`."""
        if pool < self.sequence(self.block):
            return 0
        lo, hi = self.block, (cap or 1 << 24)
        hi = max(lo, hi - hi % self.block)
        if self.sequence(hi) <= pool:
            return hi
        while hi - lo > self.block:
            mid = (lo + hi) // 2 // self.block * self.block
            lo, hi = (mid, hi) if self.sequence(mid) <= pool else (lo, mid)
        return lo

    def tokens(self, pool: int, length: int) -> int:
        """The pool in tokens, as the engine counts it for sequences of `length` tokens (every
        token of a full-attention model: blocks x block size)."""
        per_seq = self.sequence(length)
        if per_seq <= 0:
            return 0
        if not self.windowed and not self.state:
            return pool // self.per_block * self.block
        return int(pool / per_seq * length)


def layout(shape: ModelShape, element_bytes: float, *, tp: int = 1, pp: int = 1, block: int = DEFAULT_BLOCK,
           windows: bool = True, mla: bool = True, mla_head_size: str | int | None = None) -> KvLayout:
    """The KV cache of `shape` on the busiest GPU. `windows=False`: sliding-window and chunked
    layers are given a full cache (engines without a hybrid KV allocator). `mla=False`: an MLA
    model cached as full K and V for every head (engines before latent-cache support), each head
    `mla_head_size` wide (an int, or "qk": qk_nope_head_dim + qk_rope_head_dim)."""
    kinds = shape.layer_kinds or ("full",) * shape.layers
    stage = math.ceil(len(kinds) / pp)
    if pp > 1:      # stages split the layers evenly: the one with the most full-attention layers is the busiest
        kinds = max((kinds[i:i + stage] for i in range(0, len(kinds), stage)),
                    key=lambda part: (part.count("full"), len(part) - part.count("linear") - part.count("mamba")))
    attn_full = sum(1 for k in kinds if k == "full" or (not windows and k in ("sliding", "chunked")))
    attn_win = sum(1 for k in kinds if windows and k in ("sliding", "chunked"))
    linear = sum(1 for k in kinds if k in ("linear", "mamba"))
    if shape.mla and not mla:
        m = shape.mla
        width = mla_head_size if isinstance(mla_head_size, int) else m.qk_nope_head_dim + m.qk_rope_head_dim
        heads = max(1, shape.heads // tp)
        per_layer = 2 * heads * width * element_bytes
        formula = (f"2 (K and V) x {{layers}} layers x {heads} heads ({shape.heads} / {tp} GPUs) x {width} head size "
                   f"x {element_bytes:g} bytes (MLA model cached as full K and V per head: this engine version has "
                   "no latent cache)")
    elif shape.mla:
        m = shape.mla
        per_layer = (m.kv_lora_rank + m.qk_rope_head_dim) * element_bytes
        heads = 0
        formula = (f"{m.kv_lora_rank} (kv_lora_rank) + {m.qk_rope_head_dim} (qk_rope_head_dim) x {{layers}} layers "
                   f"x {element_bytes:g} bytes (MLA: one latent vector per token and layer, on every GPU)")
    else:
        heads = max(1, shape.kv_heads // tp)
        per_layer = 2 * heads * shape.head_dim * element_bytes
        split = f" ({shape.kv_heads} / {tp} GPUs)" if tp > 1 and shape.kv_heads >= tp else \
            f" ({shape.kv_heads} heads, replicated on {tp} GPUs)" if tp > shape.kv_heads else ""
        formula = (f"2 (K and V) x {{layers}} layers x {heads} KV heads{split} x {shape.head_dim} head dim x "
                   f"{element_bytes:g} bytes")
    full, windowed = int(per_layer * attn_full), int(per_layer * attn_win)
    state = int(linear * shape.linear_state * element_bytes)
    layers = attn_full + attn_win
    text = formula.replace("{layers}", str(layers))
    if pp > 1:
        text += f"; {stage} of {shape.layers} layers per pipeline stage"
    if attn_win:
        text += f"; {attn_win} of them keep at most {shape.window:,} tokens (sliding window)"
    if linear:
        text += f"; {linear} linear-attention/mamba layers keep a fixed state per sequence (estimated)"
    return KvLayout(full, windowed, shape.window if attn_win else None, state, block, layers, heads,
                    element_bytes, text)
