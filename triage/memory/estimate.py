"""What a start-up takes beside the weights and the KV cache: estimates, each with its basis.

An engine sizes its KV cache from a profiling run: vLLM runs one forward pass of
max_num_batched_tokens tokens, then samples one token for each of up to max_num_seqs rows, and keeps
what the peak left of `gpu_memory_utilization x total` for the KV cache. The forward pass's peak is
estimated from the largest tensors alive at once: the MLP's gate/up output and activation output (for
a mixture of experts, the fused kernel's buffers of top_k rows per token), the residual stream and the
hidden states. Its activations are freed before the sampler runs (only the hidden states stay), so
the profile's peak is the larger of the two, not their sum. The sampler's share is measured, not
fitted: benchmarks/measure_sampler_peak.py replays each release's sampler on a real GPU
(tests/real_gpu/h200/sampler/). A vision encoder is profiled with the largest image its processor
accepts; its output stays while the decoder runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..units import count_noun
from .config import ModelShape

GiB = 1 << 30
MiB = 1 << 20

#: Bytes a logit takes at the sampler's peak in the profiling run, by how the release filters top-k / top-p
#: (triage/data/vllm_releases.yaml `sampler`). Measured with torch 2.11 on an H200, 5 shapes from 256 x 32,000
#: to 1,024 x 151,936 logits, all within 0.3 of these (tests/real_gpu/h200/sampler/sampler_peak.jsonl):
#: - sort: the model's 16-bit logits (2) and their fp32 copy (4), the sort's values and int64 indices (12) and
#:   its working copies (20): 38;
#: - nosort (FlashInfer's sampler, or the Triton top-k/top-p that masks in place): 2 + 4, the probabilities (4)
#:   and the exponential draw (4): 14.
SAMPLER_BYTES_PER_LOGIT = {"sort": 38, "nosort": 14}
SAMPLER_BASIS = {"sort": "a full sort of the fp32 logits", "nosort": "top-k / top-p masked in place, no sort"}
#: Memory outside torch's count that the profile charges to the budget, one GPU.
#: `device` (the whole device outside torch, CUDA context included): V0's "non_torch_memory=0.35GiB" of
#: tests/corpus/startup-a-001.yaml.
NON_TORCH_DEVICE = int(0.35 * GiB)
#: `context` / `dist` (a snapshot after the CUDA context): the kernels and library workspaces the first
#: matrix products load; a CUDA context then one bf16 matmul on an H200 with torch 2.11 left 67 MiB outside
#: torch (tests/real_gpu/h200/sampler/context.json); V1 start-ups print 0.02-0.07 GiB "for non-torch memory".
NON_TORCH_WORKSPACES = int(0.07 * GiB)
#: What spanning GPUs adds outside torch, from the sources (replaces a flat 0.65 GiB fitted to TP 2 start-ups):
#: - NCCL's buffers per connection, one per protocol (NCCL 2.21.5, the version torch 2.5.1 / 2.6.0 pin for vLLM
#:   0.6.5 / 0.8.5; src/init.cc): DEFAULT_BUFFSIZE 1 << 22 (Simple, 4 MiB) + DEFAULT_LL_BUFFSIZE
#:   NCCL_LL_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 512 x NCCL_STEPS 8 x 16-byte ncclLLFifoLine (512 KiB) +
#:   DEFAULT_LL128_BUFFSIZE NCCL_LL128_ELEMS_PER_THREAD 120 x NCCL_LL128_MAX_NTHREADS 640 x NCCL_STEPS 8 x 8 bytes.
NCCL_BYTES_PER_CONNECTION = (1 << 22) + 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8
#: Connections a GPU receives on, per channel, for all-reduce: the ring's and the tree's up and down links.
NCCL_CONNECTIONS_PER_CHANNEL = 3
#: Channels: 2, what NCCL's topology search gives PCIe-connected cards. NVLink systems get more (up to MAXCHANNELS
#: 32 in 2.21): the term is a lower bound there; the plan does not know the interconnect.
NCCL_CHANNELS = 2
NCCL_PER_COMMUNICATOR = NCCL_CHANNELS * NCCL_CONNECTIONS_PER_CHANNEL * NCCL_BYTES_PER_CONNECTION
#: vllm/distributed/device_communicators/custom_all_reduce.py CustomAllreduce.__init__ (0.6.5 and 0.8.5): max_size
#: 8192 * 1024; meta_ptrs = create_shared_buffer(meta_size() + max_size) and buffer_ptrs = create_shared_buffer(max_size),
#: both cudaMalloc'd by ops.allocate_shared_buffer_and_handle (outside torch; meta_size() is a few KiB, left out);
#: rank_data (8 MiB) is a torch tensor. Only for a TP group of 2, 4, 6 or 8 GPUs (_SUPPORTED_WORLD_SIZES), and past 2
#: only when NVLink connects them all: counted whenever the size is supported (16 MiB at most).
CUSTOM_AR_MAX_SIZE = 8192 * 1024
CUSTOM_AR_NON_TORCH = 2 * CUSTOM_AR_MAX_SIZE
CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)
#: A new process's CUDA context, before the engine measures free memory (samples/startup-other-tenant: 79.19 GiB
#: less 47.20 GiB of another process left 31.44 GiB free).
CUDA_CONTEXT = int(0.55 * GiB)
#: NCCL communicators and custom all-reduce buffers created before the profile's snapshot (vLLM >= 0.11): outside the
#: budget. An estimate (the engines print no figure for it); NCCL_BUFFSIZE is 4 MiB a channel and peer.
NCCL_SETUP = int(0.4 * GiB)
#: What a Qwen-VL encoder block's attention holds at its peak, per patch, in multiples of the tower's width (16-bit
#: elements): (kept whatever the tensor-parallel size, split across ranks), by how the release rotates q and k
#: (vllm_releases.yaml `vision_rotary`). Always: the block input (1) and the qkv output, all-gathered across ranks and
#: referenced until the block returns (3). Then per rank:
#: - fp32 (vllm/model_executor/models/qwen2_vl.py:351-372, apply_rotary_pos_emb_vision :275-284, 0.10.2): q, k, v
#:   made contiguous (3), then q and k one at a time through an fp32 copy (2) and an fp32 result (2) before the cast
#:   back (1): 8;
#: - fp32-concat (qwen2_5_vl.py:343-356, 0.11.0; Qwen2-VL keeps the fp32 way): q, k, v (3), q and k concatenated (2),
#:   its fp32 copy (4), the fp32 result (4) and the cast (2): 15;
#: - native (ApplyRotaryEmb in the activation dtype, qwen2_vl.py:325-380, 0.15.0-0.33.0): the concatenated q and k
#:   (2) and the rotated result (2): 4.
ROTARY_ATTENTION = {"fp32": (4, 8), "fp32-concat": (4, 15), "native": (4, 4)}
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


def sampler_peak(shape: ModelShape, seqs: int, path: str = "nosort") -> Estimate:
    per = SAMPLER_BYTES_PER_LOGIT[path]
    total = seqs * shape.vocab * per
    return Estimate(total, f"{count_noun(seqs, 'sequence')} x {shape.vocab:,} vocabulary x {per} bytes "
                           f"({SAMPLER_BASIS[path]})")


def encoder_peak(shape: ModelShape, tp: int, act_bytes: float,
                 rotary: str = "native") -> tuple[Estimate, Estimate] | None:
    """The vision encoder's activations for the largest image, and the image's embeddings that stay
    while the decoder runs; None without a vision encoder. `rotary`: how the release rotates a Qwen-VL
    tower's q and k (ROTARY_ATTENTION)."""
    v = shape.vision
    if v is None:
        return None
    width = (3 if v.gated else 2) * v.intermediate // tp + 2 * v.hidden
    what = f"MLP {width:,}"
    if v.rotary:
        mode = "fp32" if rotary == "fp32-concat" and not v.concat_qk else rotary
        fixed, per_rank = ROTARY_ATTENTION[mode]
        attention = fixed * v.hidden + per_rank * v.hidden // tp
        if attention > width:
            width, what = attention, (f"attention {fixed} x {v.hidden:,} + {per_rank} x {v.hidden:,}"
                                      f"{f'/{tp}' if tp > 1 else ''}, q and k rotated {mode}")
    pixels = v.patches_per_item * v.pixel_bytes_per_patch
    run = int(v.patches_per_item * width * act_bytes) + pixels
    kept = int(v.tokens_per_item * shape.hidden * act_bytes)
    held = f" + the fp32 pixels {v.pixel_bytes_per_patch:,} bytes a patch" if pixels else ""
    return (Estimate(run, f"{v.patches_per_item:,} patches x ({what}) x {act_bytes:g} bytes{held} ({v.basis})"),
            Estimate(kept, f"{v.tokens_per_item:,} image tokens x {shape.hidden:,} x {act_bytes:g} bytes"))


def profile_peak(shape: ModelShape, tokens: int, seqs: int, tp: int, act_bytes: float,
                 sampler: str = "nosort", rotary: str = "native") -> Estimate:
    """The profiling run's peak above the weights: the larger of the forward pass and the sampler
    (beside the hidden states the forward pass leaves), or the vision encoder's run when that is
    larger, plus the image embeddings kept for the decoder."""
    fwd, smp = forward_peak(shape, tokens, tp, act_bytes), sampler_peak(shape, seqs, sampler)
    kept = int(tokens * shape.hidden * act_bytes)
    decoder = max(fwd.bytes, kept + smp.bytes)
    larger = "forward pass" if fwd.bytes >= kept + smp.bytes else "sampler"
    basis = (f"the larger ({larger}) of the forward pass {fwd.basis} and the sampler {smp.basis} beside the "
             f"{tokens:,} x {shape.hidden:,} hidden states")
    enc = encoder_peak(shape, tp, act_bytes, rotary)
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
    if basis == "device":
        base = NON_TORCH_DEVICE
        what = f"CUDA context and workspaces {base / GiB:.2f} GiB (a V0 start-up's own profile)"
    else:
        base = NON_TORCH_WORKSPACES
        what = (f"kernels and workspaces the profile loads {base / GiB:.2f} GiB (measured on an H200; start-ups "
                "print 0.02-0.07 GiB)")
    if gpus > 1:
        multi = multi_gpu_non_torch(gpus, basis, v1)
        return Estimate(base + multi.bytes, f"{what} + {multi.basis}")
    return Estimate(base, what)


def multi_gpu_non_torch(gpus: int, basis: str = "dist", v1: bool = True) -> Estimate:
    """What a model spanning `gpus` GPUs adds to the profile's non-torch count, from vLLM's and NCCL's
    sources. NCCL communicators: vLLM's own (pynccl) for the tensor-parallel group, made in
    parallel_state.init_model_parallel_group and warmed up by one all_reduce in
    PyNcclCommunicator.__init__ (the world group has none in 0.8.5; pipeline stages get their own,
    not told apart here: plan.py passes tp x pp); V0 adds torch's ProcessGroupNCCL of the group,
    created at the driver's first broadcast_tensor_dict of CUDA inputs (parallel_state.py,
    0.6.5), i.e. in the profile run. NCCL 2.21 (torch 2.5.1 / 2.6.0) connects every channel at
    init, so the buffers are there after distributed init: counted by `device` and `context`;
    under `dist` (vLLM >= 0.11) the snapshot follows init, and only the buffers NCCL >= 2.22 connects
    at first use (NCCL_RUNTIME_CONNECT) land in the profile. The custom all-reduce buffers are
    made in distributed init too: counted by `device` and `context`, not by `dist`."""
    comms = 1 if v1 else 2
    nccl = comms * NCCL_PER_COMMUNICATOR
    parts = [f"NCCL {comms} communicator{'s' if comms > 1 else ''} x {NCCL_CHANNELS} channels x "
             f"{NCCL_CONNECTIONS_PER_CHANNEL} connections x {NCCL_BYTES_PER_CONNECTION / MiB:.2f} MiB "
             f"(Simple 4 + LL 0.5 + LL128 4.69 MiB; NCCL 2.21 src/init.cc; more channels on NVLink: a lower bound)"
             + (", one vLLM's and one torch's" if comms > 1 else "")]
    total = nccl
    if basis != "dist" and gpus in CUSTOM_AR_WORLD_SIZES:
        total += CUSTOM_AR_NON_TORCH
        parts.append(f"custom all-reduce buffers 2 x {CUSTOM_AR_MAX_SIZE // MiB} MiB (custom_all_reduce.py "
                     "CustomAllreduce.__init__ max_size)")
    return Estimate(total, " + ".join(parts) + f" = {total / GiB:.2f} GiB")


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
