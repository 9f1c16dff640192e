"""A plan as text (for a person) and as `triage.plan/v1` JSON (for a pipeline)."""
from __future__ import annotations

from typing import Any

from ..model import Recommendation
from .plan import FAILS_BURST, FAILS_STARTUP, FITS, TIGHT, VERDICT_TEXT, Figure, Outcome, Plan, gib

SCHEMA = "triage.plan/v1"


def headline(plan: Plan) -> str:
    o = plan.outcome
    text = VERDICT_TEXT[o.verdict]
    if o.verdict == FAILS_BURST and o.burst:
        text += f" of {o.burst[0]:,} x {o.burst[1]:,}"
    return text


def _amount(fig: Figure) -> str:
    if fig.unit == "bytes":
        if abs(fig.value) >= 1 << 30:
            return gib(fig.value)
        return f"{fig.value / (1 << 20):.2f} MiB" if abs(fig.value) >= 1 << 20 else f"{int(fig.value):,} bytes"
    if fig.unit == "x":
        return f"{fig.value:.2f}x"
    return f"{int(fig.value):,} {fig.unit}"


def _rec_line(rec: Recommendation) -> str:
    if rec.manual:
        return f"{rec.setting}: {rec.to_value} (by hand) - {rec.why}"
    return f"{rec.setting} {rec.from_value} -> {rec.to_value}: {rec.why}"


def text_lines(plan: Plan) -> list[str]:
    """The plan as paragraphs: each a line to be wrapped with a hanging indent."""
    o, shape = plan.outcome, plan.shape
    lines = [f"{shape.name} on {o.gpu.name} ({gib(o.gpu.memory)}), {plan.sizing.label}"]
    if o.gpu.note:
        lines.append(f"note: {o.gpu.note}")
    lines.append(f"verdict: {headline(plan)}" + (f" (burst OOM likelihood {o.risk.likelihood})" if o.risk else ""))
    lines += [f"  - {r}" for r in o.reasons]
    lines.append("")
    lines.append("memory per GPU (computed from config.json, or estimated with the basis shown):")
    for fig in o.figures.values():
        lines.append(f"  {_amount(fig)}  {fig.label} ({'estimated' if fig.estimated else 'computed'}; {fig.basis})")
    if plan.recommendations:
        lines += ["", "recommendations:"] + [f"  - {_rec_line(r)}" for r in plan.recommendations]
    if plan.alternatives:
        lines += ["", "alternatives that fit, best first (each alone, checked by sizing the plan again):"]
        lines += [f"  - {a.setting} {a.from_value} -> {a.to_value}{' (by hand)' if a.manual else ''}: "
                  f"{_SHORT[a.verdict]}; {a.arithmetic}" for a in plan.alternatives]
    lines += ["", "command:", f"  {plan.command}", "", "assumptions:"] + [f"  - {a}" for a in plan.assumptions]
    lines += ["", "GPU table (these flags on a GPU of its own; the GPU's own defaults where a flag is not given):"]
    lines += table(plan)
    lines.append("  max_model_len: the longest sequence the KV cache holds; max_num_seqs: sequences of "
                 f"{int(o.value('max_model_len')):,} tokens at once; * memory estimated")
    runs, fits = plan.smallest_runs, plan.smallest_fits
    lines.append(f"  smallest GPU it runs on (starts, survives a burst): {runs.name if runs else 'none of the table'}")
    lines.append(f"  smallest GPU it fits (no burst fills the KV cache): {fits.name if fits else 'none of the table'}")
    return lines


def table(plan: Plan) -> list[str]:
    """The GPU table, one row a GPU (printed as it is: 79 columns, never wrapped)."""
    rows = [("GPU", "GiB", "verdict", "KV tokens", "max_model_len", "max_num_seqs")]
    for r in plan.rows:
        rows.append((f"{r.gpu.name}{'*' if r.gpu.estimated else ''}", f"{r.gpu.memory / (1 << 30):.2f}",
                     _SHORT[r.verdict], f"{r.capacity:,}", f"{r.longest:,}", f"{r.max_num_seqs_supported:,}"))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return [TABLE_ROW + "  ".join(row[i].ljust(widths[i]) if i in (0, 2) else row[i].rjust(widths[i])
                                  for i in range(6)).rstrip() for row in rows]


#: Marks a line the text renderer prints as it is (a table row), never wrapped.
TABLE_ROW = "\x00"
_SHORT = {FITS: "fits", TIGHT: "tight", FAILS_STARTUP: "fails at start-up", FAILS_BURST: "fails in a burst"}


def to_json(plan: Plan) -> dict[str, Any]:
    o, shape = plan.outcome, plan.shape
    return {
        "schema": SCHEMA,
        "model": {"name": shape.name, "config": shape.source, "architecture": shape.architecture,
                  "model_type": shape.model_type, "parameters": _params(plan), "layers": shape.layers,
                  "attention": _attention(plan), "kv_heads": shape.kv_heads, "head_dim": shape.head_dim,
                  "max_position_embeddings": shape.max_position, "vision_encoder": shape.vision is not None,
                  "experts": shape.moe.experts if shape.moe else None,
                  "quantization": shape.quant.text if shape.quant else None},
        "gpu": {"name": o.gpu.name, "memory_bytes": o.gpu.memory, "source": o.gpu.source,
                "estimated": o.gpu.estimated, "nvidia_smi_mib": o.gpu.smi_mib, "note": o.gpu.note or None},
        "engine": {"name": plan.sizing.engine, "version": plan.sizing.version, "sizing": plan.sizing.label,
                   "sized_as": plan.sizing.release.version if plan.sizing.release else None,
                   "sources": dict(plan.sizing.sources)},
        "settings": {k: {"value": v, "origin": why} for k, (v, why) in o.settings.items()} | _flags(plan),
        "figures": {f.key: {"value": f.value, "unit": f.unit, "label": "estimated" if f.estimated else "computed",
                            "what": f.label, "basis": f.basis} for f in o.figures.values()},
        "verdict": {"result": o.verdict, "text": headline(plan), "reasons": list(o.reasons),
                    "burst": {"sequences": o.burst[0], "tokens": o.burst[1]} if o.burst else None,
                    "burst_likelihood": o.risk.likelihood if o.risk else None,
                    "burst_arithmetic": o.risk.arithmetic if o.risk else None,
                    "refused_by_engine": list(o.refused),
                    "fails": o.verdict in (FAILS_STARTUP, FAILS_BURST)},
        "recommendations": [{"setting": r.setting, "from": r.from_value, "to": r.to_value, "why": r.why,
                             "basis": r.basis, "manual": r.manual} for r in plan.recommendations],
        "alternatives": [{"setting": a.setting, "from": a.from_value, "to": a.to_value, "verdict": a.verdict,
                          "kv_tokens": a.kv_tokens, "arithmetic": a.arithmetic, "manual": a.manual}
                         for a in plan.alternatives],
        "command": plan.command,
        "assumptions": list(plan.assumptions),
        "gpus": [_row(r, plan) for r in plan.rows],
        "smallest_gpu_it_runs_on": plan.smallest_runs.name if plan.smallest_runs else None,
        "smallest_gpu_it_fits": plan.smallest_fits.name if plan.smallest_fits else None,
    }


def _flags(plan: Plan) -> dict[str, dict[str, Any]]:
    r = plan.request
    return {name: {"value": value, "origin": flag} for name, value, flag in (
        ("tensor_parallel_size", r.tp, "--tp"), ("pipeline_parallel_size", r.pp, "--pp"),
        ("dtype", r.dtype or "auto", "--dtype"), ("kv_cache_dtype", r.kv_cache_dtype or "auto", "--kv-cache-dtype"),
        ("quantization", r.quantization, "--quantization"), ("enforce_eager", r.enforce_eager, "--enforce-eager"),
        ("other_tenants_bytes", r.tenants, "--other-tenants-bytes"),
        ("flashinfer_sampler", r.flashinfer_sampler, "--flashinfer-sampler"))}


def _row(r: Outcome, plan: Plan) -> dict[str, Any]:
    return {"name": r.gpu.name, "class_gb": r.gpu.class_gb, "memory_bytes": r.gpu.memory,
            "memory_estimated": r.gpu.estimated, "verdict": r.verdict, "kv_cache_bytes": max(r.pool, 0),
            "kv_tokens": r.capacity, "max_model_len": r.longest, "max_num_seqs": r.max_num_seqs_supported}


def _params(plan: Plan) -> int:
    from ..memory.weights import count

    return count(plan.shape).total


def _attention(plan: Plan) -> str:
    s = plan.shape
    if s.mla:
        return "MLA"
    kinds = set(s.layer_kinds)
    base = "MHA" if s.kv_heads == s.heads else "MQA" if s.kv_heads == 1 else "GQA"
    extra = [k for k in ("sliding", "chunked", "linear", "mamba") if k in kinds]
    return base + (f" + {', '.join(extra)}" if extra else "")
