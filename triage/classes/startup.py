"""Startup OOM: the server ran out of GPU memory before it ever served.

**Signature**: vLLM's start-up checks (KV cache cannot hold max_model_len, no memory for cache
blocks, free memory below the utilisation budget, sampler warm-up OOM, weight loading OOM), or
an allocator OOM whose stack is in weight loading / profiling / KV sizing / graph capture, or
that comes after start-up lines only.
**Not to be confused with**: a runtime OOM on the first request after start-up.
**Recovery**: runbooks/startup.yaml
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..fit import Fit, gather, gib
from ..fit import options as fit_options
from ..flowchart import causes as shared
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.incident import Incident
from ..flowchart.phase import PhaseAnswer
from ..model import OomClass, Recommendation, Verdict
from ..thresholds import DEFAULT_UTIL, FREE_MARGIN, WARMUP_MARGIN
from .base import Assessment, Branch, ClassSpec
from .settings import as_float, as_whole, current

# Causes read straight off a failure line first; inferred ones (a high utilisation target) last.
SPEC = ClassSpec(
    id=OomClass.STARTUP, label="start-up OOM", short_label="startup OOM", colour="yellow", branch=Branch.STARTUP,
    specificity=2,
    causes=(shared.KV_CACHE_BLOWOUT, shared.OTHER_PROCESSES, shared.CONCURRENCY_MISJUDGED, shared.MODEL_TOO_LARGE,
            shared.CONFIG_OVERSHOOT, shared.ACCOUNTING_DISCREPANCY, shared.KNOWN_ENGINE_BUG))
UNEXPLAINED_UTIL = 0.85      # rule of thumb for an unexplained start-up OOM: 15% for context, NCCL, peaks


def assess(ctx: Context, phase: PhaseAnswer) -> Assessment:
    if phase.phase != "startup":
        return Assessment(SPEC.id, conf.NONE, "", "it did not fail during start-up")
    causes = shared.detect(ctx, *SPEC.causes, oom_class=SPEC.id.value)
    confidence = min(conf.CEILING_STARTUP, conf.MEDIUM_LOW + conf.PHASE_WEIGHT * phase.strength)
    if causes:
        confidence = min(conf.CEILING_STARTUP, confidence + conf.STEP)
    oom = ctx.primary
    derived = oom is not None and oom is ctx.derived_anchor
    if phase.strength < conf.EVEN:
        # The phase is a lean (a step that also runs, now and then, while serving): named, but
        # below a confident answer.
        confidence = min(confidence, conf.TENTATIVE)
    if derived:
        # The out-of-memory itself was inferred from numbers (the failure's own line is not in the
        # evidence): the verdict cannot be surer than that inference.
        confidence = min(confidence, conf.MEDIUM_HIGH)
    lead = causes[0].detail or causes[0].title if causes else f"{oom.kind} at {oom.where}" if oom else ""
    summary = f"Start-up OOM: {lead}" if lead else "Start-up OOM"
    evidence = list(phase.evidence) + ([oom] if oom else [])
    attach = []
    if derived:
        attach.append("the exception line of the failure (the log shows only what came before it)")
    if not causes:
        attach.append("the launch arguments (the 'non-default args' line or the command) and the memory-profiling lines")
    return Assessment(SPEC.id, round(confidence, 2), summary, phase.why, evidence, causes, attach)


# --- advice ----------------------------------------------------------------------------------------
# Every recommendation's `why` states the basis of its number: the incident's own records (cited
# source:line), the fit arithmetic of triage/fit.py, or a rule of thumb named as such.

def recommend(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    """New settings for a start-up OOM, from its causes and the fit arithmetic of triage/fit.py."""
    causes = {c.id for c in verdict.causes}
    out: list[Recommendation] = []
    fit = gather(incident)
    util = as_float(current(incident, "gpu_memory_utilization"))
    if "kv_cache_blowout" in causes:
        out.append(_max_model_len(incident))
    free_low = incident.ev.first(Kind.FREE_MEMORY_LOW)
    if free_low and free_low.fields.get("free_bytes") and free_low.fields.get("total_bytes"):
        out += _free_memory_low(incident, fit, free_low, util, causes)
    if "concurrency_misjudged" in causes:
        cut = _warmup_cut(incident)
        if cut:
            out.append(cut)
    if "model_too_large" in causes:
        out += _too_large(fit)
    if incident.failure_frames and _in_graph_capture(incident.failure_frames):
        if fit.graphs:
            why, basis = (f"the OOM hit during CUDA graph capture; eager mode gives back the graph memory: "
                          f"{fit.graphs.describe()}"), "incident"
        else:
            why, basis = ("the OOM hit during CUDA graph capture; eager mode gives back the graph memory (1-3 GiB per "
                          "GPU by the write-ups' rule of thumb; the log gives no graph size)"), "rule_of_thumb"
        out.append(Recommendation("enforce_eager", current(incident, "enforce_eager") or False, True, why, basis))
    if not out and incident.failure is not None and (util is None or util > UNEXPLAINED_UTIL):
        if fit.holds(UNEXPLAINED_UTIL) is not False:
            out.append(Recommendation("gpu_memory_utilization", util, UNEXPLAINED_UTIL,
                                      "rule of thumb for an unexplained start-up OOM: leave 15% for the CUDA context, "
                                      f"NCCL and activation peaks; {fit.check(UNEXPLAINED_UTIL)}", "rule_of_thumb"))
        elif fit.holds(util or DEFAULT_UTIL) is False:
            out += fit_options(fit, f"The server does not fit this GPU: {fit.check(util or DEFAULT_UTIL)}.")
    return out


def _free_memory_low(incident: Incident, fit: Fit, rec, util: float | None, causes: set[str]) -> list[Recommendation]:
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


def _warmup_cut(incident: Incident) -> Recommendation | None:
    """A warm-up that did not fit (vLLM's sampler with max_num_seqs dummy requests, TGI's prefill
    with max_batch_prefill_tokens), sized from its own failed allocation: bytes per unit, then the
    units that fit in what was free, less a margin."""
    warm = incident.ev.first(Kind.WARMUP_OOM)
    setting = (warm.fields.get("setting") if warm else None) or "max_num_seqs"
    units = (warm.fields.get("dummy_requests") or warm.fields.get("tokens")) if warm else None
    cur = as_whole(current(incident, setting)) or units
    if not cur or cur < 2:
        return None
    units = units or cur
    oom = _oom_before(incident, warm)
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


def _oom_before(incident: Incident, warm):
    """The torch OOM (with its request and free bytes) that the warm-up failure reports."""
    ooms = [o for o in incident.ev.of(Kind.TORCH_OOM) if o.fields.get("tried_bytes") and o.fields.get("free_bytes")]
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


def _max_model_len(incident: Incident) -> Recommendation:
    rec = incident.ev.first(Kind.KV_CACHE_INSUFFICIENT)
    cur = as_whole(current(incident, "max_model_len")) or (rec.fields.get("max_model_len") if rec else None)
    if rec and rec.fields.get("estimated_max_model_len"):
        new = int(rec.fields["estimated_max_model_len"])
        why = f"vLLM computed that at most {new} tokens fit the KV cache it had ({rec.where})"
        return Recommendation("max_model_len", cur, new, why + "; set it to your real P99 prompt+response if lower",
                              "incident")
    if rec and rec.fields.get("needed_bytes") and rec.fields.get("available_bytes") and cur:
        ratio = rec.fields["available_bytes"] / rec.fields["needed_bytes"]
        new = int(cur * ratio) // incident.block_size * incident.block_size
        return Recommendation("max_model_len", cur, new,
                              f"the KV cache it had, {gib(rec.fields['available_bytes'], 2)}, holds {ratio:.0%} of the "
                              f"{gib(rec.fields['needed_bytes'], 2)} max_model_len={cur} needs ({rec.where}): {cur} x "
                              f"{ratio:.3f}, down to a multiple of the {incident.block_size}-token block", "incident")
    cap = shared.kv_tokens(incident)
    if cap:
        new = cap[0] // incident.block_size * incident.block_size
        return Recommendation("max_model_len", cur, new, f"the KV cache held {cap[0]} tokens (logged at "
                              f"{cap[1][0].where}); one request of max_model_len must fit", "incident")
    return Recommendation("max_model_len", cur, None, "cap it at the real P99 of prompt+response length (the evidence "
                          "gives no KV-cache size to compute it from)", "rule_of_thumb")


def _in_graph_capture(stack: tuple) -> bool:
    from ..flowchart.frames import frames

    return any(frames().in_group(f, "cuda_graph_capture") for f in stack)
