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
from .model import OomClass, Recommendation, Verdict
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
    changes_launch = [r for r in verdict.recommendations
                      if r.env or (r.to_value is not None and r.setting in _FLAGS.get(ctx.engine, {}))]
    if changes_launch and ctx.engine in _FLAGS:
        verdict.command = build_command(ctx, verdict.recommendations)


_RUNBOOKS = {OomClass.STARTUP: "startup", OomClass.BURST: "burst", OomClass.CHRONIC: "chronic",
             OomClass.PREFIX_CACHE: "prefix_cache"}


def _not_gpu_runbook(causes: set[str]) -> str:
    return "host_oom" if "host_oom" in causes else "gpu_fault"


# --- per class -------------------------------------------------------------------------------

def _startup(ctx: Context, causes: set[str]) -> list[Recommendation]:
    out: list[Recommendation] = []
    util = _float(_current(ctx, "gpu_memory_utilization"))
    if "kv_cache_blowout" in causes:
        out.append(_max_model_len(ctx))
    free_low = ctx.ev.first(Kind.FREE_MEMORY_LOW)
    if free_low and free_low.fields.get("free_bytes") and free_low.fields.get("total_bytes"):
        share = free_low.fields["free_bytes"] / free_low.fields["total_bytes"]
        target = math.floor((share - 0.02) * 100) / 100
        cur = free_low.fields.get("gpu_memory_utilization") or util
        if "other_processes" in causes:
            holders = [p for p in ctx.ev.of(Kind.GPU_PROCESS) if p.fields.get("used_bytes")]
            who = ", ".join(f"PID {p.fields.get('pid')} ({p.fields.get('name')})" for p in holders[:3])
            out.append(Recommendation("gpu_memory_utilization", cur, max(0.05, min(target, 0.9)),
                                      f"only {share:.0%} of the GPU was free at start-up; first free the GPU"
                                      + (f" ({who} hold memory)" if who else " (another process holds the rest)")
                                      + " and keep the setting; lower it to this only if weights and KV cache fit "
                                        "in what is free", "incident"))
        else:
            out.append(Recommendation("gpu_memory_utilization", cur, min(target, 0.9),
                                      f"{share:.1%} of the card was free at start-up; the target must stay below "
                                      "that (2 points of margin)", "incident"))
    if "concurrency_misjudged" in causes:
        warm = ctx.ev.first(Kind.WARMUP_OOM)
        setting = (warm.fields.get("setting") if warm else None) or "max_num_seqs"
        cur = _int(_current(ctx, setting)) or (warm.fields.get("dummy_requests") or warm.fields.get("tokens") if warm else None)
        if cur and cur >= 2:
            new = cur // 2
            out.append(Recommendation(setting, cur, new, f"the start-up warm-up for {setting}={cur} did not fit; halve it "
                                      "(the sampler's warm-up allocates per sequence)", "incident"))
    if "model_too_large" in causes:
        tp = _int(_current(ctx, "tensor_parallel_size")) or 1
        out.append(Recommendation("tensor_parallel_size", tp, tp * 2, "the weights do not fit one card's budget: shard "
                                  "them over twice the GPUs (or serve a quantised checkpoint: AWQ/GPTQ int4 is about "
                                  "1/4 of fp16 weights, FP8 about 1/2)", "rule_of_thumb"))
    graphs = ctx.ev.first(Kind.GRAPH_CAPTURE)
    frames = ctx.frames_near(ctx.primary) if ctx.primary else []
    if any(f[2] in ("capture_model", "_capture_cudagraphs", "capture") for f in frames):
        out.append(Recommendation("enforce_eager", _current(ctx, "enforce_eager") or False, True,
                                  "the OOM hit during CUDA graph capture; eager mode gives back the graph memory "
                                  "(1-3 GiB per GPU)" + (f", {graphs.fields.get('graph_bytes')} bytes here" if graphs else ""),
                                  "rule_of_thumb"))
    if not out and ctx.primary is not None:
        if util is None or util > 0.85:
            out.append(Recommendation("gpu_memory_utilization", util, 0.85,
                                      "rule of thumb for an unexplained start-up OOM: leave 15% for the CUDA context, "
                                      "NCCL and activation peaks", "rule_of_thumb"))
    return out


def _max_model_len(ctx: Context) -> Recommendation:
    rec = ctx.ev.first(Kind.KV_CACHE_INSUFFICIENT)
    cur = _int(_current(ctx, "max_model_len")) or (rec.fields.get("max_model_len") if rec else None)
    if rec and rec.fields.get("estimated_max_model_len"):
        new = int(rec.fields["estimated_max_model_len"])
        why = f"vLLM computed that at most {new} tokens fit the KV cache it had"
        return Recommendation("max_model_len", cur, new, why + "; set it to your real P99 prompt+response if lower",
                              "incident")
    if rec and rec.fields.get("needed_bytes") and rec.fields.get("available_bytes") and cur:
        new = int(cur * rec.fields["available_bytes"] / rec.fields["needed_bytes"]) // ctx.block_size * ctx.block_size
        return Recommendation("max_model_len", cur, new,
                              f"the KV cache it had holds {rec.fields['available_bytes'] / rec.fields['needed_bytes']:.0%} "
                              f"of what max_model_len={cur} needs (computed from the error's own numbers)", "incident")
    from .flowchart.causes import kv_tokens

    cap = kv_tokens(ctx)
    if cap:
        new = cap[0] // ctx.block_size * ctx.block_size
        return Recommendation("max_model_len", cur, new, f"the KV cache held {cap[0]} tokens (logged at "
                              f"{cap[1][0].where}); one request of max_model_len must fit", "incident")
    return Recommendation("max_model_len", cur, None, "cap it at the real P99 of prompt+response length", "rule_of_thumb")


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
    running = max((s.fields.get("running") or 0 for s in stats[-6:]), default=0)
    cur_seqs = _int(_current(ctx, "max_num_seqs"))
    if running >= 4:
        new = 2 ** int(math.log2(running * 0.75))     # a power of two below the concurrency that failed
        if new < running and (cur_seqs is None or new < cur_seqs):
            out.append(Recommendation("max_num_seqs", cur_seqs, new,
                                      f"up to {int(running)} requests were running in the minute before it failed; cap "
                                      "concurrency below that (and rate-limit per pod at the gateway)", "incident"))
    elif cur_seqs and cur_seqs > 128:
        out.append(Recommendation("max_num_seqs", cur_seqs, 128, "vLLM's default concurrency is optimistic; match the "
                                  "real peak behind the load balancer", "rule_of_thumb"))
    if ctx.engine == "vllm" and ctx.engine_mode != "v1" and not ctx.arg("enable_chunked_prefill"):
        out.append(Recommendation("enable_chunked_prefill", False, True, "split long prefills so one huge prompt cannot "
                                  "claim a whole step's activation memory", "rule_of_thumb"))
    return out


def _chronic(ctx: Context, verdict: Verdict, causes: set[str]) -> list[Recommendation]:
    out = []
    if "allocator_fragmentation" in causes or "memory_leak" not in causes:
        out.append(Recommendation("PYTORCH_CUDA_ALLOC_CONF", None, "expandable_segments:True",
                                  "lets the caching allocator grow segments instead of leaving unusable split blocks "
                                  "(optionally add garbage_collection_threshold:0.8)",
                                  "incident" if "allocator_fragmentation" in causes else "rule_of_thumb", env=True))
    leak = next((c for c in verdict.causes if c.id == "memory_leak"), None)
    hours = _hours_to_exhaustion(ctx, leak) if leak else None
    if hours is not None:
        every = max(1, int(hours * 0.5))
        out.append(Recommendation("scheduled_restart_hours", None, every,
                                  f"memory grows steadily and would fill the card about {hours:.0f} h after a restart; "
                                  "restart gracefully (drain first) at half that until the leak is fixed", "incident"))
    return out


def _hours_to_exhaustion(ctx: Context, leak) -> float | None:
    """From the leak's first and last GPU readings: hours from the first reading until the card is full."""
    if len(leak.evidence) < 2:
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
    return (total - used0) / rate


def _prefix_cache(ctx: Context, causes: set[str]) -> list[Recommendation]:
    out: list[Recommendation] = []
    hit = next((c for c in ctx.ev.of(Kind.STATS) if c.fields.get("prefix_hit_rate") is not None), None)
    out.append(Recommendation("enable_prefix_caching", True, False,
                              "the prefix cache holds blocks that are rarely reused; turn it off while the hit rate "
                              "is below 30% (it pays off for shared system prompts, >60% hit rate)",
                              "incident" if hit else "rule_of_thumb"))
    cur = _int(_current(ctx, "max_num_seqs"))
    if cur and cur > 256:
        out.append(Recommendation("max_num_seqs", cur, cur // 2, "halve the concurrency cap so live sequences keep "
                                  "their KV blocks", "rule_of_thumb"))
    return out


def _discrepancy(ctx: Context, verdict: Verdict) -> list[Recommendation]:
    from .flowchart.causes import actual_usage, engine_budget

    budget, actual = engine_budget(ctx), actual_usage(ctx)
    if budget is None or actual is None:
        return []
    gap = actual[0] - budget[0]
    new = math.floor((budget[0] - gap - 0.01) * 100) / 100
    return [Recommendation("gpu_memory_utilization", budget[0], max(0.5, new),
                           f"the card was {gap * 100:.1f} points fuller than the engine's budget; take that (and a "
                           "point of margin) off the budget until the accounting is fixed", "incident")]


def _upgrade(ctx: Context, oom_class: str) -> list[Recommendation]:
    out = []
    for bug, _ in matching_bugs(ctx, oom_class):
        if bug.fixed_in:
            out.append(Recommendation("engine_version", ctx.version, bug.fixed_in,
                                      f"{bug.title} ({bug.id}; {bug.source})", "knowledge_base"))
    return out[:1]


# --- command line ----------------------------------------------------------------------------

def build_command(ctx: Context, recs: list[Recommendation]) -> str | None:
    """The launch command with only the recommended settings changed."""
    argv = list(ctx.argv) if ctx.argv else _argv_from_args(ctx)
    if argv is None:
        return None
    argv, env = apply_changes(argv, recs, ctx.engine, ctx.version, ctx.engine_mode)
    cmd = " ".join(shlex.quote(a) for a in argv)
    return " ".join([f"{k}={v}" for k, v in env.items()] + [cmd]) if env else cmd


def apply_changes(argv: list[str], recs: list[Recommendation], engine: str = "vllm", version: str | None = None,
                  engine_mode: str | None = None) -> tuple[list[str], dict[str, str]]:
    """`argv` with the recommended flags set (nothing else touched), and the environment to add.

    Used on the launch line read from the logs and, by recovery, on the running server's own
    command line (which may be a wrapper such as `python -m vllm.entrypoints.openai.api_server`)."""
    flags = _FLAGS.get(engine, _FLAGS["vllm"])
    argv = list(argv)
    env: dict[str, str] = {}
    for rec in recs:
        if rec.env:
            env[rec.setting] = str(rec.to_value)
            continue
        if rec.setting == "engine_version" or rec.to_value is None:
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


def _argv_from_args(ctx: Context) -> list[str] | None:
    model = ctx.arg("model", "model_path", "model_id")
    if not model:
        return None
    engine = ctx.engine
    if engine == "sglang":
        argv = ["python", "-m", "sglang.launch_server", "--model-path", str(model)]
    elif engine == "tgi":
        argv = ["text-generation-launcher", "--model-id", str(model)]
    elif engine == "lmdeploy":
        argv = ["lmdeploy", "serve", "api_server", str(model)]
    elif engine == "trtllm":
        argv = ["trtllm-serve", str(model)]
    elif engine == "llama.cpp":
        argv = ["llama-server", "--model", str(model)]
    elif engine != "vllm":
        return None
    else:
        argv = ["vllm", "serve", str(model)]
    for setting, flag in _FLAGS[engine].items():
        name = _ALIASES.get(engine, {}).get(setting, setting)
        val = ctx.args.get(name)
        if val in (None, "None", False) or setting in ("enable_prefix_caching", "enable_chunked_prefill"):
            continue
        if setting == "tensor_parallel_size" and val == 1:
            continue
        argv += [flag] if val is True else [flag, _fmt(val)]
    if engine == "vllm" and ctx.args.get("enable_prefix_caching") is True and version_tuple(ctx.version or "0") < (0, 8, 0):
        argv.append("--enable-prefix-caching")
    return argv


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
    out = [a for a in argv if a != flag]
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

