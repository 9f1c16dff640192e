"""Does it fit? One GPU's memory arithmetic, from the incident's own numbers.

A recommended setting is only worth running if the memory it gives the engine can hold what the
server needs there: the weights, the profiling run's activation peak, non-torch memory, CUDA
graphs and the KV cache of one max_model_len sequence. Each part is taken from the evidence when
the log states it (cited source:line); otherwise, when the launch's model argument is a folder
(or config.json) on this host, the weights and one sequence's KV cache are computed from the
model's config.json by the shared arithmetic of triage/memory (the same as `triage plan`); else
the weights are *estimated* from the parameter count in the model name and the dtype or
quantisation of the engine config, labelled with that basis; a part the evidence does not give
is named as unknown. The card's total, the memory free
at start-up and other tenants' memory come from the engine's own checks and nvidia-smi.

vLLM takes `gpu_memory_utilization x total` for itself (V1 refuses to start unless that much is
free; V0 counts other processes' memory against the same budget), so a target can never be more
than the share of the card that is free, and its budget must hold the parts above.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .evidence.kinds import Kind
from .flowchart.context import Context
from .memory.levers import QUANT_OPTIONS, TP_OPTIONS
from .memory.precision import dtype_bytes, quant_bytes, quant_in_name
from .model import Evidence, Recommendation
from .thresholds import DEFAULT_UTIL, FREE_MARGIN, MIN_AS_IS_UTIL

GiB = 1 << 30
# "32B", "8B", "1.5B", "70b", "135M", "8x7B" as a word of the model name ("A3B", active parameters, is not one).
_PARAMS = re.compile(r"(?:^|[-_/.\s])(?:(\d+)[xX])?(\d+(?:\.\d+)?)([bBmM])(?=$|[-_/.\s])")


def gib(n: float | int | None, digits: int = 1) -> str:
    return "?" if n is None else f"{n / GiB:.{digits}f} GiB"


@dataclass(frozen=True)
class Part:
    """One consumer of GPU memory and where its size comes from."""

    what: str                  # "weights", "activation peak", ...
    bytes: int
    source: str                # "logs/vllm.log:25", or the basis of an estimate
    estimated: bool = False

    def describe(self) -> str:
        return f"{gib(self.bytes)} {self.what} ({'estimated: ' if self.estimated else ''}{self.source})"


@dataclass(frozen=True)
class Tenant:
    """Another process holding memory on the GPU (nvidia-smi / NVML process list)."""

    pid: int | None
    name: str
    bytes: int
    where: str

    def describe(self) -> str:
        if self.pid is None:
            return f"{self.name} ({gib(self.bytes)}, {self.where})"
        return f"PID {self.pid} ({self.name}, {gib(self.bytes)}, {self.where})"

    def short(self) -> str:
        return f"PID {self.pid} ({self.name}): {gib(self.bytes)}" if self.pid is not None else \
            f"{self.name}: {gib(self.bytes)}"


@dataclass
class Fit:
    """How the card's memory was shared out at start-up, part by part, each with where it was read."""
    total: Part | None = None          # the card, as the engine measured it (else nvidia-smi)
    free: Part | None = None           # free when the engine started (its own start-up check)
    weights: Part | None = None        # per GPU, at the current tensor parallelism
    activation: Part | None = None
    non_torch: Part | None = None
    graphs: Part | None = None
    kv_one_seq: Part | None = None     # KV cache of one max_model_len sequence, per GPU
    tenants: list[Tenant] = field(default_factory=list)
    tp: int = 1
    util: float | None = None          # gpu_memory_utilization in force
    max_model_len: int | None = None
    params: float | None = None        # parameters, from the model name
    params_text: str | None = None     # "32B"
    dtype_bytes: float | None = None   # bytes per parameter of the weights as served
    dtype_text: str | None = None      # "bfloat16 (logs/vllm.log:6)"
    model: str | None = None
    config: Any = None                 # the model's shape (memory.config.ModelShape) when its config.json is here

    # -- what the server needs on one GPU -------------------------------------------------------
    def parts(self, tp: int | None = None) -> list[Part]:
        """The known consumers per GPU, at another tensor parallelism if asked (weights and KV
        cache are sharded; activations, non-torch memory and graphs are taken as they are)."""
        tp = tp or self.tp
        out = []
        if self.weights:
            if tp == self.tp:
                out.append(self.weights)
            else:
                out.append(Part("weights", int(self.weights.bytes * self.tp / tp),
                                f"{gib(self.weights.bytes * self.tp)} / {tp} GPUs; {self.weights.source}",
                                self.weights.estimated))
        out += [p for p in (self.activation, self.non_torch, self.graphs) if p]
        if self.kv_one_seq:
            out.append(self.kv_one_seq if tp == self.tp else
                       Part(self.kv_one_seq.what, int(self.kv_one_seq.bytes * self.tp / tp),
                            f"{gib(self.kv_one_seq.bytes * self.tp)} / {tp} GPUs; {self.kv_one_seq.source}"))
        return out

    def need(self, tp: int | None = None) -> int | None:
        """Bytes the known parts take on one GPU; None while the weights are not known."""
        if self.weights is None:
            return None
        return sum(p.bytes for p in self.parts(tp))

    def need_text(self, tp: int | None = None, brief: bool = False) -> str:
        """The known parts, summed where there are several; `brief`: by size only (where their
        sources were given already)."""
        parts = self.parts(tp)
        text = " + ".join(f"{gib(p.bytes)} {p.what}" if brief else p.describe() for p in parts)
        return text if len(parts) < 2 else f"{text} = {gib(sum(p.bytes for p in parts))}"

    def unknown_text(self) -> str:
        missing = self.unknown()
        return f" (not in the evidence: {missing})" if missing else ""

    def unknown(self) -> str:
        out = []
        if self.weights is None:
            out.append("the weights (no 'Model loading took' line, no size in the model name)")
        if self.kv_one_seq is None:
            out.append("the KV cache of one " + (f"{self.max_model_len}-token " if self.max_model_len else "")
                       + "sequence")
        if self.activation is None:
            out.append("the activation peak")
        return ", ".join(out)

    # -- what the card gives it -----------------------------------------------------------------
    def budget(self, util: float) -> int | None:
        return int(util * self.total.bytes) if self.total else None

    def holds(self, util: float, tp: int | None = None) -> bool | None:
        """Whether `util` of the card holds the known parts (None: the weights are not known)."""
        need, budget = self.need(tp), self.budget(util)
        if need is None or budget is None:
            return None
        return need <= budget

    @property
    def free_share(self) -> float | None:
        if self.free and self.total and self.total.bytes:
            return self.free.bytes / self.total.bytes
        return None

    def util_free_now(self) -> float | None:
        """The largest target the GPU as it is allows: the free share less FREE_MARGIN."""
        share = self.free_share
        if share is None:
            return None
        return max(0.0, math.floor((share - FREE_MARGIN) * 100) / 100)

    def budget_text(self, util: float) -> str:
        return f"{util:g} x {gib(self.total.bytes, 2)} = {gib(self.budget(util), 2)}" if self.total else f"{util:g}"

    def check(self, util: float, brief: bool = False) -> str:
        """One sentence: what `util` holds, or that the weights are not known. `brief`: the parts by
        size only and what is missing unsaid (a text that gave them already)."""
        if self.weights is None:
            return (f"whether {self.budget_text(util)} holds the server is not known: "
                    f"{self.unknown()} are not in the evidence")
        if not self.total:
            return f"the card's size is not in the evidence: check {self.need_text()} fits"
        need, budget = self.need() or 0, self.budget(util) or 0
        card = "" if brief else f" (the card: {self.total.source})"
        unknown = "" if brief else self.unknown_text()
        if need <= budget:
            return (f"{self.budget_text(util)}{card} holds {self.need_text(brief=brief)} with {gib(budget - need)} "
                    f"left for the KV cache and activations{unknown}")
        return f"{self.budget_text(util)}{card} cannot hold {self.need_text(brief=brief)}{unknown}"


# --- gathering ---------------------------------------------------------------------------------

def gather(ctx: Context) -> Fit:
    ev = ctx.ev
    fit = Fit()
    fit.model = _str(ctx.arg("model", "model_path", "model_id", "model_tag"))
    fit.tp = _int(ctx.arg("tensor_parallel_size", "tp_size", "tp", "num_shard")) or 1
    util = ctx.arg("gpu_memory_utilization", "mem_fraction_static", "cuda_memory_fraction")
    fit.util = float(util) if isinstance(util, (int, float)) and not isinstance(util, bool) and 0 < util <= 1 else None
    fit.max_model_len = _int(ctx.arg("max_model_len", "context_length", "max_total_tokens"))
    fit.total = _total(ev)
    low = ev.first(Kind.FREE_MEMORY_LOW)
    profile = ev.first(Kind.MEMORY_PROFILE)
    if low and low.fields.get("free_bytes"):
        fit.free = Part("free at start-up", int(low.fields["free_bytes"]), low.where)
        fit.util = fit.util or _frac(low.fields.get("gpu_memory_utilization"))
    elif profile and profile.fields.get("free_bytes"):
        fit.free = Part("free at start-up", int(profile.fields["free_bytes"]), profile.where)
    fit.dtype_bytes, fit.dtype_text = _dtype(ctx)
    fit.params, fit.params_text = parse_params(fit.model)
    fit.config = model_config(fit.model)
    fit.weights = _weights(ev, fit)
    for key, what, kinds in (("activation_peak_bytes", "activation peak", (Kind.MEMORY_PROFILE,)),
                             ("non_torch_bytes", "non-torch memory", (Kind.MEMORY_PROFILE,)),
                             ("cuda_graph_bytes", "CUDA graphs", (Kind.MEMORY_PROFILE,)),
                             ("graph_bytes", "CUDA graphs", (Kind.GRAPH_CAPTURE,))):
        rec = _first_with(ev.of(*kinds), key)
        attr = {"activation peak": "activation", "non-torch memory": "non_torch", "CUDA graphs": "graphs"}[what]
        if rec and getattr(fit, attr) is None:
            setattr(fit, attr, Part(what, int(rec.fields[key]), rec.where))
    fit.kv_one_seq = _kv_one_sequence(ctx, fit.max_model_len) or _kv_from_config(ctx, fit)
    fit.tenants = tenants(ctx)
    return fit


def parse_params(model: str | None) -> tuple[float | None, str | None]:
    """Parameters from the model name: "Qwen/Qwen3-32B" -> 32e9; "8x7B" -> 56e9 (an upper bound:
    the experts share the attention weights); None when the name carries no size."""
    if not model:
        return None, None
    m = _PARAMS.search(model)
    if not m:
        return None, None
    experts, size, unit = m.group(1), float(m.group(2)), m.group(3).lower()
    count = size * (1e9 if unit == "b" else 1e6) * (int(experts) if experts else 1)
    text = m.group(0).lstrip("-_/. ")
    if experts:
        text += f" (at most {count / 1e9:g}B: the experts share the attention weights)"
    return (count, text) if count > 0 else (None, None)


def _dtype(ctx: Context) -> tuple[float | None, str | None]:
    """Bytes per parameter as served: the quantisation, else the dtype of the engine config."""
    model = (_str(ctx.arg("model", "model_path", "model_id", "model_tag")) or "").lower()
    for rec in sorted(ctx.launch, key=lambda e: e.fields.get("origin") == "engine config", reverse=True):
        args = rec.fields.get("args") or {}
        quant = str(args.get("quantization") or "").lower()
        if quant and quant != "none":
            size = quant_bytes(quant)
            if size is not None:
                return size, f"quantization={quant} ({rec.where})"
            return None, (f"quantization={quant} ({rec.where}) of unknown size per parameter: 16-bit assumed, an "
                          "upper bound")
    named = quant_in_name(model)
    if named:
        return named[1], f"'{named[0]}' in the model name"
    for rec in sorted(ctx.launch, key=lambda e: e.fields.get("origin") == "engine config", reverse=True):
        dtype = str((rec.fields.get("args") or {}).get("dtype") or "").lower().replace("torch.", "")
        size = dtype_bytes(dtype)
        if size is not None:
            return size, f"{dtype} ({rec.where})"
    return None, None


def _weights(ev, fit: Fit) -> Part | None:
    rec = _first_with(ev.of(Kind.WEIGHTS_LOADED, Kind.MEMORY_PROFILE), "weights_bytes")
    if rec:
        return Part("weights", int(rec.fields["weights_bytes"]), rec.where)
    if fit.config is not None:
        return _weights_from_config(fit)
    if fit.params:
        size = fit.dtype_bytes or 2.0
        dtype = fit.dtype_text or "dtype not in the evidence: 16-bit assumed, as most checkpoints are"
        per_gpu = fit.params * size / fit.tp
        basis = (f"{fit.params_text} parameters (from the model name) x {size:g} bytes, {dtype}"
                 + (f", / {fit.tp} GPUs" if fit.tp > 1 else ""))
        return Part("weights", int(per_gpu), basis, estimated=True)
    return None


def _kv_one_sequence(ctx: Context, max_len: int | None) -> Part | None:
    """The KV cache one max_model_len sequence needs on one GPU: vLLM's own figure, else the
    logged pool size over its capacity in tokens."""
    rec = ctx.ev.first(Kind.KV_CACHE_INSUFFICIENT)
    if rec and rec.fields.get("needed_bytes"):
        tokens = rec.fields.get("max_model_len") or max_len
        return Part(f"KV cache for one {tokens}-token sequence", int(rec.fields["needed_bytes"]), rec.where)
    if not max_len:
        return None
    pool = _first_with(ctx.ev.of(Kind.AVAILABLE_KV_MEMORY, Kind.MEMORY_PROFILE), "kv_cache_bytes")
    from .flowchart.causes import kv_tokens

    cap = kv_tokens(ctx)
    if pool and cap and cap[0]:
        per_token = pool.fields["kv_cache_bytes"] / cap[0]
        return Part(f"KV cache for one {max_len}-token sequence", int(per_token * max_len),
                    f"{gib(pool.fields['kv_cache_bytes'], 2)} for {cap[0]} tokens ({pool.where}, {cap[1][0].where})")
    return None


def model_config(model: str | None) -> Any:
    """The model's shape from its config.json when the launch's model argument is a folder (or the
    config file) on this host; None for a hub name, another host's path or a config that cannot be
    read (the advice then estimates from the model name, as without one)."""
    if not model or not os.path.exists(model):
        return None
    from .errors import BadInput
    from .memory.config import load, local_config

    path = local_config(model)
    try:
        return load(path) if path is not None else None
    except BadInput:
        return None


def _served_precision(fit: Fit) -> tuple[float, float | None, str | None]:
    """(dtype bytes, quantised bytes per weight or None, its basis) of a model whose config is known:
    a launch precision under 16 bits is a quantisation, the checkpoint's own quantisation wins."""
    shape = fit.config
    if shape.quant is not None:
        return shape.dtype_bytes, shape.quant.bytes_per_weight, shape.quant.text
    if fit.dtype_bytes is not None and fit.dtype_bytes < 2:
        return shape.dtype_bytes, fit.dtype_bytes, fit.dtype_text
    return fit.dtype_bytes or shape.dtype_bytes, None, None


def _weights_from_config(fit: Fit) -> Part:
    from .memory.weights import weights

    size, quant, text = _served_precision(fit)
    w = weights(fit.config, dtype_bytes=size, quant_bytes=quant, quant_text=text, tp=fit.tp)
    return Part("weights", w.per_gpu, f"{fit.config.source}: {w.basis}", estimated=not w.computed)


def _kv_from_config(ctx: Context, fit: Fit) -> Part | None:
    """One max_model_len sequence's KV cache from the model's config.json, when the log gives none."""
    if fit.config is None or not fit.max_model_len:
        return None
    from .memory.kv import layout
    from .memory.precision import kv_dtype_bytes

    size = _served_precision(fit)[0]
    element = kv_dtype_bytes(_str(ctx.arg("kv_cache_dtype", "cache_dtype")), size) or size
    kv = layout(fit.config, element, tp=fit.tp)
    return Part(f"KV cache for one {fit.max_model_len}-token sequence", kv.sequence(fit.max_model_len),
                f"{fit.config.source}: {kv.formula}")


def tenants(ctx: Context) -> list[Tenant]:
    """Processes on the GPU that are not this server (nvidia-smi / NVML lists), largest first."""
    own = {e.fields.get("pid") for e in ctx.ev.of(Kind.SERVER_PROCESS)}
    out = []
    for rec in ctx.ev.of(Kind.GPU_PROCESS):
        pid, name, used = rec.fields.get("pid"), str(rec.fields.get("name") or "?"), rec.fields.get("used_bytes")
        if not used or pid in own or any(s in name.lower() for s in ("vllm", "sglang", "text-generation")):
            continue
        if any(t.pid == pid for t in out):
            continue
        out.append(Tenant(pid, name, int(used), rec.where))
    return sorted(out, key=lambda t: -t.bytes)


def _total(ev) -> Part | None:
    for kinds, key in (((Kind.FREE_MEMORY_LOW,), "total_bytes"), ((Kind.TORCH_OOM,), "capacity_bytes"),
                       ((Kind.MEMORY_PROFILE,), "total_gpu_memory_bytes"), ((Kind.GPU_MEMORY,), "total_bytes")):
        rec = _first_with(ev.of(*kinds), key)
        if rec:
            return Part("card", int(rec.fields[key]), rec.where)
    return None


# --- what fits instead ---------------------------------------------------------------------------

def options(fit: Fit, blocking: str, others_hold: bool = False) -> list[Recommendation]:
    """When no target for this server fits the GPU as it is: what does, each with its arithmetic
    (only options whose arithmetic fits). `blocking` opens the first one: why nothing fits, with
    what the server needs and where each part's size comes from; the options then name the parts
    by size only, each thing said once."""
    out: list[Recommendation] = []
    keep = fit.util or DEFAULT_UTIL
    need = fit.need()
    if need is None or not fit.total:
        return out
    total = fit.total.bytes
    # 1. Free the GPU of the other processes and keep the target.
    held = fit.tenants or ([Tenant(None, "other processes (no process list in the evidence)",
                                   total - fit.free.bytes, fit.free.source)] if fit.free and others_hold else [])
    if held and fit.free:
        after = fit.free.bytes + sum(t.bytes for t in held)
        if keep * total <= after and fit.holds(keep):
            who = "; ".join(t.describe() for t in held[:3])
            out.append(Recommendation(
                "other_gpu_processes", ", ".join(t.short() for t in held[:3]), "none",
                f"{blocking} Stop {who} (not this server's, so recovery will not) and keep gpu_memory_utilization "
                f"{keep:g}: with it gone {gib(fit.free.bytes, 2)} + {gib(sum(t.bytes for t in held), 2)} = "
                f"{gib(after, 2)} is free, at least the {gib(keep * total, 2)} the target asks for, and "
                f"{fit.check(keep, brief=True)}.", "incident", manual=True))
    # 2. Another GPU.
    card = math.ceil(need / keep / GiB)
    out.append(Recommendation(
        "gpu", f"this GPU: {gib(fit.free.bytes, 2)} free of {gib(total, 2)}" if fit.free else "this GPU",
        f"{'a GPU' if fit.tp == 1 else f'{fit.tp} GPUs each'} with at least {card} GiB free",
        (f"{blocking} " if not out else "") + f"Or move the server: at gpu_memory_utilization {keep:g} a GPU with "
        f"{card} GiB free gives {keep:g} x {card} GiB = {gib(keep * card * GiB)}, at least what it needs: "
        f"{fit.need_text(brief=True)}" + ("; add the KV cache it should hold" if fit.kv_one_seq is None else "")
        + ".",
        "incident", manual=True))
    # 3. A quantised checkpoint, 4. more tensor parallelism: on this GPU as it is.
    now = fit.util_free_now()
    if now is None or now < MIN_AS_IS_UTIL:
        return out
    current = fit.dtype_bytes or 2.0
    for name, size in QUANT_OPTIONS:
        if size >= current:
            continue
        q_weights = int(fit.weights.bytes * size / current)
        q_need = need - fit.weights.bytes + q_weights
        if q_need <= fit.budget(now):
            out.append(Recommendation(
                "checkpoint", f"{fit.model or 'the model'} ({_quant_now(fit)})", f"{_a(name)} checkpoint of it",
                f"Or serve {_a(name)} checkpoint on this GPU as it is: weights {gib(fit.weights.bytes)} x "
                f"{size:g}/{current:g} bytes per parameter = {gib(q_weights)}; gpu_memory_utilization {now:g} "
                f"(what is free, less {FREE_MARGIN:.0%} of the card) gives {fit.budget_text(now)}, "
                f"{gib(fit.budget(now) - q_need)} more than the {gib(q_need)} it needs"
                + ("" if fit.kv_one_seq else "; check the KV cache it should hold fits that") + ".",
                "incident", manual=True))
            break
    for tp in TP_OPTIONS:
        if tp <= fit.tp:
            continue
        t_need = fit.need(tp=tp)
        if t_need is not None and t_need <= fit.budget(now):
            out.append(Recommendation(
                "tensor_parallel_gpus", fit.tp, tp,
                f"Or shard it over {tp} GPUs (--tensor-parallel-size {tp}), this one as it is among them: "
                f"{gib(fit.weights.bytes * fit.tp)} of weights / {tp} = {gib(fit.weights.bytes * fit.tp / tp)} per "
                f"GPU; gpu_memory_utilization {now:g} "
                f"gives {fit.budget_text(now)} on each, {gib(fit.budget(now) - t_need)} more than the {gib(t_need)} "
                "it needs (every GPU must have that much free).", "incident", manual=True))
            break
    return out


def _a(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _quant_now(fit: Fit) -> str:
    return (fit.dtype_text or "16-bit (assumed)").split(" (")[0]


# --- helpers -------------------------------------------------------------------------------------

def _first_with(records: Iterable[Evidence], key: str) -> Evidence | None:
    return next((r for r in records if r.fields.get(key)), None)


def _str(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value.strip() else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _frac(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1 else None
