"""One proof as a library call: the profile, the target check, what will be sent, the load, the
verdict, and the record in the incident.

Nothing is sent before the target passed its check and — for a host that is not loopback — the
caller's `confirm` saw exactly what will be sent. Ctrl-C cancels the load's task: every request
in flight is cancelled and its connection closed, and the result says `interrupted`.
"""
from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable

from ..errors import BadInput, TriageError
from .load import LoadRun, LoadState, request_body
from .peak import peak_profile
from .profile import MAX_FILE_BYTES, Limits, LoadProfile, defaults, read_profile_file, vllm_bench_argv
from .result import GiB, ProveResult
from .target import Target, parse_target

MAX_PROMPT_TOKENS = 1 << 21
MAX_OUTPUT_TOKENS = 1 << 20
PROBE_TIMEOUT_S = 10.0
UNREACHABLE = "unreachable: "   # _served_model's reason when no connection could be made
LOG_SETTLE_S = 2.0           # a dying server writes its traceback around the moment it fails requests


@dataclass
class ProveOptions:
    url: str
    source: str | None = None                 # an incident directory or a log: the peak comes from it
    profile_file: str | None = None
    concurrency: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    limits: Limits = field(default_factory=Limits)
    allow_remote: bool = False
    min_headroom_bytes: int | None = None
    server_log: str | None = None             # classified after a failure: does it fail like the incident?
    record: bool = True                       # write the run into the incident's actions.jsonl
    nvml: bool = True
    seed: int | None = None


@dataclass(frozen=True)
class Prepared:
    target: Target
    profile: LoadProfile
    limits: Limits
    incident_class: str | None
    incident_dir: str | None


def prepare(opts: ProveOptions, verdict_and_evidence: Any = None) -> Prepared:
    """Everything decided before a request is sent; raises one clear error for bad input."""
    target = parse_target(opts.url, opts.allow_remote)
    profile, limits = defaults(opts.model), opts.limits
    incident_class, incident_dir = None, None
    if opts.source is not None:
        if not os.path.lexists(opts.source):
            raise BadInput(opts.source, "no such incident directory or log")
        verdict, evidence = verdict_and_evidence or _classify(opts.source)
        profile = peak_profile(evidence.items, verdict.facts)
        incident_class = verdict.oom_class.value
        incident_dir = opts.source if os.path.isdir(opts.source) else None
    if opts.profile_file is not None:
        from_file, timing = read_profile_file(opts.profile_file)
        profile = _merge(profile, from_file)
        limits = replace(limits, **{k: v for k, v in timing.items() if _default(opts.limits, k)})
    profile = profile.with_overrides(opts.concurrency, opts.prompt_tokens, opts.output_tokens)
    if opts.model:
        profile = replace(profile, model=opts.model)
    limits.check(profile.concurrency.value)
    if profile.prompt_tokens.value > MAX_PROMPT_TOKENS or profile.output_tokens.value > MAX_OUTPUT_TOKENS:
        raise BadInput("--prompt-tokens", f"prompts of at most {MAX_PROMPT_TOKENS} and outputs of at most "
                       f"{MAX_OUTPUT_TOKENS} tokens")
    return Prepared(target, profile, limits, incident_class, incident_dir)


def plan_lines(p: Prepared, model: str | None = None) -> list[str]:
    """What will be sent, before it is sent."""
    prof, lim = p.profile, p.limits
    body = request_body(model or prof.model or "<the model /v1/models names>", replace(
        prof, prompt_tokens=replace(prof.prompt_tokens, value=min(prof.prompt_tokens.value, 4))), _rng())
    body.pop("prompt")
    shown = f"{json.dumps(body)} plus a prompt of {prof.prompt_tokens.value} random token ids"
    return [f"target {p.target.url} ({'loopback' if p.target.loopback else 'NOT loopback'})",
            f"load: {prof.describe()}: ramp {lim.ramp_s:g} s, hold {lim.duration_s:g} s, at most "
            f"{lim.max_requests} requests, each cut after {lim.request_timeout_s:g} s; the whole run at most "
            f"{lim.wall_s:g} s",
            f"each request: POST {p.target.url}/v1/completions {shown}",
            "then GET /metrics every second and GET /health at the end; the first failed request stops the load"]


def run_prove(opts: ProveOptions, *, say: Callable[[str], None] = lambda line: None,
              confirm: Callable[[list[str]], bool] | None = None, prepared: Prepared | None = None) -> ProveResult:
    p = prepared or prepare(opts)
    lines = plan_lines(p)
    if not p.target.loopback:
        if confirm is None or not confirm(lines):
            raise TriageError(f"--url {p.target.url}: load against another host was not confirmed: nothing was sent")
    else:
        for line in lines[:2]:
            say(line)
    started_at = datetime.now(timezone.utc)
    result = asyncio.run(_drive(p, opts, say, started_at))
    if result.failure() is not None and not result.state.interrupted and opts.server_log:
        result.reproduced = _reproduce(opts.server_log)
    if p.incident_class:
        result.incident = {"path": opts.source, "class": p.incident_class, "recorded": False}
    return result


async def _drive(p: Prepared, opts: ProveOptions, say: Callable[[str], None], started_at: datetime) -> ProveResult:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S), trust_env=False) as s:
        name, max_len, why = await _served_model(s, p.target.url)
    if why.startswith(UNREACHABLE):      # nothing listens there (a server that never started): no load to send
        raise TriageError(f"{p.target.url}: server not reachable ({why[len(UNREACHABLE):]}): nothing was sent; "
                          "is the server up?")
    model = opts.model or name or p.profile.model
    if model is None:
        raise TriageError(f"{p.target.url}: /v1/models did not name a model ({why}) and the evidence names none: "
                          "is the server up? (or give --model)")
    profile = p.profile.fitted(max_len)
    notes = [] if name else [f"/v1/models did not answer ({why}); model {model} from the evidence or --model"]
    progress = _Progress(say, profile.concurrency.value, p.limits)
    run = LoadRun(p.target.url, model, profile, p.limits, nvml=opts.nvml, progress=progress, seed=opts.seed)
    state = await run.run()
    result = ProveResult(p.target.url, p.target.loopback, model, profile, p.limits, started_at, state,
                         min_headroom_bytes=opts.min_headroom_bytes, notes=notes,
                         export=vllm_bench_argv(profile, p.target.url, model, max(1, state.sent)))
    if state.request_bound_hit:
        result.notes.append(f"the request bound ({p.limits.max_requests}) ended the hold after "
                            f"{(state.load_end_s or 0) - p.limits.ramp_s:.1f} s")
    if not state.interrupted:
        result.health_after, result.healthy_after = await _health(p.target.url)
    return result


async def _served_model(session: Any, url: str) -> tuple[str | None, int | None, str]:
    import aiohttp

    try:
        async with session.get(url + "/v1/models") as resp:
            raw = await resp.content.read(MAX_FILE_BYTES)
            if resp.status != 200:
                return None, None, f"HTTP {resp.status}"
            data = (json.loads(raw).get("data") or [{}])[0]
            length = data.get("max_model_len")
            return str(data["id"]), int(length) if isinstance(length, int) and length > 0 else None, "ok"
    except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
        return None, None, f"{UNREACHABLE}GET /v1/models: {type(exc).__name__}: {exc}"[:200]
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return None, None, f"{type(exc).__name__}: {exc}"[:200]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, None, "not an OpenAI model list"


async def _health(url: str) -> tuple[str, bool]:
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0), trust_env=False) as s:
            async with s.get(url + "/health") as resp:
                return f"GET /health -> {resp.status}", resp.status == 200
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return f"GET /health: {type(exc).__name__}: {exc}"[:200], False


class _Progress:
    """A line on stderr every few seconds: where the ramp is, what was served, what the server says."""

    def __init__(self, say: Callable[[str], None], conc: int, limits: Limits, every_s: float = 2.0) -> None:
        self.say, self.conc, self.limits, self.every_s = say, conc, limits, every_s
        self.last = -every_s

    def __call__(self, st: LoadState) -> None:
        t = st.now()
        if t - self.last < self.every_s:
            return
        self.last = t
        phase = "ramp" if t < self.limits.ramp_s else "hold" if t < self.limits.ramp_s + self.limits.duration_s \
            else "drain"
        p = st.peaks
        kv = f"KV {p.last_kv:.0%}" if p.last_kv is not None else "KV ?"
        gpu = f", GPU peak {p.gpu_used_bytes / GiB:.1f} GiB" if p.gpu_used_bytes is not None else ""
        self.say(f"{t:6.1f} s {phase}: {st.sent} sent, {st.served} served, {st.failed} failed; {kv}, waiting "
                 f"{p.last_waiting if p.last_waiting is not None else '?'}{gpu}")


def _classify(source: str) -> Any:
    from ..api import classify_paths

    return classify_paths([source])


def _merge(base: LoadProfile, top: LoadProfile) -> LoadProfile:
    """The file's figures over the evidence's, where the file gives them."""
    out = base
    for name in ("concurrency", "prompt_tokens", "output_tokens"):
        fig = getattr(top, name)
        if fig.origin != "default":
            out = replace(out, **{name: fig})
    return replace(out, model=top.model or base.model)


def _default(limits: Limits, key: str) -> bool:
    """True when `key` of `limits` still has its default (a flag beats the profile file)."""
    return getattr(limits, key) == getattr(Limits(), key)


def _reproduce(path: str) -> dict[str, Any]:
    """Classify the server's log after a failure: the class it failed with. The whole log is read
    (a vLLM log cut mid-way loses the start-up lines the phase questions need), so it should be
    the log of the server under test, such as a relaunch's own."""
    import time

    from ..api import classify_paths

    time.sleep(LOG_SETTLE_S)
    try:
        verdict, _ = classify_paths([path])
    except TriageError as exc:
        return {"log": path, "class": None, "summary": f"could not be read: {exc}"}
    return {"log": path, "class": verdict.oom_class.value, "summary": verdict.summary}


def _rng() -> Any:
    import random

    return random.Random(0)
