"""The numbers a reader (or a bot) wants next to the verdict, each from the evidence."""
from __future__ import annotations

from typing import Any

from ..evidence.kinds import Kind
from ..report import iso
from .causes import kv_tokens
from .context import Context
from .knowledge import prefix_caching_enabled

SCHEMA_ENGINES = ("vllm", "sglang", "tgi", "lmdeploy", "unknown")
_ARG_FACTS = ("model", "max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
              "tensor_parallel_size", "enable_prefix_caching", "enforce_eager", "block_size", "kv_cache_dtype",
              "quantization", "mem_fraction_static", "max_running_requests", "max_batch_prefill_tokens")


def collect_facts(ctx: Context) -> dict[str, Any]:
    # facts.engine keeps the schema's vocabulary; other engines are named in engine_name.
    engine = ctx.engine if ctx.engine in SCHEMA_ENGINES else "unknown"
    facts: dict[str, Any] = {"engine": engine, "engine_version": ctx.version, "engine_mode": ctx.engine_mode}
    if engine != ctx.engine:
        facts["engine_name"] = ctx.engine
    if ctx.gpu_total_bytes:
        facts["gpu_total_bytes"] = ctx.gpu_total_bytes
    launch = {k: ctx.args[k] for k in _ARG_FACTS if ctx.args.get(k) not in (None, "None")}
    if launch:
        facts["launch_args"] = launch
    if ctx.argv:
        facts["argv"] = ctx.argv
    cap = kv_tokens(ctx)
    if cap:
        facts["kv_cache_tokens"] = cap[0]
    weights = ctx.ev.first(Kind.WEIGHTS_LOADED)
    if weights:
        facts["weights_bytes"] = weights.fields.get("weights_bytes")
    pc = prefix_caching_enabled(ctx)
    if pc is not None:
        facts["prefix_caching"] = pc
    oom = ctx.primary
    if oom is not None:
        facts["failure"] = {"kind": oom.kind, "at": oom.where, "time": iso(oom.time)}
        for key in ("tried_bytes", "free_bytes", "capacity_bytes", "allocated_bytes", "reserved_unallocated_bytes"):
            if oom.fields.get(key) is not None:
                facts["failure"][key] = oom.fields[key]
        if oom.fields.get("uptime_s") is not None:
            facts["failure"]["uptime_s"] = oom.fields["uptime_s"]
    stats = ctx.last_before(Kind.STATS.value, oom)
    if stats:
        last = stats[-1].fields
        facts["last_stats"] = {k: last[k] for k in ("running", "waiting", "kv_usage", "prefix_hit_rate", "preemptions")
                               if last.get(k) is not None}
    facts["inputs"] = [{"source": s.path, "parser": s.kind, "records": s.records,
                        **({"time_note": s.time_note} if s.time_note else {}),
                        **({"error": s.error} if s.error else {})} for s in ctx.ev.sources]
    return facts
