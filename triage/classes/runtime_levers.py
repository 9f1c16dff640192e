"""Runtime advice that pulls the lever of what grew, sized from the allocation that failed.

The engine sized its KV cache once, at start-up, from its memory budget (gpu_memory_utilization
x the card) less the weights and the activation peak profiling saw; those blocks stay allocated.
A full KV cache makes requests wait or be preempted, it raises no CUDA OOM. A runtime OOM means
memory *outside* that pool grew past what profiling saw, so the advice is:

- the budget, by what the numbers show: the failed allocation was `short` bytes more than was
  free; taking that and a margin off the budget leaves the room outside the pool that the step
  needed (the KV cache gives it up);
- the setting that bounds the part that grew, where the failing stack names it
  (triage/flowchart/failure_site.py): tokens per step for a forward activation, sequences per step
  for the sampler and the logits, the media per prompt for an encoder;
- another process on the card, named, where the allocator's message lists one.
Each recommendation states its arithmetic and the frame it rests on.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..evidence.kinds import Kind
from ..flowchart.failure_site import FailureSite, failure_site
from ..flowchart.incident import Incident
from ..model import Recommendation
from ..thresholds import MIN_RUNTIME_UTIL, RUNTIME_BUDGET_MARGIN
from ..units import format_bytes
from .settings import as_float, as_whole, value_or_default

GiB = 1 << 30
#: Engines whose budget knob is a share of the *whole* card (vLLM's gpu_memory_utilization, SGLang's
#: mem_fraction_static, TGI's cuda_memory_fraction); lmdeploy's and TensorRT-LLM's are shares of the
#: memory left after the weights, which the evidence rarely states, so no cut is computed for them.
WHOLE_CARD_BUDGET = frozenset({"vllm", "sglang", "tgi", "mistral.rs"})
# A step scaled down by the failed tensor's arithmetic is cut at least in half and at most to a quarter.
MOST_KEPT, LEAST_KEPT = 0.5, 0.25
SIGNIFICANT_TENANT = GiB
# Without chunked prefill vLLM schedules a whole prompt in one step: the step is max_model_len long.
V0_MIN_STEP = 2048
V0_STEP_DEFAULT = ("the engine's default without chunked prefill, max(max_model_len, 2048) "
                   "(vllm/config.py SchedulerConfig.__init__, v0.6.3)")


@dataclass(frozen=True)
class Shortfall:
    """The allocator's numbers at the failure, for one GPU."""

    tried: int
    free: int
    capacity: int
    in_use: int                                # this process, non-PyTorch memory included
    others: tuple[tuple[Any, int], ...]        # (pid, bytes) of other processes on the card
    where: str

    @property
    def short(self) -> int:
        """How much more the allocation needed than was free."""
        return max(0, self.tried - self.free)


def shortfall(incident: Incident) -> Shortfall | None:
    """The numbers of a PyTorch OOM message (None for a failure that states none)."""
    rec = incident.failure
    if rec is None or rec.kind != Kind.TORCH_OOM.value:
        return None
    f = rec.fields
    tried, free, capacity = f.get("tried_bytes"), f.get("free_bytes"), f.get("capacity_bytes")
    if not (tried and capacity) or free is None or free > capacity:
        return None
    procs = [(p.get("pid"), int(p["bytes"])) for p in f.get("other_processes") or () if p.get("bytes")]
    in_use = f.get("self_bytes")
    if in_use is None:
        # Inside a container PyTorch cannot tell its own process: the largest one listed is the
        # engine, and with none listed everything not free is.
        if procs:
            procs.sort(key=lambda p: p[1], reverse=True)
            in_use, procs = procs[0][1], procs[1:]
        else:
            in_use = capacity - free
    return Shortfall(int(tried), int(free), int(capacity), int(in_use), tuple(procs), rec.where)


def runtime_levers(incident: Incident) -> list[Recommendation]:
    """The budget cut, the lever of the failing site and any other tenant, in that order."""
    sf = shortfall(incident)
    site = failure_site(incident.failure_frames) if incident.failure_frames else None
    out: list[Recommendation] = []
    cut = budget_cut(incident, sf)
    if cut is not None:
        out.append(cut)
    if site is not None:
        out += site_lever(incident, site, sf)
    if sf is not None:
        out += tenants(sf)
    return out


def budget_cut(incident: Incident, sf: Shortfall | None) -> Recommendation | None:
    """gpu_memory_utilization (or the engine's whole-card share) lowered by the shortfall and a margin."""
    if sf is None or incident.engine not in WHOLE_CARD_BUDGET:
        return None
    raw, origin = value_or_default(incident, "gpu_memory_utilization")
    util = as_float(raw)
    if util is None or not 0 < util <= 1:
        return None
    cap = sf.capacity
    margin = RUNTIME_BUDGET_MARGIN * cap
    new = max(MIN_RUNTIME_UTIL, math.floor((util - (sf.short + margin) / cap) * 100) / 100)
    if new >= util:
        return None
    from ..fit import gather    # the weights check needs the launch's model; only advice reads it

    fit = gather(incident)
    if fit.holds(new) is False:
        return None             # a budget that cannot hold the weights is no fix
    budget = util * cap
    over = sf.in_use - budget
    held = (f"this process held {format_bytes(sf.in_use)} of the {format_bytes(cap)} card, "
            + (f"{format_bytes(over)} over its {util:g} budget ({format_bytes(budget)})" if over > 0 else
               f"within its {util:g} budget ({format_bytes(budget)})"))
    source = "" if origin == "launch" else f"; {util:g} is {origin}"
    return Recommendation(
        "gpu_memory_utilization", util, new,
        f"{held}, and the {format_bytes(sf.tried)} allocation ({sf.where}) found {format_bytes(sf.free)} free: "
        f"{format_bytes(sf.short)} short. Memory outside the pre-sized KV cache grew past what start-up profiling "
        f"saw; a smaller budget leaves it the room: {util:g} - ({format_bytes(sf.short)} + "
        f"{RUNTIME_BUDGET_MARGIN:.0%} of the card) / {format_bytes(cap)} = {new:g}, which takes "
        f"{format_bytes((util - new) * cap)} per GPU from the KV cache{source}; {fit.check(new)}",
        "incident")


def site_lever(incident: Incident, site: FailureSite, sf: Shortfall | None) -> list[Recommendation]:
    if site.lever == "max_num_batched_tokens":
        return _fewer_tokens(incident, site, sf)
    if site.lever == "max_num_seqs":
        return _fewer_sequences(incident, site, sf)
    if site.lever == "media_limits":
        return [_media_limits(incident, site, sf)]
    return []


def _kept_share(sf: Shortfall | None, most: float) -> float:
    """The share of a step to keep so that the failed tensor, scaled with it, frees the shortfall."""
    if sf is None or not sf.tried:
        return most
    return max(LEAST_KEPT, min(most, 1 - sf.short / sf.tried))


def _fewer_tokens(incident: Incident, site: FailureSite, sf: Shortfall | None) -> list[Recommendation]:
    raw, origin = value_or_default(incident, "max_num_batched_tokens")
    cur = as_whole(raw)
    chunked = _chunked_prefill(incident)
    max_len = as_whole(incident.arg("max_model_len"))
    if cur is None and incident.engine == "vllm" and not chunked and max_len:
        cur, origin = max(max_len, V0_MIN_STEP), V0_STEP_DEFAULT
    if cur is None or cur < 2:
        return []
    keep = _kept_share(sf, MOST_KEPT)
    new = _round_down(int(cur * keep))
    out: list[Recommendation] = []
    if not chunked and max_len and new < max_len:
        if not _can_chunk(incident):
            return []            # the engine refuses a step shorter than max_model_len without chunking
        out.append(Recommendation("enable_chunked_prefill", False, True,
                                  f"a step of {new} tokens needs long prompts split across steps (the engine refuses "
                                  f"max_num_batched_tokens below max_model_len={max_len} otherwise)", "incident"))
    seqs = as_whole(value_or_default(incident, "max_num_seqs")[0])
    if seqs and new < seqs:
        new = seqs             # the engine refuses fewer tokens per step than sequences
        if new >= cur:
            return []
    scaled = (f"; at {new} of {cur} tokens that tensor is {format_bytes(sf.tried * new / cur)}, "
              f"{format_bytes(sf.tried * (1 - new / cur))} less") if sf else ""
    against = f", against a {format_bytes(sf.short)} shortfall ({format_bytes(sf.free)} free)" if sf else ""
    source = "" if origin == "launch" else f"; {cur} is {origin}"
    out.insert(0, Recommendation(
        "max_num_batched_tokens", cur, new,
        f"the failed allocation{' of ' + format_bytes(sf.tried) if sf else ''} is an activation of the forward pass "
        f"({site.where()}), which grows with the tokens scheduled in one step{scaled}{against}: "
        f"{cur} x {keep:.2f}, rounded down to a multiple of {_step(int(cur * keep))}{source}", "incident" if sf else "rule_of_thumb"))
    return out


def _step(tokens: int) -> int:
    return 1024 if tokens >= 2048 else 256


def _round_down(tokens: int) -> int:
    """Down to a multiple of 1024 (256 below 2048): the granularity people tune a step's tokens in."""
    return max(_step(tokens), tokens - tokens % _step(tokens))


def _fewer_sequences(incident: Incident, site: FailureSite, sf: Shortfall | None) -> list[Recommendation]:
    raw, origin = value_or_default(incident, "max_num_seqs")
    cur = as_whole(raw)
    running = [int(s.fields["running"]) for s in incident.stats_before_failure if s.fields.get("running")]
    base, seen = (running[-1], f"{running[-1]} running when it failed") if running else \
        (cur, f"max_num_seqs={cur}" + ("" if origin == "launch" else f" ({origin})"))
    if not base or base < 2:
        return []
    keep = _kept_share(sf, 0.9)
    new = math.floor(base * keep)
    if new < 1 or new >= base or (cur is not None and new >= cur):
        return []
    part = "sampler" if site.name == "sampler" else "logits"
    freed = f", {format_bytes(sf.tried * (1 - new / base))} less against a {format_bytes(sf.short)} shortfall" if sf else ""
    return [Recommendation(
        "max_num_seqs", cur, new,
        f"the failed allocation{' of ' + format_bytes(sf.tried) if sf else ''} is the {part}'s ({site.where()}): its "
        f"buffers hold every sequence of the step over the whole vocabulary, so they shrink with the sequences "
        f"sampled at once: {seen} x {keep:.2f} = {new}{freed}; rate-limit per pod at the gateway to match",
        "incident" if sf else "rule_of_thumb")]


def _media_limits(incident: Incident, site: FailureSite, sf: Shortfall | None) -> Recommendation:
    amount = f" of {format_bytes(sf.tried)}" if sf else ""
    flag = "--limit-mm-per-prompt and --mm-processor-kwargs (max_pixels)" if incident.engine == "vllm" else \
        "the engine's per-request image count and resolution"
    current_limit = incident.arg("limit_mm_per_prompt")
    if current_limit is not None and not isinstance(current_limit, (str, int, float, bool)):
        current_limit = json.dumps(current_limit, sort_keys=True)     # {'image': 1} as the flag takes it
    return Recommendation(
        "media_per_prompt", current_limit, "fewer or smaller images per request",
        f"the failed allocation{amount} is the multi-modal encoder's ({site.where()}): encoder activations grow with "
        f"the images in a step and their resolution, outside the text token budget; cap them with {flag} at the "
        "largest the traffic needs", "incident", manual=True)


def tenants(sf: Shortfall) -> list[Recommendation]:
    big = [(pid, n) for pid, n in sf.others if n >= SIGNIFICANT_TENANT]
    if not big:
        return []
    named = ", ".join(f"PID {pid} ({format_bytes(n)})" for pid, n in big[:3])
    return [Recommendation(
        "other_gpu_processes", named, "moved off this GPU",
        f"{named} held memory on the card when the allocation failed ({sf.where}); the engine's budget assumed it "
        "free: stop it or move it, or keep the lower budget while it shares the card", "incident", manual=True)]


def _chunked_prefill(incident: Incident) -> bool:
    from ..advice import engine_behaviour

    if incident.engine != "vllm":
        return True          # the others bound a step's tokens with no tie to the context length
    if engine_behaviour(incident.engine, incident.version, "enable_chunked_prefill") is not None:
        return True
    if incident.engine == "vllm" and incident.engine_mode == "v1":
        return True
    val = incident.arg("enable_chunked_prefill")
    return val is True or val == "True"


def _can_chunk(incident: Incident) -> bool:
    """Whether the engine has chunked prefill to turn on (vLLM; SGLang and TGI always chunk by size)."""
    return incident.engine == "vllm"
