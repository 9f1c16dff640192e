"""Sub-causes shared by several classes: why the memory ran out. Each detector is a pure function
of the context, and each cause has a spec (its id, title and the thresholds it is judged by) that
the class specs list. A class module asks for the ones that apply to it; causes only one class
names live in that class's module. Every cause cites the records it rests on; none is inferred
from the absence of evidence.
"""
from __future__ import annotations

from typing import Callable

from ..budget import engine_budget as _budget
from ..classes.base import CauseSpec
from ..evidence.kinds import Kind
from ..model import Cause, Evidence, EvidenceSet
from ..thresholds import (CONCURRENCY_CAP_SHARE, DEFAULT_UTIL, DISCREPANCY, OTHER_PROCESS_SHARE,
                          OVERSHOOT_FREE_SHARE, UTIL_NO_HEADROOM, WEIGHTS_BUDGET_MARGIN)
from ..units import format_bytes
from . import knowledge
from .context import Context

Detector = Callable[[Context], "Cause | None"]

DISCREPANCY_THRESHOLD = DISCREPANCY
GiB = 1 << 30

KV_CACHE_BLOWOUT = CauseSpec("kv_cache_blowout", "max_model_len exceeds what the KV cache holds")
CONFIG_OVERSHOOT = CauseSpec("config_overshoot", "the utilisation target asks for more than is free",
                             ("overshoot_free_share", "util_no_headroom"))
OTHER_PROCESSES = CauseSpec("other_processes", "other processes hold GPU memory", ("other_process_share",))
MODEL_TOO_LARGE = CauseSpec("model_too_large", "the model does not fit at this precision and parallelism",
                            ("weights_budget_margin", "default_util"))
CONCURRENCY_MISJUDGED = CauseSpec("concurrency_misjudged", "too many sequences or batched tokens for the memory",
                                  ("concurrency_cap_share",))
ACCOUNTING_DISCREPANCY = CauseSpec("accounting_discrepancy", "the card is fuller than the engine's accounting",
                                   ("discrepancy",))
KNOWN_ENGINE_BUG = CauseSpec("known_engine_bug", "a known engine bug in this version")


def kv_cache_blowout(ctx: Context) -> Cause | None:
    """max_model_len larger than the KV cache can hold for even one request."""
    rec = ctx.ev.first(Kind.KV_CACHE_INSUFFICIENT)
    if rec:
        f = rec.fields
        if f.get("needed_bytes"):
            detail = (f"max_model_len={f['max_model_len']} needs {format_bytes(f['needed_bytes'])} of KV cache, "
                      f"only {format_bytes(f['available_bytes'])} is available")
        else:
            detail = f"max_model_len={f['max_model_len']} but the KV cache holds {f.get('kv_tokens')} tokens"
        return Cause("kv_cache_blowout", "KV-cache blowout: max_model_len exceeds what the KV cache holds", (rec,), detail)
    # Derived: the logged KV capacity cannot hold one request of max_model_len.
    capacity = kv_tokens(ctx)
    max_len = ctx.arg("max_model_len")
    conc = ctx.ev.first(Kind.MAX_CONCURRENCY)
    if conc and conc.fields.get("concurrency") is not None and conc.fields["concurrency"] < 1.0:
        return Cause("kv_cache_blowout", "KV-cache blowout: max_model_len exceeds what the KV cache holds", (conc,),
                     f"maximum concurrency {conc.fields['concurrency']}x for {conc.fields['tokens_per_request']} tokens: "
                     "not even one request of max_model_len fits")
    if capacity and isinstance(max_len, int) and capacity[0] < max_len:
        return Cause("kv_cache_blowout", "KV-cache blowout: max_model_len exceeds what the KV cache holds",
                     tuple(capacity[1]), f"the KV cache holds {capacity[0]} tokens < max_model_len={max_len}")
    return None


def kv_tokens(ctx: Context) -> tuple[int, list[Evidence]] | None:
    """KV-cache capacity in tokens, from the log (blocks x block size, or stated tokens)."""
    for rec in ctx.ev.of(Kind.KV_CAPACITY):
        if rec.fields.get("kv_tokens"):
            return int(rec.fields["kv_tokens"]), [rec]
        if rec.fields.get("blocks") is not None:
            return int(rec.fields["blocks"]) * ctx.block_size, [rec]
    return None


def config_overshoot(ctx: Context) -> Cause | None:
    """The utilisation target asks for more than the card really has free (driver, context, sidecars)."""
    rec = ctx.ev.first(Kind.FREE_MEMORY_LOW)
    if rec and rec.fields.get("free_bytes") and rec.fields.get("total_bytes"):
        free_share = rec.fields["free_bytes"] / rec.fields["total_bytes"]
        if free_share >= OVERSHOOT_FREE_SHARE:   # nothing big holds the GPU: the target itself is too high
            return Cause("config_overshoot", "Configuration overshoot: gpu_memory_utilization above what is free",
                         (rec,), f"{rec.fields['gpu_memory_utilization']} of {format_bytes(rec.fields['total_bytes'])} "
                                 f"requested, {format_bytes(rec.fields['free_bytes'])} free at start-up")
    util = ctx.arg("gpu_memory_utilization")
    if isinstance(util, (int, float)) and util >= UTIL_NO_HEADROOM and ctx.primary is not None:
        return Cause("config_overshoot", "Configuration overshoot: gpu_memory_utilization leaves no headroom",
                     tuple(ctx.launch[:1]), f"gpu_memory_utilization={util} leaves under 5% for the CUDA context, "
                                            "NCCL, sidecars and activation spikes")
    return None


def other_processes(ctx: Context) -> Cause | None:
    """Another process holds GPU memory the engine's budget assumed was free."""
    rec = ctx.ev.first(Kind.FREE_MEMORY_LOW)
    if rec and rec.fields.get("free_bytes") and rec.fields.get("total_bytes"):
        held = rec.fields["total_bytes"] - rec.fields["free_bytes"]
        if held / rec.fields["total_bytes"] >= OTHER_PROCESS_SHARE:
            return Cause("other_processes", "Other processes hold GPU memory", (rec,),
                         f"{format_bytes(held)} of {format_bytes(rec.fields['total_bytes'])} was in use before the "
                         "engine started")
    procs = ctx.ev.of(Kind.GPU_PROCESS)
    engine_like = ("vllm", "VLLM::", "python", "sglang", "text-generation")
    strangers = [p for p in procs if not any(s.lower() in str(p.fields.get("name", "")).lower() for s in engine_like[:2])]
    if len(procs) >= 2 and strangers:
        big = [p for p in strangers if (p.fields.get("used_bytes") or 0) >= GiB]
        if big:
            return Cause("other_processes", "Other processes hold GPU memory", tuple(big[:3]),
                         ", ".join(f"PID {p.fields.get('pid')} ({p.fields.get('name')}) "
                                   f"{format_bytes(p.fields.get('used_bytes'))}" for p in big[:3]))
    oom = ctx.primary
    if oom and oom.kind == Kind.TORCH_OOM.value and oom.fields.get("self_bytes") and oom.fields.get("other_processes"):
        others = [p for p in oom.fields["other_processes"] if p["bytes"] >= GiB]
        if others:
            return Cause("other_processes", "Other processes hold GPU memory", (oom,),
                         ", ".join(f"PID {p['pid']} holds {format_bytes(p['bytes'])}" for p in others[:3]))
    return None


def model_too_large(ctx: Context) -> Cause | None:
    """Weights (+ activations) do not fit the card at this precision/parallelism."""
    rec = ctx.ev.first(Kind.LOAD_MODEL_OOM)
    if rec:
        return Cause("model_too_large", "The model does not fit: weight loading ran out of GPU memory", (rec,))
    oom = ctx.primary
    if oom is not None:
        from .frames import frames

        loading = [f for f in ctx.frames_near(oom) if frames().loads_weights(f)]
        if loading:
            return Cause("model_too_large", "The model does not fit: out of memory while loading weights",
                         (oom,), f"failed in {loading[-1][2]}")
    weights = ctx.ev.first(Kind.WEIGHTS_LOADED)
    total = ctx.gpu_total_bytes
    util = ctx.arg("gpu_memory_utilization")
    if weights and total and weights.fields.get("weights_bytes"):
        share = weights.fields["weights_bytes"] / total
        budget = float(util) if isinstance(util, (int, float)) else DEFAULT_UTIL
        if share >= budget - WEIGHTS_BUDGET_MARGIN and ctx.ev.has(Kind.NO_CACHE_BLOCKS, Kind.KV_CACHE_INSUFFICIENT, Kind.TORCH_OOM):
            return Cause("model_too_large", "The model barely fits: weights fill the memory budget", (weights,),
                         f"weights {format_bytes(weights.fields['weights_bytes'])} = {share:.0%} of the card")
    return None


def concurrency_misjudged(ctx: Context) -> Cause | None:
    """Too many sequences or batched tokens for the memory that is really there."""
    rec = ctx.ev.first(Kind.WARMUP_OOM)
    if rec:
        setting = rec.fields.get("setting", "max_num_seqs")
        n = rec.fields.get("dummy_requests") or rec.fields.get("tokens")
        return Cause("concurrency_misjudged", f"Concurrency misjudged: the warm-up for {setting}={n} does not fit",
                     (rec,), f"{setting}={n} was more than the memory left after weights and KV cache")
    max_seqs = ctx.arg("max_num_seqs", "max_running_requests")
    stats = ctx.last_before(Kind.STATS.value, ctx.primary)
    if isinstance(max_seqs, int) and stats:
        running = max((s.fields.get("running") or 0) for s in stats[-5:])
        if running and running >= CONCURRENCY_CAP_SHARE * max_seqs and max_seqs >= 128:
            return Cause("concurrency_misjudged", "Concurrency misjudged: running requests hit max_num_seqs",
                         tuple(stats[-1:]), f"{int(running)} requests running with max_num_seqs={max_seqs}")
    return None


def accounting_discrepancy(ctx: Context) -> Cause | None:
    """The card is fuller than the engine's own accounting allows.

    vLLM sizes everything it allocates (weights, activations, the KV pool) to fit
    gpu_memory_utilization x total; NVML / nvidia-smi count everything on the card. Used memory
    above that budget by more than 3 points is memory the engine does not see (CUDA context,
    NCCL, multi-modal encoders, fragmentation, leaks, other tenants) - the headroom it believes
    it has is not there.
    """
    budget = engine_budget(ctx.ev)
    actual = actual_usage(ctx.ev)
    if budget is None or actual is None:
        return None
    gap = actual[0] - budget[0]
    if gap > DISCREPANCY_THRESHOLD:
        return Cause("accounting_discrepancy",
                     f"Accounting discrepancy: GPU {actual[0]:.1%} used (nvidia-smi/NVML) vs the engine's "
                     f"{budget[0]:.0%} budget", tuple(e for e in (budget[1], actual[1]) if e is not None),
                     f"{gap * 100:.1f} points of GPU memory outside the engine's accounting "
                     f"(alert threshold {DISCREPANCY_THRESHOLD:.0%})")
    return None


def engine_budget(ev: EvidenceSet) -> tuple[float, Evidence | None] | None:
    """gpu_memory_utilization and the record that states it (triage.budget: one reading for all)."""
    return _budget(ev)


def actual_usage(ev: EvidenceSet) -> tuple[float, Evidence] | None:
    """The highest used/total share of any GPU reading (nvidia-smi, NVML, DCGM)."""
    best = None
    for rec in ev.of(Kind.GPU_MEMORY):
        used, total = rec.fields.get("used_bytes"), rec.fields.get("total_bytes")
        if used and total:
            share = used / total
            if best is None or share > best[0]:
                best = (share, rec)
    return best


def bug_readings(ctx: Context) -> dict[str, Callable[[], bool]]:
    """The known-bug conditions this module reads for knowledge.matching_bugs."""
    return {"other_processes": lambda: other_processes(ctx) is not None}


def known_engine_bug(ctx: Context, oom_class: str | None = None) -> Cause | None:
    hits = knowledge.matching_bugs(ctx, oom_class, bug_readings(ctx))
    if not hits:
        return None
    # A confirmed bug first; a write-up's report is named only when no confirmed one applies.
    bug, rec = sorted(hits, key=lambda h: not h[0].confirmed)[0]
    if not bug.confirmed:
        return Cause("known_engine_bug", f"Reported engine issue, unconfirmed upstream: {bug.title} "
                                         f"({ctx.engine} {ctx.version})", (rec,) if rec else (),
                     f"{bug.id}: {bug.effect}; reported for {bug.affected}; source: {bug.source} (no upstream issue, "
                     "PR or release confirms it: check before acting on it)")
    fix = f"fixed in {bug.fixed_in}" if bug.fixed_in else "no fixed release yet"
    workaround = f"; workaround: {bug.workaround}" if bug.workaround else ""
    return Cause("known_engine_bug", f"Known engine bug: {bug.title} ({ctx.engine} {ctx.version})",
                 (rec,) if rec else (), f"{bug.id}: {bug.effect}; affects {bug.affected}; {fix}; "
                                       f"source: {bug.source}{workaround}")


DETECTORS: dict[str, Detector] = {
    KV_CACHE_BLOWOUT.id: kv_cache_blowout,
    CONFIG_OVERSHOOT.id: config_overshoot,
    OTHER_PROCESSES.id: other_processes,
    MODEL_TOO_LARGE.id: model_too_large,
    CONCURRENCY_MISJUDGED.id: concurrency_misjudged,
    ACCOUNTING_DISCREPANCY.id: accounting_discrepancy,
}


def detect(ctx: Context, *specs: CauseSpec, oom_class: str | None = None) -> list[Cause]:
    """The shared causes found, in the order asked; a known bug is looked up for `oom_class`."""
    out = []
    for spec in specs:
        cause = known_engine_bug(ctx, oom_class) if spec is KNOWN_ENGINE_BUG else DETECTORS[spec.id](ctx)
        if cause is not None:
            out.append(cause)
    return out
