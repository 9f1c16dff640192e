"""Verdict + launch arguments -> concrete setting changes and a ready command line.

Numbers come from the incident when it has them (vLLM's estimated maximum model length, the KV
capacity it logged, the free memory it measured, the concurrency it was running); otherwise
from the rules of thumb in the OOM flowchart, labelled as such. Flags are checked against the
engine version at hand: `--no-enable-prefix-caching` only where it exists, never flags that
blog posts invented.
"""
from __future__ import annotations

import math
import shlex
from typing import Any

from .evidence.kinds import Kind
from .flowchart.context import Context
from .flowchart.knowledge import matching_bugs, version_tuple
from .fit import Fit, gather, gib
from .fit import options as fit_options
from .launch import rebuild
from .model import OomClass, Recommendation, Verdict
from .thresholds import DEFAULT_UTIL, FREE_MARGIN, KV_BUSY, WARMUP_MARGIN
from .units import as_int, finite_float, whole

GiB = 1 << 30

# Rule of thumb (flowchart.md): --max-num-batched-tokens by GPU memory.
_BATCHED_TOKENS = ((30 * GiB, 4096), (50 * GiB, 8192), (10 ** 15, 16384))

# Engine flags by setting name; None = the engine has no such knob.
_FLAGS = {
    "vllm": {"max_model_len": "--max-model-len", "gpu_memory_utilization": "--gpu-memory-utilization",
             "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
             "enforce_eager": "--enforce-eager", "tensor_parallel_size": "--tensor-parallel-size",
             "enable_chunked_prefill": "--enable-chunked-prefill", "enable_prefix_caching": "--enable-prefix-caching",
             "cpu_offload_gb": "--cpu-offload-gb"},
    "sglang": {"max_model_len": "--context-length", "gpu_memory_utilization": "--mem-fraction-static",
               "max_num_seqs": "--max-running-requests", "max_num_batched_tokens": "--chunked-prefill-size",
               "enable_prefix_caching": "--disable-radix-cache", "tensor_parallel_size": "--tp-size",
               "enforce_eager": "--disable-cuda-graph"},
    "tgi": {"max_model_len": "--max-total-tokens", "gpu_memory_utilization": "--cuda-memory-fraction",
            "max_num_batched_tokens": "--max-batch-prefill-tokens", "tensor_parallel_size": "--num-shard"},
    # lmdeploy: --cache-max-entry-count is the share of *free* memory (after the weights) for the KV cache.
    "lmdeploy": {"max_model_len": "--session-len", "gpu_memory_utilization": "--cache-max-entry-count",
                 "max_num_seqs": "--max-batch-size", "max_num_batched_tokens": "--max-prefill-token-num",
                 "tensor_parallel_size": "--tp"},
    # trtllm-serve: the KV cache takes this share of the memory left after weights and buffers.
    "trtllm": {"max_model_len": "--max_seq_len", "gpu_memory_utilization": "--kv_cache_free_gpu_memory_fraction",
               "max_num_seqs": "--max_batch_size", "max_num_batched_tokens": "--max_num_tokens",
               "tensor_parallel_size": "--tp_size"},
    # llama.cpp / llama-server: the context is shared by the parallel slots; -ngl sets the GPU layers.
    "llama.cpp": {"max_model_len": "--ctx-size", "max_num_seqs": "--parallel", "max_num_batched_tokens": "--batch-size"},
    "mistral.rs": {"max_model_len": "--pa-ctxt-len", "gpu_memory_utilization": "--pa-gpu-mem-usage",
                   "max_num_seqs": "--max-seqs"},
}
# Settings as the engine itself names them in its logged config.
_ALIASES = {"sglang": {"gpu_memory_utilization": "mem_fraction_static", "max_num_seqs": "max_running_requests",
                       "max_model_len": "context_length", "tensor_parallel_size": "tp_size"},
            "tgi": {"max_num_batched_tokens": "max_batch_prefill_tokens", "max_model_len": "max_total_tokens",
                    "gpu_memory_utilization": "cuda_memory_fraction", "tensor_parallel_size": "num_shard"},
            "lmdeploy": {"gpu_memory_utilization": "cache_max_entry_count", "max_model_len": "session_len",
                         "max_num_seqs": "max_batch_size", "max_num_batched_tokens": "max_prefill_token_num",
                         "tensor_parallel_size": "tp"},
            "trtllm": {"gpu_memory_utilization": "kv_cache_free_gpu_memory_fraction", "max_model_len": "max_seq_len",
                       "max_num_seqs": "max_batch_size", "max_num_batched_tokens": "max_num_tokens",
                       "tensor_parallel_size": "tp_size"},
            "llama.cpp": {"max_model_len": "n_ctx", "max_num_seqs": "n_parallel", "max_num_batched_tokens": "n_batch"}}


def advise(verdict: Verdict, ctx: Context) -> None:
    recs: list[Recommendation] = []
    causes = {c.id for c in verdict.causes}
    cls = verdict.oom_class
    if cls is OomClass.STARTUP:
        recs += _startup(ctx, causes)
    elif cls is OomClass.BURST:
        recs += _burst(ctx, causes)
    elif cls is OomClass.CHRONIC:
        recs += _chronic(ctx, verdict, causes)
    elif cls is OomClass.PREFIX_CACHE:
        recs += _prefix_cache(ctx, causes)
    if "accounting_discrepancy" in causes and cls in (OomClass.BURST, OomClass.STARTUP, OomClass.CHRONIC):
        recs += _discrepancy(ctx, verdict)
    if "known_engine_bug" in causes:
        recs += _upgrade(ctx, cls.value)
    verdict.recommendations = _dedupe(recs)
    verdict.runbook = _RUNBOOKS.get(cls) if cls not in (OomClass.NOT_GPU_OOM,) else _not_gpu_runbook(causes)
    _attach_launch(verdict, ctx)


def _attach_launch(verdict: Verdict, ctx: Context) -> None:
    """The whole launch rebuilt from the evidence (facts.argv, facts.launch) and, for a class
    recovery relaunches, the new command: every argument kept, only the advised ones changed."""
    if ctx.engine not in _FLAGS:
        return
    rebuilt = rebuild(ctx.launch, ctx.engine, ctx.version, ctx.engine_mode)
    if rebuilt is None:
        return
    verdict.facts["argv"] = list(rebuilt.argv)
    verdict.facts["launch"] = rebuilt.as_fact()
    if verdict.oom_class in _RUNBOOKS:
        argv, env = apply_changes(rebuilt.argv, verdict.recommendations, ctx.engine, ctx.version, ctx.engine_mode)
        cmd = shlex.join(argv)
        verdict.command = " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [cmd]) if env else cmd


_RUNBOOKS = {OomClass.STARTUP: "startup", OomClass.BURST: "burst", OomClass.CHRONIC: "chronic",
             OomClass.PREFIX_CACHE: "prefix_cache"}


def _not_gpu_runbook(causes: set[str]) -> str:
    return "host_oom" if "host_oom" in causes else "gpu_fault"


# --- per class -------------------------------------------------------------------------------
# Every recommendation's `why` states the basis of its number: the incident's own records (cited
# source:line), the fit arithmetic of triage/fit.py, or a rule of thumb named as such.

def _startup(ctx: Context, causes: set[str]) -> list[Recommendation]:
    out: list[Recommendation] = []
    fit = gather(ctx)
    util = _float(_current(ctx, "gpu_memory_utilization"))
    if "kv_cache_blowout" in causes:
        out.append(_max_model_len(ctx))
    free_low = ctx.ev.first(Kind.FREE_MEMORY_LOW)
    if free_low and free_low.fields.get("free_bytes") and free_low.fields.get("total_bytes"):
        out += _free_memory_low(ctx, fit, free_low, util, causes)
    if "concurrency_misjudged" in causes:
        cut = _warmup_cut(ctx)
        if cut:
            out.append(cut)
    if "model_too_large" in causes:
        out += _too_large(fit)
    frames = ctx.frames_near(ctx.primary) if ctx.primary else []
    if any(f[2] in ("capture_model", "_capture_cudagraphs", "capture") for f in frames):
        if fit.graphs:
            why, basis = (f"the OOM hit during CUDA graph capture; eager mode gives back the graph memory: "
                          f"{fit.graphs.describe()}"), "incident"
        else:
            why, basis = ("the OOM hit during CUDA graph capture; eager mode gives back the graph memory (1-3 GiB per "
                          "GPU by the write-ups' rule of thumb; the log gives no graph size)"), "rule_of_thumb"
        out.append(Recommendation("enforce_eager", _current(ctx, "enforce_eager") or False, True, why, basis))
    if not out and ctx.primary is not None and (util is None or util > 0.85):
        if fit.holds(0.85) is not False:
            out.append(Recommendation("gpu_memory_utilization", util, 0.85,
                                      "rule of thumb for an unexplained start-up OOM: leave 15% for the CUDA context, "
                                      f"NCCL and activation peaks; {fit.check(0.85)}", "rule_of_thumb"))
        elif fit.holds(util or DEFAULT_UTIL) is False:
            out += fit_options(fit, f"The server does not fit this GPU: {fit.check(util or DEFAULT_UTIL)}.")
    return out


def _free_memory_low(ctx: Context, fit: Fit, rec, util: float | None, causes: set[str]) -> list[Recommendation]:
    """vLLM's start-up check: less free than the target asks. A lower target only where its budget
    still holds the server; otherwise what fits instead (free the GPU, another GPU, ...)."""
    free, total = rec.fields["free_bytes"], rec.fields["total_bytes"]
    share = free / total
    cur = rec.fields.get("gpu_memory_utilization") or util
    target = min(fit.util_free_now() or 0.0, DEFAULT_UTIL)
    said = f"{share:.1%} of the card ({gib(free, 2)} of {gib(total, 2)}) was free at start-up ({rec.where})"
    holders = [f"PID {t.pid} ({t.name}) holds {gib(t.bytes)} ({t.where})" for t in fit.tenants[:3]]
    if target < 0.05 or fit.holds(target) is False:
        need = fit.need()
        blocking = (f"No gpu_memory_utilization fits this GPU as it is: {said}, and the most a target can take, "
                    f"{target:g} (what is free less {FREE_MARGIN:.0%} of the card), gives "
                    f"{gib(fit.budget(target), 2)}" + (f", less than what the server needs: {fit.need_text()}"
                                                        f"{fit.unknown_text()}." if need else "."))
        recs = fit_options(fit, blocking, others_hold="other_processes" in causes)
        if recs:
            return recs
        return [Recommendation("other_gpu_processes", "; ".join(holders) or f"{gib(total - free)} held",
                               "none", blocking + " Free the GPU (or move the server to another one) and keep "
                               f"gpu_memory_utilization {cur}.", "incident", manual=True)]
    if "other_processes" in causes:
        why = (f"only {said}" + (f"; {', '.join(holders)}" if holders else "; other processes held the rest")
               + f". {target:g} is what is free less {FREE_MARGIN:.0%} of the card: {fit.check(target)}. Freeing the "
               f"GPU and keeping {cur} instead gives the server more KV cache")
    else:
        why = (f"{said}; the target must stay below that ({FREE_MARGIN:.0%} of the card as margin): "
               f"{fit.check(target)}")
    return [Recommendation("gpu_memory_utilization", cur, target, why, "incident")]


def _warmup_cut(ctx: Context) -> Recommendation | None:
    """A warm-up that did not fit (vLLM's sampler with max_num_seqs dummy requests, TGI's prefill
    with max_batch_prefill_tokens), sized from its own failed allocation: bytes per unit, then the
    units that fit in what was free, less a margin."""
    warm = ctx.ev.first(Kind.WARMUP_OOM)
    setting = (warm.fields.get("setting") if warm else None) or "max_num_seqs"
    units = (warm.fields.get("dummy_requests") or warm.fields.get("tokens")) if warm else None
    cur = _int(_current(ctx, setting)) or units
    if not cur or cur < 2:
        return None
    units = units or cur
    oom = _oom_before(ctx, warm)
    unit = "sequence" if setting == "max_num_seqs" else "token"
    if oom is not None:
        tried, free = oom.fields["tried_bytes"], oom.fields["free_bytes"]
        per = tried / units
        fits = free / per
        new = int(fits * (1 - WARMUP_MARGIN))
        if 1 <= new < cur:
            return Recommendation(setting, cur, new, (
                f"the start-up warm-up for {setting}={units} tried to allocate {gib(tried, 2)} with {gib(free, 2)} "
                f"free ({oom.where}): {per / (1 << 20):.2f} MiB per {unit}, so {int(fits)} fit in what was free; {new} "
                f"keeps {WARMUP_MARGIN:.0%} of it as margin (the warm-up allocates more than this one tensor)"), "incident")
    return Recommendation(setting, cur, cur // 2, (
        f"the start-up warm-up for {setting}={cur} did not fit and the log gives no allocation to size it from (a "
        "torch OOM with 'Tried to allocate ... free'): halve it (rule of thumb; the warm-up allocates per "
        f"{unit})"), "rule_of_thumb")


def _oom_before(ctx: Context, warm):
    """The torch OOM (with its request and free bytes) that the warm-up failure reports."""
    ooms = [o for o in ctx.ev.of(Kind.TORCH_OOM) if o.fields.get("tried_bytes") and o.fields.get("free_bytes")]
    if warm is not None:
        near = [o for o in ooms if o.source == warm.source and o.seq < warm.seq]
        if near:
            return near[-1]
    return ooms[0] if ooms and warm is not None else None


def _too_large(fit: Fit) -> list[Recommendation]:
    """The weights do not fit: the smallest tensor parallelism whose per-GPU share fits the budget."""
    util = fit.util or DEFAULT_UTIL
    if fit.weights and fit.total:
        for tp in (fit.tp * 2, fit.tp * 4, fit.tp * 8):
            if fit.holds(util, tp=tp):
                return [Recommendation("tensor_parallel_size", fit.tp, tp, (
                    f"at tensor_parallel_size {fit.tp} {fit.check(util)}; over {tp} GPUs each needs "
                    f"{gib(fit.need(tp=tp))} ({fit.need_text(tp=tp)}), within {fit.budget_text(util)}"), "incident")]
        need = fit.need() or 0
        return fit_options(fit, f"The model does not fit: {fit.check(util)}, and not over {fit.tp * 8} GPUs either "
                                f"({gib(need * fit.tp / (fit.tp * 8))} per GPU).")
    return [Recommendation("tensor_parallel_size", fit.tp, fit.tp * 2, (
        "the weights do not fit one card's budget and their size is not in the evidence (no 'Model loading took' "
        "line, no size in the model name): shard them over twice the GPUs (rule of thumb; or serve a quantised "
        "checkpoint: AWQ/GPTQ int4 is about 1/4 of fp16 weights, FP8 about 1/2)"), "rule_of_thumb")]


def _max_model_len(ctx: Context) -> Recommendation:
    rec = ctx.ev.first(Kind.KV_CACHE_INSUFFICIENT)
    cur = _int(_current(ctx, "max_model_len")) or (rec.fields.get("max_model_len") if rec else None)
    if rec and rec.fields.get("estimated_max_model_len"):
        new = int(rec.fields["estimated_max_model_len"])
        why = f"vLLM computed that at most {new} tokens fit the KV cache it had ({rec.where})"
        return Recommendation("max_model_len", cur, new, why + "; set it to your real P99 prompt+response if lower",
                              "incident")
    if rec and rec.fields.get("needed_bytes") and rec.fields.get("available_bytes") and cur:
        ratio = rec.fields["available_bytes"] / rec.fields["needed_bytes"]
        new = int(cur * ratio) // ctx.block_size * ctx.block_size
        return Recommendation("max_model_len", cur, new,
                              f"the KV cache it had, {gib(rec.fields['available_bytes'], 2)}, holds {ratio:.0%} of the "
                              f"{gib(rec.fields['needed_bytes'], 2)} max_model_len={cur} needs ({rec.where}): {cur} x "
                              f"{ratio:.3f}, down to a multiple of the {ctx.block_size}-token block", "incident")
    from .flowchart.causes import kv_tokens

    cap = kv_tokens(ctx)
    if cap:
        new = cap[0] // ctx.block_size * ctx.block_size
        return Recommendation("max_model_len", cur, new, f"the KV cache held {cap[0]} tokens (logged at "
                              f"{cap[1][0].where}); one request of max_model_len must fit", "incident")
    return Recommendation("max_model_len", cur, None, "cap it at the real P99 of prompt+response length (the evidence "
                          "gives no KV-cache size to compute it from)", "rule_of_thumb")


def _burst(ctx: Context, causes: set[str]) -> list[Recommendation]:
    out: list[Recommendation] = []
    total = ctx.gpu_total_bytes
    cur_tokens = _int(_current(ctx, "max_num_batched_tokens"))
    if total:
        # past the table's last row (a bogus total from a damaged log) the last row applies
        target = next((t for limit, t in _BATCHED_TOKENS if total <= limit), _BATCHED_TOKENS[-1][1])
        # Only ever lower it: with the current value unknown, the engine's default may be below the table.
        if cur_tokens is not None and cur_tokens > target:
            out.append(Recommendation("max_num_batched_tokens", cur_tokens, target,
                                      f"cap the tokens of one forward pass for a {total / GiB:.0f} GiB GPU "
                                      "(flowchart table: 24 GB -> 4096, 40 GB -> 8192, 80 GB -> 16384-24576)",
                                      "rule_of_thumb"))
    stats = ctx.last_before(Kind.STATS.value, ctx.primary)
    cur_seqs = _int(_current(ctx, "max_num_seqs"))
    cap = _kv_sized_cap(stats, cur_seqs, min_running=4)
    if cap:
        out.append(cap)
    elif not any(s.fields.get("running") for s in stats) and cur_seqs and cur_seqs > 128:
        out.append(Recommendation("max_num_seqs", cur_seqs, 128, "vLLM's default concurrency is optimistic and the "
                                  "log shows no running count to size it from: match the real peak behind the load "
                                  "balancer (rule of thumb: 128)", "rule_of_thumb"))
    if ctx.engine == "vllm" and ctx.engine_mode != "v1" and not ctx.arg("enable_chunked_prefill"):
        out.append(Recommendation("enable_chunked_prefill", False, True, "split long prefills so one huge prompt cannot "
                                  "claim a whole step's activation memory", "rule_of_thumb"))
    return out


def _kv_sized_cap(stats, cur: int | None, min_running: int = 1, kv_only: bool = False,
                  window: int | None = 6) -> Recommendation | None:
    """max_num_seqs from the concurrency the KV cache really carried: the busiest of the last
    `window` stats readings (None: of all before the failure), scaled so KV usage stays under
    KV_BUSY (the level the classifier already calls the cache the bottleneck). Without a KV reading
    (or one below KV_BUSY: the cache was not the limit), a quarter below the concurrency that
    failed, labelled a rule of thumb (`kv_only`: none)."""
    readings = [s for s in stats if s.fields.get("running")]
    if not readings:
        return None
    last = readings[-1]
    readings = readings[-window:] if window else readings
    # the busiest reading; of equally busy ones the fullest cache (the smaller, safer cap)
    peak = max(readings, key=lambda s: (s.fields["running"], s.fields.get("kv_usage") or 0))
    running, kv = int(peak.fields["running"]), peak.fields.get("kv_usage")
    if running < min_running:
        return None
    if kv is not None and kv >= KV_BUSY:
        new = math.floor(running * KV_BUSY / kv)
        then = ""
        if window is None and last is not peak:
            then = (f", the busiest it was before the failure (at the end {int(last.fields['running'])} ran at "
                    f"{(last.fields.get('kv_usage') or 0):.1%}: cached prefixes held the rest)")
        why, basis = (f"{running} running at {kv:.1%} KV-cache usage ({peak.where}){then}; {new} keeps KV usage "
                      f"under {KV_BUSY:.0%} ({running} x {KV_BUSY:.2f}/{kv:.3f}); rate-limit per pod at the gateway "
                      "to match"), "incident"
    elif kv_only:
        return None
    else:
        new = int(running * 0.75)
        seen = "no KV-cache usage in the stats" if kv is None else f"KV-cache usage only {kv:.0%}: the cache was not " \
                                                                    "the limit"
        why, basis = (f"{running} running when it failed ({peak.where}), {seen}; cap a quarter below that (rule of "
                      "thumb) and rate-limit per pod at the gateway"), "rule_of_thumb"
    if new < 1 or new >= running or (cur is not None and new >= cur):
        return None
    return Recommendation("max_num_seqs", cur, new, why, basis)


def _chronic(ctx: Context, verdict: Verdict, causes: set[str]) -> list[Recommendation]:
    out = []
    if "allocator_fragmentation" in causes or "memory_leak" not in causes:
        frag = next((c for c in verdict.causes if c.id == "allocator_fragmentation"), None)
        seen = f" ({frag.detail})" if frag and frag.detail else ""
        out.append(Recommendation("PYTORCH_CUDA_ALLOC_CONF", None, "expandable_segments:True",
                                  "lets the caching allocator grow segments instead of leaving unusable split blocks"
                                  f"{seen} (optionally add garbage_collection_threshold:0.8)",
                                  "incident" if "allocator_fragmentation" in causes else "rule_of_thumb", env=True))
    leak = next((c for c in verdict.causes if c.id == "memory_leak"), None)
    growth = _memory_growth(ctx, leak) if leak else None
    if growth is not None:
        hours = growth["hours_to_full"]
        every = max(1, int(hours * 0.5))
        verdict.facts["memory_growth"] = growth
        out.append(Recommendation("scheduled_restart_hours", None, every, (
            f"the leak fills the card about {hours:.0f} h after a restart: GPU memory rose "
            f"{gib(growth['bytes_per_hour'], 2)}/h with flat load (from {gib(growth['first_used_bytes'])} at "
            f"{growth['first']} to {gib(growth['last_used_bytes'])} at {growth['last']}, card "
            f"{gib(growth['total_bytes'])}); restart gracefully (drain first) at half that until the leak is fixed"),
            "incident", manual=True))
    return out


def _memory_growth(ctx: Context, leak) -> dict[str, Any] | None:
    """The leak's rate from its first and last GPU readings, and the hours until the card is full."""
    if leak is None or len(leak.evidence) < 2:
        return None
    first, last = leak.evidence[0], leak.evidence[-1]
    if first.time is None or last.time is None or last.time <= first.time:
        return None
    used0 = first.fields.get("used_bytes") or first.fields.get("in_use_bytes")
    used1 = last.fields.get("used_bytes") or last.fields.get("in_use_bytes")
    total = first.fields.get("total_bytes") or ctx.gpu_total_bytes
    if not (used0 and used1 and total) or used1 <= used0:
        return None
    rate = (used1 - used0) / ((last.time - first.time).total_seconds() / 3600)
    return {"bytes_per_hour": int(rate), "hours_to_full": round((total - used0) / rate, 1),
            "first": first.where, "last": last.where, "first_used_bytes": int(used0), "last_used_bytes": int(used1),
            "total_bytes": int(total)}


def _prefix_cache(ctx: Context, causes: set[str]) -> list[Recommendation]:
    out: list[Recommendation] = []
    hit = next((c for c in reversed(ctx.last_before(Kind.STATS.value, ctx.primary))
                if c.fields.get("prefix_hit_rate") is not None), None)
    seen = (f"the hit rate was {hit.fields['prefix_hit_rate']:.1%} ({hit.where}), " if hit else
            "the log shows no hit rate; ")
    out.append(Recommendation("enable_prefix_caching", True, False,
                              f"the prefix cache holds blocks that are rarely reused: {seen}turn it off while the hit "
                              "rate is below 30% (it pays off for shared system prompts, >60% hit rate)",
                              "incident" if hit else "rule_of_thumb"))
    cur = _int(_current(ctx, "max_num_seqs"))
    # A cap only where the live KV cache was full (otherwise turning the cache off is the fix), sized
    # from the busiest reading of the whole log: by the end, cached prefixes crowd live sequences out.
    cap = _kv_sized_cap(ctx.last_before(Kind.STATS.value, ctx.primary), cur, kv_only=True, window=None)
    if cap:
        out.append(cap)
    elif cur and cur > 256 and not any(s.fields.get("running") for s in ctx.ev.of(Kind.STATS)):
        out.append(Recommendation("max_num_seqs", cur, cur // 2, "halve the concurrency cap so live sequences keep "
                                  "their KV blocks (rule of thumb: the log shows no running count to size it from)",
                                  "rule_of_thumb"))
    return out


def _discrepancy(ctx: Context, verdict: Verdict) -> list[Recommendation]:
    from .flowchart.causes import actual_usage, engine_budget

    budget, actual = engine_budget(ctx), actual_usage(ctx)
    if budget is None or actual is None:
        return []
    gap = actual[0] - budget[0]
    new = max(0.5, math.floor((budget[0] - gap - 0.01) * 100) / 100)
    fit = gather(ctx)
    if fit.holds(new) is False:
        return []           # a budget that cannot hold the weights is no fix; the other advice stands
    where = f" ({actual[1].where} vs {budget[1].where})" if budget[1] is not None else f" ({actual[1].where})"
    return [Recommendation("gpu_memory_utilization", budget[0], new,
                           f"the card was {actual[0]:.1%} full against the engine's {budget[0]:.0%} budget{where}: "
                           f"{gap * 100:.1f} points it does not see; take that and a point of margin off the budget "
                           f"until the accounting is fixed ({budget[0]:g} - {gap:.3f} - 0.01); {fit.check(new)}",
                           "incident")]


def _upgrade(ctx: Context, oom_class: str) -> list[Recommendation]:
    out = []
    for bug, _ in matching_bugs(ctx, oom_class):
        if bug.fixed_in:
            out.append(Recommendation("engine_version", ctx.version, bug.fixed_in,
                                      f"{bug.title} ({bug.id}; {bug.source}); fixed in {bug.fixed_in}",
                                      "knowledge_base", manual=True))
    return out[:1]


# --- command line ----------------------------------------------------------------------------

def is_launch_change(rec: Recommendation, engine: str) -> bool:
    """True when a relaunch makes this change (a flag of the engine, or an environment variable);
    an upgrade or a restart schedule is a step for a person, never part of a command line."""
    if rec.to_value is None or getattr(rec, "manual", False):
        return False
    return rec.env or rec.setting in _FLAGS.get(engine, _FLAGS["vllm"])


def launch_changes(verdict: Verdict) -> list[Recommendation]:
    """The verdict's recommendations a relaunch makes, for the engine the verdict names."""
    engine = str(verdict.facts.get("engine_name") or verdict.facts.get("engine") or "vllm")
    return [r for r in verdict.recommendations if is_launch_change(r, engine)]


def apply_changes(argv: list[str], recs: list[Recommendation], engine: str = "vllm", version: str | None = None,
                  engine_mode: str | None = None) -> tuple[list[str], dict[str, str]]:
    """`argv` with the recommended flags set (nothing else touched), and the environment to add.

    Used on the launch line read from the logs and, by recovery, on the running server's own
    command line (which may be a wrapper such as `python -m vllm.entrypoints.openai.api_server`)."""
    flags = _FLAGS.get(engine, _FLAGS["vllm"])
    argv = list(argv)
    env: dict[str, str] = {}
    for rec in recs:
        if not is_launch_change(rec, engine):
            continue
        if rec.env:
            env[rec.setting] = str(rec.to_value)
            continue
        flag = flags.get(rec.setting)
        if flag is None:
            continue
        if rec.setting == "enable_prefix_caching":
            argv = _toggle_prefix_caching(argv, engine, version, engine_mode, bool(rec.to_value))
            continue
        if rec.setting == "enforce_eager" or rec.setting == "enable_chunked_prefill":
            argv = _set_bool(argv, flag, bool(rec.to_value))
            continue
        argv = _set_flag(argv, flag, _fmt(rec.to_value))
    return argv, env


def _toggle_prefix_caching(argv: list[str], engine: str, version: str | None, engine_mode: str | None,
                           on: bool) -> list[str]:
    argv = [a for a in argv if a not in ("--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-radix-cache")]
    if engine == "sglang":
        return argv if on else argv + ["--disable-radix-cache"]
    # vLLM <= 0.7: a store_true flag, off unless given. >= 0.8: BooleanOptionalAction, V1 defaults it on.
    old = version is not None and version_tuple(version) < (0, 8, 0) or (version is None and engine_mode == "v0")
    if on:
        return argv + ["--enable-prefix-caching"]
    return argv if old else argv + ["--no-enable-prefix-caching"]


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    for i, tok in enumerate(out):
        if tok == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if tok.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return out + [flag, value]


def _set_bool(argv: list[str], flag: str, on: bool) -> list[str]:
    # Both spellings go: a BooleanOptionalAction flag may be on the line as --no-<flag>.
    out = [a for a in argv if a not in (flag, "--no-" + flag[2:])]
    return out + [flag] if on else out


def _current(ctx: Context, setting: str) -> Any:
    name = _ALIASES.get(ctx.engine, {}).get(setting, setting)
    return ctx.arg(name, setting)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}".rstrip("0").rstrip(".") if v < 1 else str(v)
    return str(v)


def _float(v: Any) -> float | None:
    """A launch setting as a finite number (`0.9`, `"0.9"`); None for text, NaN, Inf, 1e999."""
    return finite_float(v) if isinstance(v, (int, float, str)) else None


def _int(v: Any) -> int | None:
    """A launch setting as a whole number (`8192`, `"8192"`, `8192.0`); None otherwise."""
    if isinstance(v, float):
        return as_int(v)
    return whole(v) if isinstance(v, (int, str)) else None


def _dedupe(recs: list[Recommendation]) -> list[Recommendation]:
    seen: dict[str, Recommendation] = {}
    for r in recs:
        if r.setting in seen:
            # Two reasons to lower the same setting: keep the more conservative value.
            old = seen[r.setting]
            if isinstance(r.to_value, (int, float)) and isinstance(old.to_value, (int, float)) and r.to_value < old.to_value:
                seen[r.setting] = r
            continue
        seen[r.setting] = r
    return list(seen.values())

