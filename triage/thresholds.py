"""The one table of thresholds, read by the classifier, the timeline, the postmortem and watch.

Every number the rules compare against lives here, with the reason it has that value and
where it comes from. A module that needs one imports it from here; none keeps its own copy.
The reference write-ups' rules of thumb are marked as such; numbers derived from the incident's
own evidence (the card size, the failed request) always take precedence over absolute ones.
"""
from __future__ import annotations

from typing import NamedTuple


class Threshold(NamedTuple):
    """One threshold (a NamedTuple: read-only, and cheap to define on the cold path)."""

    value: float
    unit: str
    why: str
    source: str


_FLOWCHART = "reference/flowchart.md (production write-ups of vLLM OOM incidents, 2024-2026)"

TABLE: dict[str, Threshold] = {
    # --- load ---------------------------------------------------------------------------------
    "kv_high": Threshold(0.90, "share of the KV pool", "KV-cache usage this high just before a failure means live "
                         "requests owned the pool: load, not a leak", _FLOWCHART + " (KV > 90% warning alert)"),
    "kv_critical": Threshold(0.95, "share of the KV pool", "the critical KV alert level", _FLOWCHART),
    "kv_busy": Threshold(0.80, "share of the KV pool", "with requests waiting behind it, a cache this full was "
                         "the bottleneck even below kv_high", "probe cases: one stats line at a busy cache"),
    "relaunch_gpu_share_max": Threshold(0.97, "share of the card", "a relaunched server holding more of the card "
                                        "leaves under 3% for the CUDA context, NCCL buffers and activation spikes "
                                        "outside the KV cache: the next long prompt runs out again (recovery's "
                                        "verify step)", "rule design"),
    "waiting_high": Threshold(10, "requests", "a waiting queue this long means requests are piling up", _FLOWCHART),
    "quiet_kv": Threshold(0.50, "share of the KV pool", "below this with nothing waiting, the last reading shows "
                          "a quiet server: a spike is not what the evidence says", "rule design"),
    "concurrency_cap_share": Threshold(0.90, "share of max_num_seqs", "running requests at this share of the cap "
                                       "(with a cap of 128 or more) say the cap, not memory, set the concurrency",
                                       _FLOWCHART + " (default max_num_seqs 256 is optimistic)"),
    "oversized_request_share": Threshold(0.10, "share of the card", "one failed allocation this large is one "
                                         "oversized request (a huge prompt or image), not general load",
                                         "rule design"),
    # --- allocator ----------------------------------------------------------------------------
    "fragmentation_min_share": Threshold(0.05, "share of the card", "reserved-but-unallocated memory below this is "
                                         "allocator slack; at or above it, and more than the failed request, the "
                                         "memory was there in unusable pieces (fragmentation). There is no third "
                                         "outcome: every value is either in use or fragmented. A serving engine "
                                         "keeps a few percent of the card cached between steps (CUDA-graph pools, "
                                         "per-stream caches, 2 MiB rounding); the fragmentation OOMs of long-running "
                                         "servers in the corpus show 10-35% of the card unallocated",
                                         _FLOWCHART + " (chronic: large reserved-but-unallocated); rule design"),
    "fragmentation_min_multiple": Threshold(1.25, "times the failed request", "reserved-but-unallocated "
                                            "memory must exceed the failed request by this factor to count as "
                                            "fragmentation: the caching allocator rounds a large request up to whole "
                                            "2 MiB pages and serves it from one segment, so an unallocated amount "
                                            "about the request's own size says nothing of pieces too small to use "
                                            "(it is borderline, and load evidence decides)",
                                            "rule design; PyTorch c10/cuda/CUDACachingAllocator.cpp (kRoundLarge "
                                            "2 MiB, per-stream pools)"),
    "borderline_share": Threshold(0.50, "share of the failed request", "an in-use reading whose unallocated "
                                  "amount is at least this share of the failed request and at least "
                                  "borderline_card_share of the card could have held much of the request: it does "
                                  "not rule fragmentation out, so only load evidence then makes it a burst",
                                  "rule design (probe cases with ~2 GiB unallocated against a 2 GiB request)"),
    "borderline_max_multiple": Threshold(4.0, "times the failed request", "an in-use reading is borderline only "
                                         "while its unallocated amount is about the request's size (up to this "
                                         "multiple): far more than the request yet under the fragmentation floor is "
                                         "the slack a serving engine keeps cached between steps (graph pools, "
                                         "per-stream caches), which could never serve this request either way",
                                         "rule design: fragmentation_min_share's slack, against borderline_share's "
                                         "~2 GiB request beside ~2 GiB unallocated"),
    "borderline_card_share": Threshold(0.02, "share of the card", "below this share of the card, unallocated "
                                       "memory is plain allocator slack whatever the request's size",
                                       "rule design (2% of an 80 GB card is 1.6 GiB)"),
    "fragmentation_min_bytes": Threshold(1 << 30, "bytes", "the same floor when the card's size is unknown",
                                         "rule design"),
    "inactive_split_share": Threshold(0.30, "inactive_split / reserved", "memory_stats fragmentation worth naming",
                                      _FLOWCHART + " (restart past ~70%; 30% is worth naming)"),
    "leak_min_rise": Threshold(0.05, "share of the card", "GPU memory in use rising this much over the readings "
                               "with flat load is a leak", _FLOWCHART + " (track the delta, not the level)"),
    "leak_min_span_s": Threshold(3600, "seconds", "readings must span this long before a rise counts as a leak "
                                 "(the start-up ramp is not one)", "rule design"),
    "leak_window_s": Threshold(24 * 3600, "seconds", "the span of GPU-memory readings `triage watch` fits a trend "
                               "over: a slow leak (a few hundred MiB an hour) only stands out over hours, and a "
                               "day keeps a daily restart's ramp in view", "rule design"),
    "leak_headroom_share": Threshold(0.50, "share of the free memory left", "a rise over the trend window that has "
                                     "eaten at least this share of what is still free is a leak whatever its size "
                                     "against the card: at that pace the card fills within about one more window",
                                     "rule design"),
    "long_uptime_s": Threshold(6 * 3600, "seconds", "an OOM after this much uptime leans chronic", _FLOWCHART),
    # --- prefix cache ---------------------------------------------------------------------------
    "prefix_hit_low": Threshold(0.30, "hit rate", "below this the cache holds prefixes nobody reuses: turn it off",
                                _FLOWCHART + " (prefix caching pays above ~60%, not below ~30%)"),
    "evictable_share": Threshold(0.50, "share of the token pool", "a pool OOM while this share was evictable "
                                 "cached prefixes: the cache held the pool", "SGLang pool OOM detail lines"),
    # --- accounting -----------------------------------------------------------------------------
    "discrepancy": Threshold(0.03, "share of the card", "nvidia-smi/NVML used above the engine's own budget by "
                             "more than this is memory the engine does not see", _FLOWCHART + " (alert at ~3%)"),
    "other_process_share": Threshold(0.20, "share of the card", "memory held before the engine started, at this "
                                     "share, belongs to other processes", "rule design"),
    "overshoot_free_share": Threshold(0.80, "share of the card", "free memory at start-up this high: nothing big "
                                      "holds the GPU, the utilisation target itself is too high", "rule design"),
    "util_no_headroom": Threshold(0.95, "gpu_memory_utilization", "a target this high leaves under 5% for the CUDA "
                                  "context, NCCL, sidecars and activation spikes", _FLOWCHART + " (never 1.0)"),
    # --- advice ---------------------------------------------------------------------------------
    "free_margin": Threshold(0.02, "share of the card", "kept below the free share when a utilisation target is "
                             "sized to what is free: the relaunch's own CUDA context and allocator rounding",
                             "rule design"),
    "default_util": Threshold(0.90, "gpu_memory_utilization", "kept or suggested when the GPU is (made) free",
                              "vLLM's default; " + _FLOWCHART + " (dedicated GPU 0.90-0.92)"),
    "min_as_is_util": Threshold(0.25, "share of the card", "a quantised checkpoint or more GPUs count as fitting "
                                "\"this GPU as it is\" only where this share is free: below it the KV cache left "
                                "beside the weights is too small to serve from", "rule design"),
    "warmup_margin": Threshold(0.20, "share of the free memory", "a sampler warm-up sized from its own failed "
                               "allocation keeps this margin: it allocates several tensors per sequence and the "
                               "failed one is only the largest", "rule design"),
    # --- verdict --------------------------------------------------------------------------------
    "min_confidence": Threshold(0.40, "confidence", "below this a runtime class is not named (unknown)", "rule design"),
    "specific_wins": Threshold(0.60, "confidence", "a prefix-cache or chronic finding this strong explains the "
                               "pressure better than the generic burst", "rule design"),
    "confident": Threshold(0.50, "confidence", "a wrong class at or above this is a confident wrong answer",
                           "evaluation policy"),
    "early_warning_confidence": Threshold(0.50, "confidence", "memory growth seen before any failure is "
                                          "reported (a chronic verdict) only at this confidence; below it the "
                                          "evidence is judged as a healthy or unknown server", "rule design"),
    # --- reading the evidence -------------------------------------------------------------------
    "root_cause_window_s": Threshold(15 * 60, "seconds", "a host kill or hardware fault explains a GPU OOM only "
                                     "when it came this shortly before it; earlier, it is a separate event",
                                     "rule design (crash loops restart within minutes)"),
    "failure_traceback_lines": Threshold(400, "lines", "tracebacks this close to the failure line in the same "
                                         "file belong to it (a long stack with its chained causes fits)",
                                         "rule design (vLLM V1 tracebacks with worker frames run 100-300 lines)"),
    "same_failure_lines": Threshold(60, "lines", "a start-up check or failed step this close to the failure "
                                    "(with no engine restart between) reports the same failure",
                                    "rule design (one failure's wrapper, check and traceback)"),
    "stop_after_kill_lines": Threshold(3, "lines", "a supervisor's \"runner stopped\" this soon after its runner's "
                                      "`signal: killed` means it killed the runner itself",
                                      "rule design (Ollama logs the kill and the stop on consecutive lines)"),
    "weights_budget_margin": Threshold(0.05, "share of the card", "weights within this of the utilisation "
                                       "budget leave no room for the KV cache: the model barely fits",
                                       "rule design"),
    "leak_monotone_share": Threshold(0.80, "share of consecutive readings", "GPU memory readings that rise "
                                     "(or hold) between this share of consecutive pairs grow steadily: a "
                                     "trend, not noise", "rule design"),
    "steady_load_cv": Threshold(0.50, "coefficient of variation", "running requests varying less than this "
                                "(standard deviation over mean) are a flat load, so rising memory is not load",
                                "rule design"),
    "kv_pinned": Threshold(0.98, "share of the KV pool", "KV usage this high with a low prefix hit rate and "
                           "collapsing concurrency: cached prefixes starve live requests (thrashing before an "
                           "OOM)", "rule design (formats.md: KV pressure, not an allocator OOM)"),
    "spike_allocation_share": Threshold(0.01, "share of the card", "a serving-loop allocation this large is one "
                                        "step's activations (many tokens at once): a spike even at a half-empty KV "
                                        "cache; a smaller one there is memory that grew another way",
                                        "rule design (a 2.3 GiB prefill activation on an 80 GB card is 2.9%)"),
    "unloaded_allocated_share": Threshold(0.05, "share of the card", "an out-of-memory whose own process held "
                                          "less than this of the card through PyTorch had not loaded its model or "
                                          "sized its cache yet: a serving engine holds its weights and its "
                                          "pre-sized KV pool (most of its budget) before the first request, so "
                                          "the failure was in bringing the engine up (or another process held "
                                          "the card)", "rule design from the memory model (vLLM, SGLang, TGI and "
                                          "lmdeploy allocate weights and the KV pool at start-up)"),
    "spike_allocation_bytes": Threshold(2 << 30, "bytes", "spike_allocation_share when the card's size is not in "
                                        "the evidence: one serving-step allocation this large is a spike on any "
                                        "card (many tokens' activations, a compute buffer re-reserved for a bigger "
                                        "batch)", "rule design (1% of the largest cards: B200 and GB200 report "
                                        "about 180 GiB)"),
    # --- runtime advice -------------------------------------------------------------------------
    "runtime_budget_margin": Threshold(0.02, "share of the card", "a budget cut for a runtime OOM takes the "
                                       "shortfall and this much more of the card: the next step's allocations "
                                       "are not the same size as the one that failed", "rule design"),
    "min_runtime_util": Threshold(0.50, "share of the card", "a budget cut for a runtime OOM never goes below "
                                  "this: a shortfall that large is not the budget's to absorb", "rule design"),
}


def value(name: str) -> float:
    return TABLE[name].value


KV_HIGH = value("kv_high")
KV_CRITICAL = value("kv_critical")
KV_BUSY = value("kv_busy")
RELAUNCH_GPU_SHARE_MAX = value("relaunch_gpu_share_max")
WAITING_HIGH = int(value("waiting_high"))
QUIET_KV = value("quiet_kv")
CONCURRENCY_CAP_SHARE = value("concurrency_cap_share")
OVERSIZED_SHARE = value("oversized_request_share")
FRAG_MIN_SHARE = value("fragmentation_min_share")
FRAG_MIN_BYTES = int(value("fragmentation_min_bytes"))
BORDERLINE_SHARE = value("borderline_share")
FRAG_MIN_MULTIPLE = value("fragmentation_min_multiple")
BORDERLINE_CARD_SHARE = value("borderline_card_share")
BORDERLINE_MAX_MULTIPLE = value("borderline_max_multiple")
FRAG_SHARE = value("inactive_split_share")
LEAK_MIN_RISE = value("leak_min_rise")
LEAK_MIN_SPAN_S = value("leak_min_span_s")
LEAK_WINDOW_S = value("leak_window_s")
LONG_UPTIME_S = value("long_uptime_s")
LOW_HIT_RATE = value("prefix_hit_low")
EVICTABLE_SHARE = value("evictable_share")
DISCREPANCY = value("discrepancy")
OTHER_PROCESS_SHARE = value("other_process_share")
OVERSHOOT_FREE_SHARE = value("overshoot_free_share")
UTIL_NO_HEADROOM = value("util_no_headroom")
FREE_MARGIN = value("free_margin")
DEFAULT_UTIL = value("default_util")
MIN_AS_IS_UTIL = value("min_as_is_util")
WARMUP_MARGIN = value("warmup_margin")
MIN_CONFIDENCE = value("min_confidence")
SPECIFIC_WINS = value("specific_wins")
CONFIDENT = value("confident")
EARLY_WARNING_CONFIDENCE = value("early_warning_confidence")
ROOT_CAUSE_WINDOW_S = value("root_cause_window_s")
FAILURE_TRACEBACK_LINES = int(value("failure_traceback_lines"))
SAME_FAILURE_LINES = int(value("same_failure_lines"))
STOP_AFTER_KILL_LINES = int(value("stop_after_kill_lines"))
WEIGHTS_BUDGET_MARGIN = value("weights_budget_margin")
LEAK_MONOTONE_SHARE = value("leak_monotone_share")
STEADY_LOAD_CV = value("steady_load_cv")
KV_PINNED = value("kv_pinned")
RUNTIME_BUDGET_MARGIN = value("runtime_budget_margin")
SPIKE_ALLOCATION_SHARE = value("spike_allocation_share")
SPIKE_ALLOCATION_BYTES = int(value("spike_allocation_bytes"))
UNLOADED_ALLOCATED_SHARE = value("unloaded_allocated_share")
MIN_RUNTIME_UTIL = value("min_runtime_util")

