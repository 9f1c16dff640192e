"""The weights a model puts on each GPU: parameters counted from its config, in the precision it
is served at, sharded over tensor- and pipeline-parallel GPUs; or the checkpoint's own size from
model.safetensors.index.json when that is what will be loaded.

Quantisation packs the decoder's linear layers (attention projections, MLPs and experts); the
embeddings, the LM head, the norms and a vision encoder stay in the serving dtype, as vLLM loads
the common AWQ, GPTQ, FP8 and compressed-tensors checkpoints. The engine also keeps a rotary
cos/sin table of max_position_embeddings x rotary dimension in that dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import ModelShape


@dataclass(frozen=True)
class Params:
    embed: int
    lm_head: int
    linear: tuple[int, ...]          # per decoder layer: weights a quantisation packs
    small: tuple[int, ...]           # per decoder layer: norms, biases, router (kept in the dtype)
    final_norm: int
    vision: int
    replicated: tuple[int, ...] = ()  # per decoder layer: the part of `linear` every tensor-parallel GPU holds whole

    @property
    def total(self) -> int:
        return self.embed + self.lm_head + sum(self.linear) + sum(self.small) + self.final_norm + self.vision


@dataclass(frozen=True)
class Weights:
    per_gpu: int                     # bytes on the busiest GPU
    total: int                       # bytes over all GPUs
    params: int
    computed: bool                   # False when a part of it rests on an estimate (a vision encoder)
    basis: str


def count(shape: ModelShape) -> Params:
    h = shape.hidden
    linear, small, replicated = [], [], []
    for i in range(shape.layers):
        kind = shape.layer_kinds[i] if shape.layer_kinds else "full"
        attn, attn_small = _attention(shape) if kind in ("full", "sliding", "chunked") else _linear_mixer(shape)
        mlp, mlp_small = _mlp(shape, i)
        linear.append(attn + mlp)
        small.append(attn_small + mlp_small + shape.norms_per_layer * h)
        replicated.append(_replicated_attention(shape) if kind in ("full", "sliding", "chunked") else 0)
    embed = shape.vocab * h
    return Params(embed, 0 if shape.tied else embed, tuple(linear), tuple(small), h,
                  shape.vision.params if shape.vision else 0, tuple(replicated))


def _replicated_attention(s: ModelShape) -> int:
    """MLA's down-projections to the latent (q_a_proj, kv_a_proj_with_mqa) are replicated, not split,
    over tensor-parallel GPUs: vllm/model_executor/models/deepseek_v2.py (ReplicatedLinear in 0.5-0.8;
    fused_qkv_a_proj with disable_tp later)."""
    if not s.mla:
        return 0
    m = s.mla
    return s.hidden * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)


def pp_partitions(layers: int, pp: int) -> list[int]:
    """Decoder layers per pipeline stage as vLLM splits them: evenly, the remainder one each to the
    stages before the last, from the second-to-last backwards (the last holds the LM head),
    vllm/distributed/utils.py get_pp_indices (0.6 onwards, unless VLLM_PP_LAYER_PARTITION is set)."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def _attention(s: ModelShape) -> tuple[int, int]:
    h = s.hidden
    if s.mla:
        m = s.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank * s.heads * qk) if m.q_lora_rank else h * s.heads * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * s.heads * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + s.heads * m.v_head_dim * h, (m.q_lora_rank or 0) + m.kv_lora_rank
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    bias = (q + 2 * kv) if s.qkv_bias else 0
    return h * (q + 2 * kv) + q * h, bias + (2 * s.head_dim if s.qk_norm else 0)


def _linear_mixer(s: ModelShape) -> tuple[int, int]:
    """A mamba / linear-attention layer: in and out projections of about 2 x expand x hidden each
    way (an estimate; their exact split varies by architecture)."""
    inner = 2 * s.hidden
    return s.hidden * 2 * inner + inner * s.hidden, inner


def _mlp(s: ModelShape, i: int) -> tuple[int, int]:
    h = s.hidden
    proj = 3 if s.gated_mlp else 2
    moe = s.moe
    if moe is None or i in moe.dense_layers:
        return proj * h * s.intermediate, 0 if s.gated_mlp else s.intermediate + h
    experts = moe.experts * proj * h * moe.intermediate
    shared = proj * h * moe.shared_intermediate
    return experts + shared, h * moe.experts + (h if moe.shared_intermediate else 0)


def weights(shape: ModelShape, *, dtype_bytes: float, quant_bytes: float | None, quant_text: str | None,
            tp: int = 1, pp: int = 1, use_index: bool = True) -> Weights:
    """The weights per GPU (the busiest pipeline stage) and over all GPUs.

    `quant_bytes`: bytes per packed linear weight (None: unquantised, every parameter at
    `dtype_bytes`). `use_index`: take the checkpoint's size from its safetensors index when there
    is one (what the engine loads), scaled to `dtype_bytes` for an unquantised checkpoint."""
    p = count(shape)
    qb = quant_bytes if quant_bytes is not None else dtype_bytes
    layer = [lin * qb + sm * dtype_bytes for lin, sm in zip(p.linear, p.small)]
    head = (p.lm_head or (p.embed if pp > 1 else 0)) * dtype_bytes + p.final_norm * dtype_bytes
    first = (p.embed + p.vision) * dtype_bytes
    rotary = (shape.max_position or 0) * shape.rotary_dim * dtype_bytes * shape.rotary_tables
    total = sum(layer) + first + (p.lm_head * dtype_bytes + p.final_norm * dtype_bytes)
    rep = [r * qb for r in (p.replicated or (0,) * len(layer))]
    per_gpu, start = [], 0
    stages = pp_partitions(shape.layers, pp) if pp > 1 else [shape.layers]
    for n, size in enumerate(stages):
        stage = sum(layer[start:start + size]) + (first if n == 0 else 0) + (head if n == len(stages) - 1 else 0)
        if pp == 1:
            stage = total
        whole = sum(rep[start:start + size])          # on every tensor-parallel GPU of the stage
        per_gpu.append((stage - whole) / tp + whole)
        start += size
    busiest_gpu = max(per_gpu) if per_gpu else 0.0
    per_stage = stages[per_gpu.index(busiest_gpu)] if per_gpu else 0
    precision = f"{quant_text} for the linear layers, {dtype_bytes:g} bytes for the rest" if quant_bytes is not None \
        else f"{dtype_bytes:g} bytes per parameter"
    basis = f"{p.total / 1e9:.2f}B parameters from config.json ({_split(p)}) x {precision}"
    if use_index and shape.index_bytes:
        scale = 1.0
        if quant_bytes is None and shape.quant is None:
            scale = dtype_bytes / shape.dtype_bytes
        share = busiest_gpu / total if total else 1.0
        total = shape.index_bytes * scale
        busiest_gpu = total * share
        basis = (f"{shape.index_bytes:,} bytes in {shape.index_source}"
                 + (f" x {dtype_bytes:g}/{shape.dtype_bytes:g} bytes per parameter" if scale != 1 else "")
                 + f" ({p.total / 1e9:.2f}B parameters counted from config.json)")
    parts = []
    if pp > 1:
        parts.append(f"the busiest of {pp} pipeline stages ({per_stage} layers, split as vLLM does: "
                     f"{', '.join(map(str, pp_partitions(shape.layers, pp)))})")
    if tp > 1:
        parts.append(f"/ {tp} tensor-parallel GPUs" + (" (MLA's latent down-projections whole on each)"
                                                        if any(p.replicated) else ""))
    if rotary:
        parts.append(f"+ the rotary cos/sin table{'s' if shape.rotary_tables > 1 else ''} ({shape.max_position:,} "
                     f"positions x {shape.rotary_dim}{f' x {shape.rotary_tables}' if shape.rotary_tables > 1 else ''})")
    if parts:
        basis += "; " + ", ".join(parts)
    return Weights(int(busiest_gpu + rotary), int(total + rotary * tp * pp), p.total,
                   computed=shape.vision is None, basis=basis)


def _split(p: Params) -> str:
    out = [f"{sum(p.linear) / 1e9:.2f}B in {len(p.linear)} layers", f"{(p.embed + p.lm_head) / 1e9:.2f}B "
           f"{'tied embeddings' if not p.lm_head else 'embeddings and LM head'}"]
    if p.vision:
        out.append(f"{p.vision / 1e9:.2f}B vision encoder (estimated)")
    return ", ".join(out)
