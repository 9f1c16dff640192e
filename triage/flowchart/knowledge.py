"""The known-bug knowledge base (triage/data/known_bugs.yaml): version ranges as data."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..evidence.kinds import Kind
from ..model import Evidence

DATA = Path(__file__).resolve().parent.parent / "data" / "known_bugs.yaml"
_MM_MODEL = re.compile(r"(?:vl\b|-vl-|vision|llava|pixtral|mllama|image|multimodal|-mm-|qwen2?\.?5?-?vl|internvl|minicpm-v)", re.I)


@dataclass(frozen=True)
class Bug:
    id: str
    engine: str
    title: str
    affected: str
    fixed_in: str | None
    requires: tuple[str, ...]
    classes: tuple[str, ...]
    effect: str
    source: str


@lru_cache(maxsize=1)
def load_bugs(path: Path = DATA) -> tuple[Bug, ...]:
    import yaml  # lazily: only verdicts that reach this check pay for it

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    bugs = []
    for i, item in enumerate(raw):
        unknown = set(item) - {"id", "engine", "title", "affected", "fixed_in", "requires", "classes", "effect", "source"}
        if unknown:
            raise ValueError(f"{path.name}[{i}]: unknown key(s) {sorted(unknown)}")
        bugs.append(Bug(item["id"], item["engine"], item["title"], str(item["affected"]),
                        str(item["fixed_in"]) if item.get("fixed_in") else None, tuple(item.get("requires", [])),
                        tuple(item.get("classes", [])), item.get("effect", ""), item.get("source", "")))
    return tuple(bugs)


def version_tuple(text: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", text.split("+")[0])
    return tuple(int(n) for n in nums[:3]) + (0,) * (3 - min(3, len(nums)))


def in_range(version: str, spec: str) -> bool:
    v = version_tuple(version)
    for part in spec.split(","):
        m = re.match(r"\s*(>=|<=|==|>|<)\s*([\w.]+)\s*$", part)
        if not m:
            return False
        op, bound = m.group(1), version_tuple(m.group(2))
        ok = {">=": v >= bound, "<=": v <= bound, "==": v == bound, ">": v > bound, "<": v < bound}[op]
        if not ok:
            return False
    return True


def matching_bugs(ctx, oom_class: str | None = None) -> list[tuple[Bug, Evidence | None]]:
    if not ctx.version:
        return []
    version_rec = ctx.ev.first(Kind.ENGINE_VERSION) or next(
        (r for r in ctx.launch if r.fields.get("version")), None)
    out = []
    for bug in load_bugs():
        if bug.engine != ctx.engine or not in_range(ctx.version, bug.affected):
            continue
        if oom_class is not None and bug.classes and oom_class not in bug.classes:
            continue
        if all(_condition(ctx, req) for req in bug.requires):
            out.append((bug, version_rec))
    return out


def _condition(ctx, req: str) -> bool:
    if req == "multimodal":
        args = ctx.args
        if args.get("limit_mm_per_prompt") or args.get("mm_processor_kwargs") not in (None, "None", {}):
            return True
        return bool(_MM_MODEL.search(str(args.get("model") or args.get("served_model_name") or "")))
    if req == "prefix_caching":
        return prefix_caching_enabled(ctx) is True
    return False


def has_hit_rate(ctx) -> bool:
    """Whether the evidence reports a prefix-cache hit rate at all (stats lines or /metrics)."""
    return any(s.fields.get("prefix_hit_rate") is not None for s in ctx.ev.of(Kind.STATS)) or any(
        m.fields.get("name") == "prefix_cache_hit_rate" for m in ctx.ev.of(Kind.METRIC))


def prefix_caching_opted_in(ctx) -> bool:
    """The operator turned prefix caching on (rather than the engine defaulting to it, as V1 does).

    The command line and 'non-default args' say so directly; vLLM's argparse Namespace defaults
    the flag to False (V0) or None (V1), so True there was set too; V0 never enables it alone."""
    if ctx.explicit_args.get("enable_prefix_caching") is True:
        return True
    for rec in ctx.launch:
        if rec.fields.get("origin") == "argparse namespace" and (rec.fields.get("args") or {}).get("enable_prefix_caching") is True:
            return True
    return ctx.engine_mode == "v0" and ctx.args.get("enable_prefix_caching") is True


def prefix_caching_enabled(ctx) -> bool | None:
    """True/False when the evidence says, None when it does not."""
    if ctx.engine == "sglang":
        # SGLang's radix (prefix) cache is on unless --disable-radix-cache.
        return not bool(ctx.args.get("disable_radix_cache"))
    val = ctx.args.get("enable_prefix_caching")
    if isinstance(val, bool):
        return val
    if isinstance(val, str) and val in ("True", "False"):
        return val == "True"
    for rec in ctx.ev.of(Kind.METRIC):
        if rec.fields.get("name") == "prefix_cache_hit_rate" and rec.fields.get("value") is not None:
            return rec.fields["value"] >= 0    # V0 reports -1 when prefix caching is off
        if rec.fields.get("name") == "cache_config" and "enable_prefix_caching" in (rec.fields.get("labels") or {}):
            return rec.fields["labels"]["enable_prefix_caching"] == "True"
    if any(s.fields.get("prefix_hit_rate") is not None and s.fields.get("engine") == "vllm"
           and ctx.engine_mode == "v0" for s in ctx.ev.of(Kind.STATS)):
        return True   # V0 prints the hit-rate line only when prefix caching is on
    return None
