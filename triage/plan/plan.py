"""Will this model, with these flags, start on this GPU, and what does a burst do to it?

Computed from the model's config.json: the weights per GPU, the KV cache per token, per block
and per sequence. Estimated (each with its basis): the profiling run's peak, non-torch memory and
CUDA graphs. The KV cache is what the engine's budget leaves after them; its capacity in tokens,
the concurrency it allows at max_model_len and the burst that fills it follow.

The verdict, first match wins:
  will_fail_at_startup   the start-up checks of the engine refuse it, or an allocation of the
                         start-up itself (weights, graph capture) cannot fit;
  will_fail_under_burst  it starts, but what is left of the card outside the engine's budget
                         cannot take one more activation peak (burst.py: likelihood high);
  tight                  it starts and survives a burst, but a burst of max_num_seqs sequences
                         fills the KV cache before each reaches max_model_len (the engine then
                         preempts: requests stall, nothing crashes), or the KV cache holds one
                         max_model_len sequence only within the estimates' error, or a burst
                         OOM is moderately likely (burst.py);
  fits                   otherwise.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..errors import TriageError
from ..memory import estimate
from ..memory.config import ModelShape
from ..memory.kv import KvLayout, layout
from ..memory.precision import QUANT_OPTIONS, dtype_bytes, kv_dtype_bytes, quant_bytes, weight_bytes
from ..memory.weights import weights as weights_of
from ..model import Recommendation
from ..thresholds import FREE_MARGIN
from ..units import count_noun
from . import burst as burst_model
from .checks import refusals
from .engines import Sizing
from .gpus import Gpu

from .verdicts import FAILS_BURST, FAILS_STARTUP, FITS, GiB, TIGHT, VERDICT_TEXT, gib  # noqa: F401 (re-exported)
#: The share of the estimated parts a fit must clear before it is called more than tight.
ESTIMATE_ERROR = 0.10


@dataclass(frozen=True)
class Request:
    """The flags the plan was asked about; None: the engine's own default."""

    tp: int = 1
    pp: int = 1
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    util: float | None = None
    tenants: int = 0
    enforce_eager: bool = False
    allow_long: bool = False        # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    flashinfer_sampler: bool = False  # the engine samples with FlashInfer (no sort in the profile's sampler)


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    value: float
    unit: str                       # bytes, tokens, blocks, sequences, x
    estimated: bool
    basis: str


@dataclass
class Outcome:
    """The arithmetic for one GPU."""

    gpu: Gpu
    settings: dict[str, tuple[Any, str]]          # value and where it comes from
    figures: dict[str, Figure]
    kv: KvLayout
    pool: int
    headroom: int
    one_seq: int
    capacity: int
    concurrency: float
    longest: int
    verdict: str = FITS
    reasons: list[str] = field(default_factory=list)
    burst: tuple[int, int] | None = None
    free_at_start: int | None = None
    risk: burst_model.Burst | None = None
    refused: list[str] = field(default_factory=list)

    def value(self, name: str) -> Any:
        return self.settings[name][0]

    @property
    def max_num_seqs_supported(self) -> int:
        return int(self.pool // self.one_seq) if self.one_seq and self.pool > 0 else 0


@dataclass
class Plan:
    shape: ModelShape
    request: Request
    sizing: Sizing
    outcome: Outcome
    assumptions: list[str]
    recommendations: list[Recommendation]
    command: str
    rows: list[Outcome]
    smallest_runs: Gpu | None       # starts and survives a burst (fits or tight)
    smallest_fits: Gpu | None
    alternatives: list[Any] = field(default_factory=list)


# --- precision ------------------------------------------------------------------------------------

def precision(shape: ModelShape, req: Request) -> tuple[float, str, float | None, str | None, float, str]:
    """(dtype bytes, its basis, quantised bytes per weight or None, its basis, KV bytes, basis)."""
    if req.dtype and req.dtype != "auto":
        size, why = dtype_bytes(req.dtype) or 2.0, f"{req.dtype} (--dtype)"
    elif shape.dtype and dtype_bytes(shape.dtype) == 4.0:
        size, why = 2.0, f"16-bit (config.json torch_dtype {shape.dtype}: --dtype auto serves float32 checkpoints in 16 bits)"
    elif shape.dtype and dtype_bytes(shape.dtype):
        size, why = shape.dtype_bytes, f"{shape.dtype} (config.json torch_dtype; --dtype auto)"
    else:
        size, why = 2.0, "16-bit (config.json names no torch_dtype: assumed)"
    qsize, qwhy = None, None
    if shape.quant is not None:
        qsize, qwhy = shape.quant.bytes_per_weight, shape.quant.text
    elif req.quantization:
        q = quant_bytes(req.quantization)
        if q is None:
            raise TriageError(f"--quantization {req.quantization!r}: the bytes a weight takes in it are not known "
                              "(known: fp8, int8, awq, gptq, bitsandbytes, marlin, w4a16, w8a8)")
        qsize, qwhy = weight_bytes(q), f"{req.quantization} (--quantization), {weight_bytes(q):g} bytes per weight"
    kv = kv_dtype_bytes(req.kv_cache_dtype, size)
    if kv is None:
        raise TriageError(f"--kv-cache-dtype {req.kv_cache_dtype!r}: not a KV-cache dtype this arithmetic knows "
                          "(auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16, float16)")
    kv_why = f"{req.kv_cache_dtype} (--kv-cache-dtype)" if req.kv_cache_dtype not in (None, "auto") else \
        "the model's dtype (--kv-cache-dtype auto)"
    return size, why, qsize, qwhy, kv, kv_why


# --- one GPU ----------------------------------------------------------------------------------------

def settings_for(shape: ModelShape, gpu: Gpu, req: Request, sizing: Sizing) -> dict[str, tuple[Any, str]]:
    if req.max_model_len:
        length = (req.max_model_len, "--max-model-len")
    elif shape.derived_max_len:
        length = (shape.derived_max_len, f"the engine's default: the model's maximum ({shape.derived_max_key})")
    else:
        raise TriageError(f"{shape.source}: no max_position_embeddings: give --max-model-len")
    defaults = sizing.defaults(gpu.memory, gpu.a100, length[0], req.tp, req.pp, gpu.smi_mib)
    out: dict[str, tuple[Any, str]] = {"max_model_len": length}
    for name, given, flag in (("gpu_memory_utilization", req.util, "--gpu-memory-utilization"),
                              ("max_num_seqs", req.max_num_seqs, "--max-num-seqs"),
                              ("max_num_batched_tokens", req.max_num_batched_tokens, "--max-num-batched-tokens")):
        out[name] = (given, flag) if given is not None else defaults[name]
    return out


def evaluate(shape: ModelShape, gpu: Gpu, req: Request, sizing: Sizing) -> Outcome:
    s = settings_for(shape, gpu, req, sizing)
    size, size_why, qsize, qwhy, kv_size, kv_why = precision(shape, req)
    total, tenants = gpu.memory, req.tenants
    length, util = int(s["max_model_len"][0]), float(s["gpu_memory_utilization"][0])
    seqs, tokens = int(s["max_num_seqs"][0]), int(s["max_num_batched_tokens"][0])
    gpus = req.tp * req.pp
    w = weights_of(shape, dtype_bytes=size, quant_bytes=qsize, quant_text=qwhy, tp=req.tp, pp=req.pp)
    sg = sizing.engine == "sglang"
    kvl = layout(shape, kv_size, tp=req.tp, pp=req.pp, block=1 if sg else 16, windows=sizing.windows,
                 mla=sg or sizing.mla, mla_head_size=sizing.mla_head_size)
    sampled = min(seqs, tokens) if sizing.engine == "vllm" else min(seqs, 256)
    peak = estimate.profile_peak(shape, tokens, sampled, req.tp, size, sampler_path(req, sizing), sizing.vision_rotary)
    basis = "dist" if sg else sizing.non_torch
    fixed_out = estimate.outside_budget(gpus, basis)
    if sg:
        # SGLang takes mem_fraction_static of the memory free after its CUDA context and distributed init
        # (model_runner.py init_torch_distributed / profile_max_num_token), and nothing else off its pool
        other = estimate.Estimate(0, "none: SGLang sizes its pool from the free memory measured after the CUDA "
                                     "context and distributed init (held outside the budget)")
        free_init = total - tenants - fixed_out.bytes
        budget = int(util * free_init)
        budget_basis = (f"mem_fraction_static {util:g} x {gib(free_init)} free after {fixed_out.basis}"
                        + (" and other processes" if tenants else "") + f" ({gib(total)}: {gpu.source})")
    else:
        other = estimate.non_torch(gpus, basis, v1=sizing.v1)
        budget = int(util * total)
        budget_basis = f"gpu_memory_utilization {util:g} x {gib(total)} ({gpu.source})"
    graphs = estimate.Estimate(0, "none: --enforce-eager") if req.enforce_eager else estimate.cuda_graphs(shape, req.pp)
    f: dict[str, Figure] = {}

    def put(key: str, label: str, value: float, unit: str, est: bool, basis: str) -> None:
        f[key] = Figure(key, label, value, unit, est, basis)

    put("weights_per_gpu", "weights per GPU", w.per_gpu, "bytes", not w.computed, w.basis)
    put("kv_bytes_per_position", "KV cache per token", kvl.per_token, "bytes", False, kvl.formula)
    put("kv_bytes_per_block", "KV cache per block", kvl.per_block, "bytes", False,
        f"{kvl.block} tokens a block" if kvl.block > 1 else "one token a page (SGLang)")
    put("budget", "engine budget", budget, "bytes", gpu.estimated, budget_basis)
    put("profile_peak", "profiling peak (activations)", peak.bytes, "bytes", True, peak.basis)
    put("non_torch", "non-torch memory", other.bytes, "bytes", True,
        other.basis + ("" if sg else f" (counted as this version measures it: {sizing.non_torch}; "
                                     f"{sizing.sources.get('non_torch', '')})"))
    if fixed_out.bytes:
        put("outside_budget", "held outside the budget", fixed_out.bytes, "bytes", True, fixed_out.basis)
    graphs_in = sizing.engine == "vllm" and sizing.graphs_in_budget
    where = (("inside the budget" if graphs_in else "outside the budget (captured after the KV cache is sized)")
             + (f"; {sizing.sources['cuda_graphs']}" if sizing.sources.get("cuda_graphs") else ""))
    put("cuda_graphs", "CUDA graphs", graphs.bytes, "bytes", bool(graphs.bytes),
        f"{graphs.basis}; {where}" if graphs.bytes else graphs.basis)
    if tenants:
        put("other_tenants", "other processes on the GPU", tenants, "bytes", False, "--other-tenants-bytes")
    reasons: list[str] = []
    free_at_start = total - tenants - estimate.CUDA_CONTEXT
    if sg:
        # SGLang's pool is what mem_fraction_static leaves after the weights; activations and graphs live outside it
        pool = budget - w.per_gpu
        headroom = free_init - budget - graphs.bytes - peak.bytes
    else:
        inside = w.per_gpu + peak.bytes + other.bytes + (graphs.bytes if graphs_in else 0)
        pool = budget - inside - (0 if sizing.v1 else tenants)
        headroom = total - budget - (tenants if sizing.v1 else 0) - (0 if graphs_in else graphs.bytes)
    put("kv_cache", "KV cache", max(pool, 0), "bytes", True,
        f"budget {gib(budget)} less the weights, the profiling peak, non-torch memory"
        + (", CUDA graphs" if graphs_in and graphs.bytes else "")
        + (" and the other processes (V0 counts them in the budget)" if tenants and not sizing.v1 and
           sizing.engine == "vllm" else ""))
    vllm = sizing.engine == "vllm"
    one = vllm_request_bytes(kvl, length, tokens, chunked="chunked" in shape.layer_kinds) if vllm and sizing.windows \
        else kvl.sequence(length)
    capacity = vllm_pool_tokens(kvl, max(pool, 0)) if vllm and not kvl.state else kvl.tokens(max(pool, 0), length)
    if sizing.engine == "sglang" and req.max_num_seqs is None:
        s["max_num_seqs"] = (max(1, min(4096, capacity // 2)), "SGLang's default: half the pool's tokens, at most 4096")
    concurrency = max(pool, 0) / one if one else 0.0
    longest = kvl.longest(max(pool, 0), cap=shape.max_position or length)
    blocks = max(pool, 0) // kvl.per_block if kvl.per_block else 0
    put("kv_capacity_tokens", "KV cache capacity", capacity, "tokens", True,
        f"{blocks:,} blocks x {kvl.block} tokens" + (" (a token slot in every layer, as vLLM prints it; a "
                                                      "sliding-window layer reuses its slots past the window)"
                                                      if kvl.windowed else "")
        if kvl.block > 1 and (vllm and not kvl.state or not kvl.windowed) else
        f"{gib(max(pool, 0))} / {kvl.per_token:,} bytes per token")
    put("max_concurrency", f"sequences of {length:,} tokens at once", round(concurrency, 2), "x", True,
        f"{gib(max(pool, 0))} / {gib(one)} per sequence")
    put("longest_sequence", "longest sequence the KV cache holds", longest, "tokens", True,
        "in whole blocks, at most max_position_embeddings" if kvl.block > 1 else "at most max_position_embeddings")
    put("headroom", "left outside the budget", headroom, "bytes", True,
        f"{gib(total)} - budget" + (" - other processes" if tenants and (sizing.v1 or sg) else "")
        + (" - " + fixed_out.basis if sg and fixed_out.bytes else "")
        + ("" if graphs_in or not graphs.bytes else " - CUDA graphs")
        + (" - the profiling peak (SGLang runs activations outside mem_fraction_static)" if sizing.engine == "sglang"
           else ""))
    out = Outcome(gpu, s, f, kvl, pool, headroom, one, capacity, concurrency, longest, reasons=reasons,
                  free_at_start=free_at_start if tenants else None,
                  refused=[] if sg else refusals(shape, req.tp, length, req.allow_long))
    held = [("other processes", tenants if sizing.v1 or sg else 0),
            ("CUDA graphs captured after the KV cache", 0 if graphs_in else graphs.bytes),
            ("what the profile does not charge (" + fixed_out.basis + ")", fixed_out.bytes)]
    out.risk = burst_model.assess(total, budget, held, peak.bytes)
    put("burst_spare", "spare outside the budget for a burst", out.risk.spare, "bytes", True, out.risk.arithmetic)
    _verdict(out, shape, req, sizing, w.per_gpu, budget, peak.bytes + other.bytes + graphs.bytes, graphs.bytes)
    return out


def sampler_path(req: Request, sizing: Sizing) -> str:
    """How the profiling run's sampler filters top-k / top-p: FlashInfer's sampler when the engine
    says it uses it, else the release's own default (vllm_releases.yaml `sampler`)."""
    return "nosort" if req.flashinfer_sampler else sizing.sampler


def vllm_pool_tokens(kvl: KvLayout, pool: int) -> int:
    """The KV cache in tokens as vLLM prints it ("GPU KV cache size: N tokens" in V1, "# GPU
    blocks: N" x block size in V0): whole blocks of one token slot in every attention layer,
    whatever the layers' kind. V1 logs num_blocks // len(kv_cache_groups) x block_size, and its
    hybrid allocator sizes a block over one group's layers (vllm/v1/core/kv_cache_utils.py:871
    (0.9.2), :1011 (0.10.1.1), _report_kv_cache_config (0.19.1)), so a sliding-window layer counts
    a slot per token like a full one; V0 divides the pool by the cache block of every layer
    (vllm/worker/cache_engine.py get_cache_block_size, 0.6.4-0.8.3). A mamba / linear layer's
    state has no per-token slot: evaluate keeps the layout's per-sequence arithmetic there."""
    return pool // kvl.per_block * kvl.block if kvl.per_block else 0


def vllm_request_bytes(kvl: KvLayout, length: int, batched: int, chunked: bool = False) -> int:
    """The KV bytes vLLM V1's hybrid allocator reserves for one request of `length` tokens, as its
    "Maximum concurrency" line and its start-up check count them: every token's block in a
    full-attention layer; in a sliding-window layer min(window - 1 + max_num_batched_tokens,
    length) tokens in whole blocks plus one (the window may start inside a block),
    SlidingWindowSpec.max_memory_usage_bytes in vllm/v1/kv_cache_interface.py:148-155 (0.9.2),
    :172-179 (0.10.1.1), :251-270 (0.19.1); in a chunked local-attention layer (Llama 4)
    min(chunk + max_num_batched_tokens, length) in whole blocks, ChunkedLocalAttentionSpec
    :232-244 (0.19.1); get_max_concurrency_for_kv_cache_config in v1/core/kv_cache_utils.py
    (0.19.1)."""
    if not kvl.windowed or kvl.window is None:
        return kvl.sequence(length)
    blocks = math.ceil(length / kvl.block)
    kept = math.ceil(min(kvl.window + batched, length) / kvl.block) if chunked else \
        math.ceil(min(kvl.window - 1 + batched, length) / kvl.block) + 1
    return (blocks * kvl.full + kept * kvl.windowed) * kvl.block + kvl.state


def _verdict(o: Outcome, shape: ModelShape, req: Request, sizing: Sizing, weights: int, budget: int,
             estimated: int, graphs: int) -> None:
    total, tenants = o.gpu.memory, req.tenants
    length, seqs = int(o.value("max_model_len")), int(o.value("max_num_seqs"))
    start: list[str] = list(o.refused)
    if weights > total - tenants:
        start.append(f"the weights alone ({gib(weights)} per GPU) do not fit the card's {gib(total)}" if not tenants else
                     f"the weights alone ({gib(weights)} per GPU) do not fit the {gib(total - tenants)} other "
                     "processes leave of the card")
    elif sizing.engine == "vllm" and sizing.v1 and tenants and (o.free_at_start or 0) < budget:
        start.append(f"about {gib(o.free_at_start or 0)} is free at start-up ({gib(total)} less "
                     f"{gib(tenants)} of other processes and this server's CUDA context) and vLLM V1 refuses to start "
                     f"with less than its budget {gib(budget)} free")
    if not start:
        if o.pool <= 0:
            start.append(("SGLang: 'Not enough memory. Please try to increase --mem-fraction-static'" if
                          sizing.engine == "sglang" else "no memory for the KV cache blocks") +
                         f": the budget {gib(budget)} is spent before the KV cache ({gib(budget - o.pool)} "
                         "of weights, profiling peak and the rest)")
        elif o.pool < o.one_seq and sizing.engine == "vllm":
            start.append(f"one sequence of max_model_len {length:,} tokens needs {gib(o.one_seq)} of KV cache and "
                         f"{gib(o.pool)} is left for it: vLLM refuses to start (the longest that fits: "
                         f"{o.longest:,} tokens)")
        room = total - budget - (tenants if sizing.engine == "vllm" and sizing.v1 else 0)
        if graphs and graphs > room and not (sizing.engine == "vllm" and sizing.graphs_in_budget):
            start.append(f"CUDA graph capture needs about {gib(graphs)} beyond the budget and the card has "
                         f"{gib(max(room, 0))} left there")
    if start:
        o.verdict, o.reasons = FAILS_STARTUP, start
        return
    if o.capacity < seqs * length:
        o.burst = (seqs, max(1, o.capacity // seqs))
    risk = o.risk
    if risk is not None and risk.likelihood == burst_model.HIGH:
        n, l = o.burst or (seqs, length)
        fills = "fills the KV cache and drives" if o.burst else "(max_num_seqs at max_model_len) drives"
        o.verdict = FAILS_BURST
        o.reasons = [f"burst OOM likelihood high: {risk.arithmetic}; a burst of {n:,} x {l:,} tokens {fills} the "
                     "engine to its peak"]
        o.burst = (n, l)
        return
    tight = []
    if risk is not None and risk.likelihood == burst_model.MODERATE:
        tight.append(f"burst OOM likelihood moderate: {risk.arithmetic}; one prefill the allocator cannot place in "
                     "reused blocks fits, two do not")
    if o.burst:
        n, l = o.burst
        tight.append(f"a burst of {count_noun(n, 'sequence')} x {l:,} tokens fills the KV cache ({o.capacity:,} tokens) before "
                     f"each reaches max_model_len {length:,}; the engine then preempts (requests stall, nothing "
                     f"crashes); {count_noun(o.max_num_seqs_supported, 'sequence')} of {length:,} tokens "
                     f"{'fits' if o.max_num_seqs_supported == 1 else 'fit'} at once")
    if sizing.engine == "sglang" and o.capacity < length:
        tight.append(f"the pool holds {o.capacity:,} tokens, fewer than context_length {length:,}: SGLang starts but "
                     "cannot serve a request that long")
    elif o.pool - o.one_seq < ESTIMATE_ERROR * estimated:
        tight.append(f"the KV cache holds one {length:,}-token sequence with {gib(o.pool - o.one_seq)} to spare, "
                     f"within {ESTIMATE_ERROR:.0%} of the estimated parts ({gib(estimated)})")
    if tight:
        o.verdict, o.reasons = TIGHT, tight
    else:
        o.reasons = [f"it starts with {gib(o.pool)} of KV cache, {o.capacity:,} tokens: "
                     f"{'its one sequence' if seqs == 1 else 'all ' + count_noun(seqs, 'sequence')} can "
                     f"reach max_model_len {length:,} at once"]


# --- the whole plan ---------------------------------------------------------------------------------

def make_plan(shape: ModelShape, gpu: Gpu, req: Request, sizing: Sizing, model_arg: str) -> Plan:
    from .gpus import table

    if req.tp < 1 or req.pp < 1:
        raise TriageError("--tp and --pp must be at least 1")
    main = evaluate(shape, gpu, req, sizing)
    rows = [evaluate(shape, g, replace(req, tenants=0), sizing) for g in table()]     # each a GPU of its own
    recs = recommend(shape, main, req, sizing, rows)
    from .alternatives import alternatives

    return Plan(shape, req, sizing, main, assumptions(shape, main, req, sizing), recs,
                command(shape, main, req, sizing, recs, model_arg), rows,
                next((r.gpu for r in rows if r.verdict in (FITS, TIGHT)), None),
                next((r.gpu for r in rows if r.verdict == FITS), None),
                alternatives(shape, main, req, sizing, evaluate))


def assumptions(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> list[str]:
    size, size_why, _, qwhy, kv_size, kv_why = precision(shape, req)
    out = [f"engine: {sizing.label}"]
    out += [f"{what}: {src}" for what, src in sizing.sources.items()
            if what != "vision_rotary" or (shape.vision and shape.vision.rotary)]
    out += [f"weights in {size_why}" + (f"; quantised: {qwhy}" if qwhy else ""),
           f"KV cache in {kv_why}: {kv_size:g} bytes per element",
           "KV blocks of 16 tokens (vLLM's default)" if sizing.engine == "vllm" else "KV pages of one token (SGLang)"]
    for name, (value, origin) in o.settings.items():
        if not origin.startswith("--"):
            out.append(f"{name} {value:,}" if isinstance(value, int) else f"{name} {value:g}")
            out[-1] += f": {origin}"
    if req.tp > 1 or req.pp > 1:
        out.append(f"{req.tp} tensor-parallel x {req.pp} pipeline GPU(s): the figures are for the busiest GPU")
    if sizing.engine == "vllm":
        out.append("profile's sampler: " + (
            "FlashInfer's (--flashinfer-sampler), no sort" if req.flashinfer_sampler else
            "a full sort of the logits (--flashinfer-sampler where the log says 'Using FlashInfer for top-p & top-k "
            "sampling')" if sizing.sampler == "sort" else "no sort (FlashInfer's or the Triton top-k/top-p)"))
    if shape.mla and sizing.engine == "vllm" and not sizing.mla:
        out.append("MLA model cached as full K and V per head: this vLLM version predates its latent cache "
                   f"({sizing.sources.get('mla', '')})")
    if o.gpu.note:
        out.append(o.gpu.note)
    if req.allow_long:
        out.append("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: lengths past the model's maximum are accepted")
    if o.kv.window and not sizing.windows:
        out.append("sliding-window layers get a full KV cache (this vLLM version has no hybrid KV allocator)")
    if shape.vision:
        out.append(f"vision encoder: {shape.vision.basis} (estimated)"
                   + (f"; its attention's q and k rotated {sizing.vision_rotary} (vision_rotary above)"
                      if shape.vision.rotary and sizing.engine == "vllm" else ""))
    if o.gpu.estimated:
        out.append(f"{o.gpu.name}: memory {gib(o.gpu.memory)} estimated, not seen in a log")
    out.append("estimated, with their basis: the profiling peak, non-torch memory and CUDA graphs, and so what "
               "is left for the KV cache; computed from config.json: the weights and the KV cache per token")
    return out


def recommend(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing, rows: list[Outcome]) -> list[Recommendation]:
    """Settings that make it start (applied together on the command line, each checked by
    evaluating the plan again), then what survives a burst; options for a person (free the GPU,
    a quantised checkpoint, a bigger GPU) where the launch alone cannot do it."""
    out: list[Recommendation] = []
    now, cur, base = o, req, req
    if o.verdict == FAILS_STARTUP:
        makers = []
        for step in (_fix_refusal, _fix_tenants, _fix_weights, _fix_length, _fix_graphs):
            if now.verdict != FAILS_STARTUP:
                break
            got = step(shape, now, cur, sizing)
            if got is not None:
                makers.append(got[0])
                cur = got[1]
                base = cur if step is _fix_tenants else base
                now = evaluate(shape, o.gpu, cur, sizing)
        out += [make(now) for make in makers]     # each why tells what the changes together leave
        if now.verdict == FAILS_STARTUP or cur.tp != req.tp:
            out += _elsewhere(shape, o, req, base, sizing, rows)
        if now.verdict == FAILS_STARTUP:
            return [r for r in out if r.manual]          # no launch change alone makes it start
    if now.verdict == FAILS_BURST:
        best = _burst_fix(shape, now, cur, sizing)
        if best is not None:
            out.append(best[0])
            now = best[1]
    seqs, length = int(now.value("max_num_seqs")), int(now.value("max_model_len"))
    # A cap of one sequence serves nobody well: there the length is what to cut (the P99, not the maximum).
    if now.burst and 2 <= now.max_num_seqs_supported < seqs:
        n = now.max_num_seqs_supported
        out.append(Recommendation("max_num_seqs", seqs, n, (
            f"{count_noun(n, 'sequence')} of max_model_len {length:,} fit the KV cache at once ({gib(now.pool)} / "
            f"{gib(now.one_seq)}), so no burst the server admits can fill it; where real sequences are shorter, "
            f"{now.capacity:,} tokens / your P99 length is the cap instead"), "plan"))
    return out


def _burst_fix(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> tuple[Recommendation, Outcome] | None:
    """The change that makes a burst OOM unlikely and keeps the most KV cache: a lower
    gpu_memory_utilization (more room outside the budget) or fewer tokens a step (a smaller peak)."""
    util, tokens = float(o.value("gpu_memory_utilization")), int(o.value("max_num_batched_tokens"))
    tried: list[tuple[str, float | int, float | int, Outcome]] = []
    for target in (0.92, 0.9, 0.88, 0.85, 0.8):
        if target < util:
            tried.append(("gpu_memory_utilization", util, target, evaluate(shape, o.gpu, replace(req, util=target), sizing)))
    for target in (8192, 4096, 2048):
        if target < tokens:
            tried.append(("max_num_batched_tokens", tokens, target,
                          evaluate(shape, o.gpu, replace(req, max_num_batched_tokens=target), sizing)))
    ok = [t for t in tried if t[3].verdict in (FITS, TIGHT)]
    if not ok:
        return None
    setting, old, new, got = max(ok, key=lambda t: (t[3].capacity, -abs(t[2] - t[1])))
    risk = got.risk
    return Recommendation(setting, old, new, (
        f"burst OOM likelihood {risk.likelihood if risk else '?'}: {risk.arithmetic if risk else ''}; still "
        f"{gib(got.pool)} of KV cache ({got.capacity:,} tokens)"), "plan"), got


# A start-up fix: (the Recommendation, made from the outcome it leads to; the changed Request).
Fix = tuple[Callable[[Outcome], Recommendation], Request]


def _fix_refusal(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> Fix | None:
    """A configuration vLLM refuses: the nearest tensor parallelism its heads allow (the smallest
    that starts), or the model's own maximum length."""
    from .checks import nearest_valid_tp, valid_tp

    if not o.refused:
        return None
    if not valid_tp(shape, req.tp):
        for tp in nearest_valid_tp(shape, req.tp):
            got = evaluate(shape, o.gpu, replace(req, tp=tp), sizing)
            if got.verdict != FAILS_STARTUP or not [r for r in got.refused]:
                return (lambda new, tp=tp: Recommendation("tensor_parallel_size", req.tp, tp, (
                    f"{shape.heads} attention heads and {shape.kv_heads} KV heads split evenly over {tp} GPUs"
                    f"{_together(new)}"), "plan"), replace(req, tp=tp))
        return None
    derived = shape.derived_max_len
    length = int(o.value("max_model_len"))
    if derived and length > derived:
        return (lambda new: Recommendation("max_model_len", length, derived, (
            f"the model's own maximum ({shape.derived_max_key}); a longer one needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            f"and positions past it give wrong output{_together(new)}"), "plan"), replace(req, max_model_len=derived))
    return None


def _fix_tenants(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> Fix | None:
    """vLLM V1 with other processes on the GPU: the target that what is free allows."""
    if o.free_at_start is None or o.free_at_start >= o.figures["budget"].value:
        return None
    target = math.floor((o.free_at_start / o.gpu.memory - FREE_MARGIN) * 100) / 100
    if target < 0.05:
        return None
    util = float(o.value("gpu_memory_utilization"))
    return (lambda new: Recommendation("gpu_memory_utilization", util, target, (
        f"{gib(o.free_at_start)} of {gib(o.gpu.memory)} is free beside the other processes: {target:g} is that share "
        f"less {FREE_MARGIN:.0%} of the card{_together(new)}"), "plan"),
        replace(req, util=target))


def _fix_weights(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> Fix | None:
    """No room for the KV cache: the fewest tensor-parallel GPUs that start at max_model_len,
    else the fewest that leave any KV cache."""
    if o.pool > 0:
        return None
    from ..memory.levers import TP_OPTIONS
    from .checks import valid_tp

    tried = [(tp, evaluate(shape, o.gpu, replace(req, tp=tp), sizing)) for tp in TP_OPTIONS
             if tp > req.tp and valid_tp(shape, tp)]
    best = next((tp for tp, t in tried if t.verdict != FAILS_STARTUP), None) or \
        next((tp for tp, t in tried if t.pool > 0), None)
    if best is None:
        return None
    return (lambda new: Recommendation("tensor_parallel_size", req.tp, best, (
        f"over {best} GPUs each holds {gib(new.figures['weights_per_gpu'].value)} of weights (every GPU needs the "
        f"same room){_together(new)}"), "plan"), replace(req, tp=best))


def _fix_length(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> Fix | None:
    """The KV cache cannot hold one max_model_len sequence: the longest it holds (vLLM's own
    estimate of the maximum model length)."""
    if not 0 < o.pool < o.one_seq or o.longest < o.kv.block:
        return None
    length = int(o.value("max_model_len"))
    return (lambda new: Recommendation("max_model_len", length, o.longest, (
        f"the KV cache ({gib(o.pool)}) holds {o.longest:,} tokens of one sequence, "
        f"{o.figures['kv_bytes_per_block'].value:,.0f} bytes a {o.kv.block}-token block; set it to your real P99 "
        f"prompt+response if lower{_together(new)}"), "plan"), replace(req, max_model_len=o.longest))


def _fix_graphs(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing) -> Fix | None:
    if req.enforce_eager or not o.figures["cuda_graphs"].value:
        return None
    return (lambda new: Recommendation("enforce_eager", False, True, (
        f"CUDA graphs (about {gib(o.figures['cuda_graphs'].value)}) do not fit beside the budget; eager mode needs "
        f"no graph memory{_together(new)}"), "plan"), replace(req, enforce_eager=True))


def _together(new: Outcome) -> str:
    if new.verdict == FAILS_STARTUP:
        return "; not enough alone: see the options below"
    return f"; with the changes here it starts with {gib(new.pool)} of KV cache ({new.capacity:,} tokens)"


def _elsewhere(shape: ModelShape, o: Outcome, req: Request, base: Request, sizing: Sizing,
               rows: list[Outcome]) -> list[Recommendation]:
    """What a person can do where these flags do not start on this GPU: free it of the other
    processes, serve a quantised checkpoint (on the GPU as it is: `base`, at the target what is
    free allows), or take the smallest GPU of the table they run on."""
    out: list[Recommendation] = []
    if req.tenants:
        alone = evaluate(shape, o.gpu, replace(req, tenants=0), sizing)
        if alone.verdict in (FITS, TIGHT):
            out.append(Recommendation("other_gpu_processes", gib(req.tenants), "none", (
                f"with the GPU to itself the server starts at these flags: {gib(alone.pool)} of KV cache "
                f"({alone.capacity:,} tokens)"), "plan", manual=True))
    if shape.quant is None and not req.quantization:
        for name, size in QUANT_OPTIONS:
            smaller = evaluate(shape, o.gpu, replace(base, quantization="fp8" if size >= 1 else "awq"), sizing)
            if smaller.verdict in (FITS, TIGHT):
                out.append(Recommendation("checkpoint", shape.name, f"{name} checkpoint of it", (
                    f"{gib(smaller.figures['weights_per_gpu'].value)} of weights per GPU instead of "
                    f"{gib(o.figures['weights_per_gpu'].value)}, leaving {gib(smaller.pool)} of KV cache "
                    f"({smaller.capacity:,} tokens)"), "plan", manual=True))
                break
    bigger = next((r for r in rows if r.verdict in (FITS, TIGHT) and r.gpu.memory > o.gpu.memory), None)
    if bigger is not None:
        out.append(Recommendation("gpu", o.gpu.name, bigger.gpu.name, (
            f"the smallest GPU of the table these flags run on: {gib(bigger.pool)} of KV cache there "
            f"({bigger.capacity:,} tokens)"), "plan", manual=True))
    return out


def command(shape: ModelShape, o: Outcome, req: Request, sizing: Sizing, recs: list[Recommendation],
            model_arg: str) -> str:
    """The launch these flags make, with the recommendations applied (advice.apply_changes)."""
    from ..advice import apply_changes
    from ..evidence.kinds import Kind
    from ..launch import rebuild
    from ..model import Evidence

    sg = sizing.engine == "sglang"
    model = shape.name if "/" in shape.name and not shape.name.startswith(("/", ".")) else model_arg
    args: dict[str, Any] = {"model_path" if sg else "model": model}
    names = {"tp": "tp_size" if sg else "tensor_parallel_size", "pp": "pp_size" if sg else "pipeline_parallel_size",
             "max_model_len": "context_length" if sg else "max_model_len",
             "gpu_memory_utilization": "mem_fraction_static" if sg else "gpu_memory_utilization",
             "max_num_seqs": "max_running_requests" if sg else "max_num_seqs",
             "max_num_batched_tokens": "chunked_prefill_size" if sg else "max_num_batched_tokens"}
    if req.tp > 1:
        args[names["tp"]] = req.tp
    if req.pp > 1:
        args[names["pp"]] = req.pp
    for key in ("dtype", "kv_cache_dtype", "quantization"):
        if getattr(req, key) not in (None, "auto"):
            args[key] = getattr(req, key)
    for key in ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens"):
        value, origin = o.settings[key]
        if origin.startswith("--") or key in ("max_model_len", "gpu_memory_utilization", "max_num_seqs"):
            args[names[key]] = value
    if req.enforce_eager:
        args["disable_cuda_graph" if sg else "enforce_eager"] = True
    record = Evidence("plan", None, Kind.LAUNCH_CONFIG.value, "", fields={"origin": "non-default args", "args": args})
    rebuilt = rebuild([record], sizing.engine, sizing.version, None)
    argv = rebuilt.argv if rebuilt else ["vllm", "serve", model]
    argv, env = apply_changes(argv, recs, sizing.engine, sizing.version, None)
    if req.allow_long and not sg:
        env = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", **env}
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.join(argv)])
