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
import shlex
from typing import Any, Callable

from .classes import registry, settings
from .classes.runbooks import runbook_for
from .fit import gather
from .flowchart.causes import ACCOUNTING_DISCREPANCY, KNOWN_ENGINE_BUG, actual_usage, engine_budget
from .flowchart.incident import Incident
from .flowchart.knowledge import in_range
from .launch import engine_flags, rebuild
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
    verdict.recommendations = _dedupe(recs)
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
        if bug.fixed_in:
            out.append(Recommendation("engine_version", incident.version, bug.fixed_in,
                                      f"{bug.title} ({bug.id}; {bug.source}); fixed in {bug.fixed_in}",
                                      "knowledge_base", manual=True))
    return out[:1]


#: Advice of a cause, whatever the class that names it, in the order it is added.
CAUSE_ADVICE: dict[str, Callable[[Incident, Verdict], list[Recommendation]]] = {
    ACCOUNTING_DISCREPANCY.id: _discrepancy,
    KNOWN_ENGINE_BUG.id: _upgrade,
}


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

