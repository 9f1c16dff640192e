"""Verdict + launch arguments -> concrete setting changes and a ready command line.

Each class module recommends for its own class (its `recommend`, from the incident's numbers
where it has them, else the flowchart's rules of thumb, labelled as such); a cause shared by
several classes (an accounting discrepancy, a known engine bug) adds its own advice here. Advice
reads the verdict and the `Incident` the flowchart handed over, never the classifier's working
state. Flags are checked against the engine version at hand: `--no-enable-prefix-caching` only
where it exists, never flags that blog posts invented (triage/data/engine_settings.yaml names
each engine's, launch_flags.yaml the versions).
"""
from __future__ import annotations

import math
import re
import shlex
from dataclasses import replace
from functools import lru_cache
from typing import Any, Callable

from .classes import compiled, registry, settings
from .classes.runbooks import runbook_for
from .fit import gather, model_config
from .flowchart.causes import ACCOUNTING_DISCREPANCY, KNOWN_ENGINE_BUG, actual_usage, engine_budget
from .flowchart.incident import Incident
from .flowchart.knowledge import in_range
from .launch import engine_flags, rebuild
from .lazyre import lazy
from .model import Recommendation, Verdict

MIN_DISCREPANCY_UTIL = 0.5   # a budget cut for an accounting gap never goes below this
MARGIN_POINT = 0.01          # and takes one point more than the gap


def advise(verdict: Verdict, incident: Incident) -> None:
    """The verdict's recommendations, runbook and (for a GPU OOM) relaunch command, in place."""
    module = registry().module(verdict.oom_class)
    recommend = getattr(module, "recommend", None)
    recs: list[Recommendation] = list(recommend(incident, verdict)) if recommend else []
    causes = [c.id for c in verdict.causes]
    for cause, advice in CAUSE_ADVICE.items():
        if cause in causes:
            recs += advice(incident, verdict)
    verdict.recommendations = _within_engine(_dedupe(recs), incident)
    verdict.runbook = runbook_for(verdict.oom_class.value, causes)
    _attach_launch(verdict, incident)


def _attach_launch(verdict: Verdict, incident: Incident) -> None:
    """The whole launch rebuilt from the evidence (facts.argv, facts.launch) and, for a GPU OOM
    (recovery relaunches it), the new command: every argument kept, only the advised ones changed."""
    if not settings.known_engine(incident.engine):
        return
    rebuilt = rebuild(incident.launch, incident.engine, incident.version, incident.engine_mode)
    if rebuilt is None:
        return
    verdict.facts["argv"] = list(rebuilt.argv)
    verdict.facts["launch"] = rebuilt.as_fact()
    if registry().spec(verdict.oom_class).gpu_oom:
        argv, env = apply_changes(rebuilt.argv, verdict.recommendations, incident.engine, incident.version,
                                  incident.engine_mode)
        cmd = shlex.join(argv)
        verdict.command = " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [cmd]) if env else cmd


# --- causes several classes share --------------------------------------------------------------

def _discrepancy(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """Take the memory the engine does not see (and a point) off its budget."""
    budget, actual = engine_budget(incident.ev), actual_usage(incident.ev)
    if budget is None or actual is None:
        return []
    gap = actual[0] - budget[0]
    new = max(MIN_DISCREPANCY_UTIL, math.floor((budget[0] - gap - MARGIN_POINT) * 100) / 100)
    fit = gather(incident)
    if fit.holds(new) is False:
        return []           # a budget that cannot hold the weights is no fix; the other advice stands
    where = f" ({actual[1].where} vs {budget[1].where})" if budget[1] is not None else f" ({actual[1].where})"
    return [Recommendation("gpu_memory_utilization", budget[0], new,
                           f"the card was {actual[0]:.1%} full against the engine's {budget[0]:.0%} budget{where}: "
                           f"{gap * 100:.1f} points it does not see; take that and a point of margin off the budget "
                           f"until the accounting is fixed ({budget[0]:g} - {gap:.3f} - 0.01); {fit.check(new)}",
                           "incident")]


def _upgrade(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """The first release that fixes a known bug of this version (a step for a person)."""
    out = []
    for bug in incident.known_bugs:
        if bug.fixed_in and bug.confirmed:     # a write-up's report never recommends an upgrade by itself
            out.append(Recommendation("engine_version", incident.version, bug.fixed_in,
                                      f"{bug.title} ({bug.id}; {bug.source}); fixed in {bug.fixed_in}",
                                      "knowledge_base", manual=True))
    return out[:1]


#: Advice of a cause, whatever the class that names it, in the order it is added.
CAUSE_ADVICE: dict[str, Callable[[Incident, Verdict], list[Recommendation]]] = {
    ACCOUNTING_DISCREPANCY.id: _discrepancy,
    KNOWN_ENGINE_BUG.id: _upgrade,
}


# --- the engine's own limits and defaults ----------------------------------------------------------

# The model's maximum as vLLM states it: its refusal of a longer max_model_len ("the derived
# max_model_len (max_position_embeddings=131072 ..."), or a model config it printed.
_MODEL_MAX = lazy(r"(?:derived[ _]max_model_len\W{0,3}(?:\(\s*)?(?:max_position_embeddings\W{1,3})?"
                  r"|(?<![A-Za-z_])max_position_embeddings\W{1,3})(\d{3,9})\b")
# rope_scaling types whose factor vLLM does not multiply into the derived maximum
# (vllm/config/model.py, _get_and_verify_max_len, v0.11.0).
_UNSCALED_ROPE = frozenset({"su", "longrope", "llama3", "default", "mrope"})


def _within_engine(recs: list[Recommendation], incident: Incident) -> list[Recommendation]:
    """Each change checked against the engine version's own limits and behaviour: a max_model_len
    above the model's maximum is capped there (or dropped when that is the current value), and a
    change to what the engine already does for this version is dropped."""
    out = []
    for rec in recs:
        if _already_so(rec, incident):
            continue
        if rec.setting == "max_model_len" and not rec.manual:
            rec = _capped_len(rec, incident)
            if rec is None:
                continue
        out.append(rec)
    return out


@lru_cache(maxsize=1)
def _behaviour() -> dict[str, dict[str, dict[str, Any]]]:
    doc = compiled.load("engine_settings") or {}
    return {engine: dict(table.get("behaviour") or {}) for engine, table in doc.items() if isinstance(table, dict)}


def engine_behaviour(engine: str, version: str | None, setting: str) -> dict[str, Any] | None:
    """The engine's fixed behaviour for `setting` at `version` (engine_settings.yaml), or None."""
    entry = _behaviour().get(engine, {}).get(setting)
    if not isinstance(entry, dict) or version is None or not in_range(version, str(entry.get("versions", ""))):
        return None
    return entry


def _already_so(rec: Recommendation, incident: Incident) -> bool:
    if rec.to_value is None or rec.manual or rec.env:
        return False
    entry = engine_behaviour(incident.engine, incident.version, rec.setting)
    return entry is not None and entry.get("value") == rec.to_value


def model_max_len(incident: Incident) -> tuple[int, str] | None:
    """The longest max_model_len the engine accepts for this model, as the evidence states it, and
    where: the engine's own statement (a refusal or a printed config), the model's config.json when
    the launch's model argument is a folder here, or the engine config's max_seq_len when the
    operator did not set max_model_len (the engine then uses the model's maximum)."""
    for rec in incident.ev.items:
        for text in (rec.text, rec.fields.get("message")):
            m = _MODEL_MAX.search(text) if isinstance(text, str) and "max_" in text else None
            if m:
                return int(m.group(1)), rec.where
    model = incident.arg("model", "model_path", "model_id")
    shape = model_config(model if isinstance(model, str) else None)
    if shape is not None and shape.max_position:
        limit, where = int(shape.max_position), f"{model}/config.json max_position_embeddings"
        rope = _rope_scaling(model)
        if rope and str(rope.get("rope_type") or rope.get("type") or "") not in _UNSCALED_ROPE:
            factor = settings.as_float(rope.get("factor"))
            if factor and factor > 1:
                limit, where = int(limit * factor), where + f" x rope_scaling factor {factor:g}"
        return limit, where
    # Only where a record that lists what the operator set (the command line, vLLM's non-default
    # args) shows max_model_len was not set, and no other dump gives it a value.
    listed = [r.fields["args"] for r in incident.launch if isinstance(r.fields.get("args"), dict)
              and r.fields.get("origin") in ("command line", "non-default args")]
    others = [r.fields["args"] for r in incident.launch if isinstance(r.fields.get("args"), dict)
              and r.fields.get("origin") != "engine config"]
    unset = bool(listed) and not any(a.get(k) not in (None, "None") for a in others
                                     for k in ("max_model_len", "max_seq_len"))
    if unset and incident.engine == "vllm":
        for rec in incident.launch:
            args = rec.fields.get("args")
            if rec.fields.get("origin") == "engine config" and isinstance(args, dict):
                value = settings.as_whole(args.get("max_seq_len") or args.get("max_model_len"))
                if value:
                    return value, f"{rec.where} (max_seq_len, the model's own maximum: max_model_len was not set)"
    return None


def _rope_scaling(model: str) -> dict[str, Any] | None:
    from .memory.config import local_config

    path = local_config(model)
    try:
        import json

        raw = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, ValueError):
        return None
    rope = raw.get("rope_scaling") if isinstance(raw, dict) else None
    return rope if isinstance(rope, dict) else None


def _capped_len(rec: Recommendation, incident: Incident) -> Recommendation | None:
    to = settings.as_whole(rec.to_value)
    found = model_max_len(incident) if to is not None else None
    if found is None or to <= found[0]:
        return rec
    limit, where = found
    cur = settings.as_whole(rec.from_value)
    if cur is not None and cur <= limit:
        return None     # the cap is where it already is (or below): no change to make
    refuses = (" (vLLM refuses a longer one unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and positions past it are "
               "outside what the model was trained on)") if incident.engine == "vllm" else ""
    return replace(rec, to_value=limit, why=f"{rec.why}; capped at the model's maximum, {limit} ({where}){refuses}")


# --- command line ----------------------------------------------------------------------------

def is_launch_change(rec: Recommendation, engine: str) -> bool:
    """True when a relaunch makes this change (a flag of the engine, or an environment variable);
    an upgrade or a restart schedule is a step for a person, never part of a command line."""
    if rec.to_value is None or getattr(rec, "manual", False):
        return False
    return rec.env or rec.setting in settings.flags(engine)


def launch_changes(verdict: Verdict) -> list[Recommendation]:
    """The verdict's recommendations a relaunch makes, for the engine the verdict names."""
    engine = str(verdict.facts.get("engine_name") or verdict.facts.get("engine") or "vllm")
    return [r for r in verdict.recommendations if is_launch_change(r, engine)]


def apply_changes(argv: list[str], recs: list[Recommendation], engine: str = "vllm", version: str | None = None,
                  engine_mode: str | None = None) -> tuple[list[str], dict[str, str]]:
    """`argv` with the recommended flags set (nothing else touched), and the environment to add.

    Used on the launch line read from the logs and, by recovery, on the running server's own
    command line (which may be a wrapper such as `python -m vllm.entrypoints.openai.api_server`)."""
    flags = settings.flags(engine)
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
    # Before the version launch_flags.yaml names, a store_true flag, off unless given; from it on,
    # BooleanOptionalAction (V1 defaults it on).
    old = version is not None and in_range(version, f"<{_no_form_since()}") or \
        (version is None and engine_mode == "v0")
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


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}".rstrip("0").rstrip(".") if v < 1 else str(v)
    return str(v)


def _no_form_since() -> str:
    """The vLLM version whose --enable-prefix-caching has its --no- form (launch_flags.yaml)."""
    table = engine_flags("vllm")
    spec = table.flags.get("enable_prefix_caching") if table is not None else None
    return (spec.since if spec is not None else None) or "0"


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

