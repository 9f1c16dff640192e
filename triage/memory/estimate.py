"""What a start-up takes beside the weights and the KV cache: estimates, each with its basis.

An engine sizes its KV cache from a profiling run: vLLM runs one forward pass of
max_num_batched_tokens tokens and samples max_num_seqs sequences, and keeps what the peak left of
`gpu_memory_utilization x total` for the KV cache. The peak is estimated from the largest tensors
alive at once: the MLP's gate/up output and activation output (for a mixture of experts, the
fused kernel's buffers of top_k rows per token), the residual stream and the hidden states, plus
the sampler's fp32 logits and probabilities over the vocabulary. A vision encoder is profiled
with the largest image its processor accepts; its output stays while the decoder runs.

The constants below were set against the start-up logs in tests/corpus and samples/ (their
"Memory profiling", "Available KV cache memory", "# GPU blocks" and "Graph capturing finished"
lines); tests/test_plan.py checks the arithmetic lands within 10% of what each engine reported.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..units import count_noun
from .config import ModelShape

GiB = 1 << 30
MiB = 1 << 20

#: fp32 logits and fp32 probabilities per vocabulary entry and sampled sequence.
SAMPLER_BYTES_PER_LOGIT = 8
#: Memory outside torch's count that the profile charges to the budget, one GPU: V0 measures the whole
#: process (its "non_torch_memory=0.35GiB" of tests/corpus/startup-a-001.yaml); V1 start-ups in samples/ leave
#: 0.6-0.9 GiB besides the weights and the activations.
NON_TORCH_V0 = int(0.35 * GiB)
NON_TORCH_V1 = int(0.75 * GiB)
#: NCCL communicators and custom all-reduce buffers when the model spans GPUs (TP 2 start-ups: 1.0-1.3 GiB in all).
NON_TORCH_MULTI_GPU = int(0.65 * GiB)
#: A new process's CUDA context, before the engine measures free memory (samples/startup-other-tenant: 79.19 GiB
#: less 47.20 GiB of another process left 31.44 GiB free).
CUDA_CONTEXT = int(0.55 * GiB)
#: NCCL communicators and custom all-reduce buffers created before the profile's snapshot (vLLM >= 0.11): outside the
#: budget. An estimate (the engines print no figure for it); NCCL_BUFFSIZE is 4 MiB a channel and peer.
NCCL_SETUP = int(0.4 * GiB)
#: CUDA graphs captured for up to 512 sequences: vLLM logged 0.39-1.12 GiB for 28-80 decoder layers.
GRAPH_BYTES_PER_LAYER = 14 * MiB


@dataclass(frozen=True)
class Estimate:
    bytes: int
    basis: str


def forward_peak(shape: ModelShape, tokens: int, tp: int, act_bytes: float) -> Estimate:
    """The largest activations of one forward pass of `tokens` tokens on one GPU."""
    h = shape.hidden
    width, what = _mlp_width(shape, tp)
    attn = _attention_width(shape, tp)
    if attn > width:
        width, what = attn, "attention projections"
    total = int(tokens * (width + 2 * h) * act_bytes)
    return Estimate(total, f"{tokens:,} tokens x ({what} = {width:,} + residual and hidden states 2 x {h:,}) x "
                           f"{act_bytes:g} bytes")


def _mlp_width(s: ModelShape, tp: int) -> tuple[int, str]:
    dense = (3 if s.gated_mlp else 2) * s.intermediate // tp
    split = f"/{tp}" if tp > 1 else ""
    best = (dense, f"MLP {3 if s.gated_mlp else 2} x {s.intermediate:,}{split}")
    if s.moe and len(s.moe.dense_layers) < s.layers:
        m = s.moe
        fused = m.top_k * (3 * m.intermediate // tp + s.hidden) + 3 * m.shared_intermediate // tp
        if fused > best[0]:
            best = (fused, f"experts {m.top_k} x (3 x {m.intermediate:,}{split} + {s.hidden:,})")
    return best


def _attention_width(s: ModelShape, tp: int) -> int:
    if s.mla:
        m = s.mla
        return s.heads // tp * (2 * m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) \
            + m.kv_lora_rank + m.qk_rope_head_dim
    return (2 * max(1, s.heads // tp) + 2 * max(1, s.kv_heads // tp)) * s.head_dim     # q, k, v and the output


def sampler_peak(shape: ModelShape, seqs: int) -> Estimate:
    total = seqs * shape.vocab * SAMPLER_BYTES_PER_LOGIT
    return Estimate(total, f"{count_noun(seqs, 'sequence')} x {shape.vocab:,} vocabulary x {SAMPLER_BYTES_PER_LOGIT} bytes "
                           "(fp32 logits and probabilities)")


def encoder_peak(shape: ModelShape, tp: int, act_bytes: float) -> tuple[Estimate, Estimate] | None:
    """The vision encoder's activations for the largest image, and the image's embeddings that stay
    while the decoder runs; None without a vision encoder."""
    v = shape.vision
    if v is None:
        return None
    width = (3 if v.gated else 2) * v.intermediate // tp + 2 * v.hidden
    run = int(v.patches_per_item * width * act_bytes)
    kept = int(v.tokens_per_item * shape.hidden * act_bytes)
    return (Estimate(run, f"{v.patches_per_item:,} patches x {width:,} x {act_bytes:g} bytes ({v.basis})"),
            Estimate(kept, f"{v.tokens_per_item:,} image tokens x {shape.hidden:,} x {act_bytes:g} bytes"))


def profile_peak(shape: ModelShape, tokens: int, seqs: int, tp: int, act_bytes: float) -> Estimate:
    """The profiling run's peak above the weights: forward pass plus sampler, or the vision
    encoder's run when that is larger, plus the image embeddings kept for the decoder."""
    fwd, smp = forward_peak(shape, tokens, tp, act_bytes), sampler_peak(shape, seqs)
    decoder = fwd.bytes + smp.bytes
    basis = f"forward pass {fwd.basis}; sampler {smp.basis}"
    enc = encoder_peak(shape, tp, act_bytes)
    if enc is None:
        return Estimate(decoder, basis)
    run, kept = enc
    peak = max(decoder, run.bytes) + kept.bytes
    return Estimate(peak, f"the larger of the decoder ({basis}) and the vision encoder ({run.basis}), plus "
                          f"{kept.basis}")


def non_torch(gpus: int, basis: str = "dist", v1: bool = True) -> Estimate:
    """What the profile charges to the budget outside torch, by what the engine version measures
    (triage/data/vllm_releases.yaml `non_torch`): `device` every byte outside torch on the device,
    `context` the increase since a snapshot after the CUDA context (NCCL setup included), `dist`
    the increase since a snapshot after distributed init (workspaces and NCCL's lazy buffers)."""
    base = NON_TORCH_V1 if v1 else NON_TORCH_V0
    seen = "V1 start-ups: 0.6-0.9 GiB" if v1 else "V0's own profile: 0.35 GiB"
    what = (f"CUDA context and workspaces {base / GiB:.2f} GiB ({seen})"
            if basis == "device" else f"workspaces the profile adds {base / GiB:.2f} GiB (V1 start-ups: 0.6-0.9 GiB)")
    if gpus > 1:
        return Estimate(base + NON_TORCH_MULTI_GPU,
                        f"{what} + NCCL and all-reduce buffers {NON_TORCH_MULTI_GPU / GiB:.2f} GiB")
    return Estimate(base, what)


def outside_budget(gpus: int, basis: str) -> Estimate:
    """Memory the server holds that the profile does not charge to the budget: the CUDA context
    where the snapshot is taken after it, and NCCL's communicators where it is taken after
    distributed init. It sits in what gpu_memory_utilization leaves of the card."""
    parts, total = [], 0
    if basis in ("context", "dist"):
        total += CUDA_CONTEXT
        parts.append(f"CUDA context {CUDA_CONTEXT / GiB:.2f} GiB")
    if basis == "dist" and gpus > 1:
        total += NCCL_SETUP
        parts.append(f"NCCL communicators and all-reduce setup {NCCL_SETUP / GiB:.2f} GiB")
    return Estimate(total, " + ".join(parts) if parts else "none: this version charges the whole device to the budget")


def cuda_graphs(shape: ModelShape, pp: int) -> Estimate:
    layers = math.ceil(shape.layers / pp)
    return Estimate(layers * GRAPH_BYTES_PER_LAYER,
                    f"{layers} decoder layers x {GRAPH_BYTES_PER_LAYER // MiB} MiB (graph pools vLLM logged for "
                    "28-80-layer models: 0.39-1.12 GiB)")
