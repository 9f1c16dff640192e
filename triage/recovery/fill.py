"""Runbook texts with the verdict's values filled in.

A runbook's summary, step titles, `verify` texts and manual instructions may name a value of the
verdict with a placeholder: `{name}`, or `{name|fallback}` where the verdict may have no such value.
The plan shows the text with the value rendered ("every 6 h (the leak fills the card ~13 h after a
restart)"), or the fallback, which must read on its own ("at an interval you pick from the GPU-memory
trend: the evidence gives no leak rate"). The names are the closed set in PLACEHOLDERS; an unknown
name, a stray brace, or a placeholder that may be missing without a fallback is a runbook error
when the file is loaded, so no plan ever shows a template.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..model import Recommendation, Verdict

FIELD = re.compile(r"\{([a-z_]+)(?:\|([^{}|]*))?\}")
#: The step texts that may hold placeholders (besides the runbook's summary).
STEP_TEXTS = ("title", "verify")
PARAM_TEXTS = ("instruction",)

DEFAULT_FREE_SHARE = 0.9
#: Engines whose gpu_memory_utilization counterpart is a share of the whole card; lmdeploy's and
#: TensorRT-LLM's are shares of the memory left after the weights, so no free share follows from them.
_CARD_SHARE_ENGINES = (None, "vllm", "sglang", "tgi", "unknown", "mistral.rs")
_UTIL_NAMES = ("gpu_memory_utilization", "mem_fraction_static", "cuda_memory_fraction")


@dataclass(frozen=True)
class Placeholder:
    name: str
    doc: str
    render: Callable[[Verdict | None, Any], str | None]
    always: bool = False          # always has a value: no fallback needed


# --- values ------------------------------------------------------------------------------------

def launch_recs(verdict: Verdict | None) -> list[Recommendation]:
    """The changes a relaunch makes (not the steps for a person)."""
    if verdict is None:
        return []
    from ..advice import launch_changes

    return launch_changes(verdict)


def _rec(verdict: Verdict | None, setting: str, launch: bool = True) -> Recommendation | None:
    pool = launch_recs(verdict) if launch else (verdict.recommendations if verdict else [])
    return next((r for r in pool if r.setting == setting and r.to_value is not None), None)


def _current(verdict: Verdict | None, *names: str) -> Any:
    args = (verdict.facts.get("launch_args") or {}) if verdict else {}
    return next((args[n] for n in names if args.get(n) not in (None, "None")), None)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def relaunch_target(verdict: Verdict | None) -> tuple[float, str] | None:
    """The share of the card the relaunch takes: the verdict's new gpu_memory_utilization, else the
    one the server ran with; None when neither is known (or the engine's setting is no card share)."""
    if verdict is None:
        return None
    engine = verdict.facts.get("engine_name") or verdict.facts.get("engine")
    if engine not in _CARD_SHARE_ENGINES:
        return None
    rec = _rec(verdict, "gpu_memory_utilization")
    if rec is not None and _number(rec.to_value) and 0 < rec.to_value <= 1:
        return float(rec.to_value), f"the relaunch's new gpu_memory_utilization {rec.to_value:g}"
    cur = _number(_current(verdict, *_UTIL_NAMES))
    if cur and 0 < cur <= 1:
        return cur, f"the relaunch keeps gpu_memory_utilization {cur:g}"
    return None


def min_free_share(params: Any, verdict: Verdict | None) -> tuple[float, str, bool]:
    """(share of the GPU that must be free, why, strict). A number in the runbook is a fixed share,
    checked strictly (no compute process at all on the GPU); `target` is the relaunch's own
    gpu_memory_utilization, the share vLLM itself will insist is free, with vLLM's default 0.9
    where the verdict gives none."""
    raw = params.get("min_free_share", DEFAULT_FREE_SHARE) if params is not None else DEFAULT_FREE_SHARE
    if not isinstance(raw, str):
        return float(raw), "the runbook's fixed share", True
    target = relaunch_target(verdict)
    if target is not None:
        return target[0], target[1], False
    return DEFAULT_FREE_SHARE, (f"vLLM's default gpu_memory_utilization {DEFAULT_FREE_SHARE:g}: the verdict and the "
                                "launch give none"), False


def _restart_schedule(verdict: Verdict | None, step: Any) -> str | None:
    rec = _rec(verdict, "scheduled_restart_hours", launch=False)
    if rec is None:
        return None
    growth = verdict.facts.get("memory_growth") or {}
    full = growth.get("hours_to_full")
    return f"every {rec.to_value:g} h" + (f" (the leak fills the card ~{full:.0f} h after a restart)" if full else "")


def _setting(name: str, unit: str) -> Callable[[Verdict | None, Any], str | None]:
    def render(verdict: Verdict | None, step: Any) -> str | None:
        rec = _rec(verdict, name)
        if rec is not None:
            return f"{rec.to_value} {unit} (the relaunch's {name}, {rec.from_value} before)" if rec.from_value \
                is not None else f"{rec.to_value} {unit} (the relaunch's {name})"
        cur = _current(verdict, name)
        return f"{cur} {unit} (the server's {name})" if cur is not None else None
    return render


def _util(verdict: Verdict | None, step: Any) -> str | None:
    target = relaunch_target(verdict)
    return f"{target[0]:g} ({target[1].replace('the relaunch', 'as the relaunch')})" if target else None


def _changes(verdict: Verdict | None, step: Any) -> str | None:
    recs = launch_recs(verdict)
    if not recs:
        return None
    return "the verdict's changes (" + ", ".join(
        f"{r.setting}={r.to_value}" if r.env else f"{r.setting} {r.from_value if r.from_value is not None else 'unset'}"
        f" -> {r.to_value}" for r in recs) + ")"


def _free_share(verdict: Verdict | None, step: Any) -> str:
    share, why, strict = min_free_share(getattr(step, "params", None), verdict)
    return f"{share:.0%} of the GPU ({why})" + (", and no compute process on it" if strict else "")


PLACEHOLDERS: dict[str, Placeholder] = {p.name: p for p in (
    Placeholder("scheduled_restart_hours", "the restart interval a chronic leak's verdict gives, with the time the "
                "leak takes to fill the card", _restart_schedule),
    Placeholder("max_num_seqs", "the relaunch's concurrency cap (else the server's), as requests", _setting(
        "max_num_seqs", "concurrent requests")),
    Placeholder("max_model_len", "the relaunch's maximum model length (else the server's), in tokens", _setting(
        "max_model_len", "tokens")),
    Placeholder("max_num_batched_tokens", "the relaunch's tokens per forward pass (else the server's)", _setting(
        "max_num_batched_tokens", "tokens per step")),
    Placeholder("gpu_memory_utilization", "the share of the card the relaunch takes", _util),
    Placeholder("changes", "the launch changes the relaunch makes, as `setting old -> new`", _changes),
    Placeholder("min_free_share", "the free share the gpu-free check requires, and why", _free_share, always=True),
)}


# --- validation and rendering --------------------------------------------------------------------

def problems(text: str) -> list[str]:
    """What is wrong with the placeholders of one runbook text (empty: nothing)."""
    out = []
    for m in FIELD.finditer(text):
        name, fallback = m.group(1), m.group(2)
        if name not in PLACEHOLDERS:
            out.append(f"unknown placeholder {{{name}}} (known: {', '.join(sorted(PLACEHOLDERS))})")
        elif fallback is None and not PLACEHOLDERS[name].always:
            out.append(f"placeholder {{{name}}} needs a fallback for a verdict without that value: "
                       f"{{{name}|text that reads on its own}}")
        elif fallback is not None and not fallback.strip():
            out.append(f"placeholder {{{name}|}} has an empty fallback")
    rest = FIELD.sub("", text)
    if "{" in rest or "}" in rest:
        out.append("a brace that is not a placeholder ({name} or {name|fallback}; runbook texts have no literal "
                   "braces)")
    return out


def render(text: str, verdict: Verdict | None, step: Any = None) -> str:
    def one(m: re.Match) -> str:
        name, fallback = m.group(1), m.group(2)
        holder = PLACEHOLDERS.get(name)
        value = holder.render(verdict, step) if holder else None
        if value is not None:
            return str(value)
        return fallback.strip() if fallback is not None else "(not in the verdict)"
    return FIELD.sub(one, text)


def render_step(step, verdict: Verdict | None):
    """The step with its texts filled in (`min_free_share: target` stays a word: the check resolves
    it from the same verdict, and knows from it that processes sized around may stay)."""
    changes: dict[str, Any] = {key: render(getattr(step, key), verdict, step) for key in STEP_TEXTS}
    params = dict(step.params)
    for key in PARAM_TEXTS:
        if isinstance(params.get(key), str):
            params[key] = render(params[key], verdict, step)
    return dataclasses.replace(step, params=params, **changes)


def render_runbook(book, verdict: Verdict | None):
    return dataclasses.replace(book, summary=render(book.summary, verdict),
                               steps=tuple(render_step(s, verdict) for s in book.steps))
