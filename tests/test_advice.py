"""Advice: the incident's own numbers, real flags of the engine version at hand, and a command
line that changes only what the verdict says."""
from __future__ import annotations

import shlex

import pytest

from triage.api import classify_paths

INVENTED_FLAGS = ("--disable-prefix-cache", "--chunked-prefill-max-len", "--max-num-on-the-fly-batches",
                  "--enable-memory-budget", "--memory-budget-pct", "--enable-multimodal")

PREFIX_STATS_V0 = "\n".join(
    f"INFO 10-17 14:{m:02d}:00 metrics.py:349] Avg prompt throughput: 900.0 tokens/s, Avg generation throughput: "
    f"300.0 tokens/s, Running: 4000 reqs, Swapped: 0 reqs, Pending: {10 + m} reqs, GPU KV cache usage: {90 + m * 0.1:.1f}%, "
    f"CPU KV cache usage: 0.0%.\nINFO 10-17 14:{m:02d}:00 metrics.py:365] Prefix cache hit rate: GPU: 12.40%, CPU: 0.00%"
    for m in range(40, 47))
OOM = ("ERROR 10-17 14:47:01 async_llm_engine.py:64] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
       "1.20 GiB. GPU 0 has a total capacity of 79.15 GiB of which 412.00 MiB is free. Of the allocated memory 76.10 GiB "
       "is allocated by PyTorch, and 310.00 MiB is reserved by PyTorch but unallocated.")


def verdict_for(tmp_path, text: str):
    log = tmp_path / "vllm.log"
    log.write_text(text + "\n")
    return classify_paths([str(log)])[0]


V0_POOL_SHORT = ('ERROR 10-17 14:47:01 engine.py:157] ValueError(\'No usable cache memory left\')\n'
                 'ERROR 10-17 14:47:01 engine.py:157]     raise ValueError("No usable cache memory left")')
V1_POOL_SHORT = "ERROR 10-17 14:47:01 [core.py:710] ValueError: Cannot get 38 free blocks from the pool"


def test_prefix_caching_off_on_old_vllm_drops_the_flag(tmp_path):
    text = ("$ vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 --enable-prefix-caching --max-num-seqs 4096\n"
            "INFO 10-17 14:00:00 api_server.py:1] vLLM API server version 0.6.0\n" + PREFIX_STATS_V0 + "\n" + V0_POOL_SHORT)
    v = verdict_for(tmp_path, text)
    assert v.oom_class.value == "prefix_cache"
    assert "prefix_cache_pressure" in {c.id for c in v.causes}
    argv = shlex.split(v.command)
    assert "--enable-prefix-caching" not in argv and "--no-enable-prefix-caching" not in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"        # untouched settings stay
    assert argv[argv.index("--max-num-seqs") + 1] == "4096"             # a full KV cache is not what failed
    # The 0.6.0 prefix-cache leak is known from a write-up only: named as unconfirmed, no upgrade advised.
    bug = next(c for c in v.causes if c.id == "known_engine_bug")
    assert "unconfirmed upstream" in bug.title
    assert not [r for r in v.recommendations if r.setting == "engine_version"]


def test_prefix_caching_off_on_new_vllm_uses_the_no_flag(tmp_path):
    text = ("$ vllm serve Qwen/Qwen2.5-7B --enable-prefix-caching\n"
            "INFO 10-17 14:00:00 [api_server.py:1] vLLM API server version 0.8.5\n" + V1_POOL_SHORT)
    v = verdict_for(tmp_path, text)
    assert v.oom_class.value == "prefix_cache"
    assert "--no-enable-prefix-caching" in shlex.split(v.command)


def test_a_low_hit_rate_with_load_is_a_burst_whose_advice_is_not_the_cache(tmp_path):
    text = ("$ vllm serve Qwen/Qwen2.5-7B --enable-prefix-caching\n"
            "INFO 10-17 14:00:00 [api_server.py:1] vLLM API server version 0.8.5\n" + PREFIX_STATS_V0 + "\n" + OOM)
    v = verdict_for(tmp_path, text)
    assert v.oom_class.value == "burst"
    assert "enable_prefix_caching" not in {r.setting for r in v.recommendations}


def test_burst_advice_is_not_a_concurrency_cap_from_the_kv_fill(tmp_path):
    stats = "\n".join(
        f"INFO 10-17 12:00:{s:02d} metrics.py:349] Avg prompt throughput: 9000.0 tokens/s, Avg generation throughput: "
        f"100.0 tokens/s, Running: 48 reqs, Swapped: 0 reqs, Pending: {s * 2} reqs, GPU KV cache usage: {95 + s / 10:.1f}%, "
        "CPU KV cache usage: 0.0%." for s in range(0, 50, 5))
    v = verdict_for(tmp_path, "$ vllm serve m --max-num-batched-tokens 65536\n" + stats + "\n" + OOM)
    assert v.oom_class.value == "burst"
    recs = {r.setting: r for r in v.recommendations}
    # The KV cache is allocated up front: 99.5% full means waiting and preemption, not this OOM.
    assert "max_num_seqs" not in recs
    # No frame says what grew, so only the budget: 1.20 GiB tried with 412 MiB free is 0.80 GiB short;
    # with 2% of the 79.15 GiB card, 0.9 (vLLM's default) - 2.38/79.15 = 0.8699, down to 0.86.
    util = recs["gpu_memory_utilization"]
    assert (util.from_value, util.to_value) == (0.9, 0.86) and "the engine's default" in util.why
    assert "max_num_batched_tokens" not in recs      # no frame ties the failure to a step's tokens


def test_fragmentation_recommends_expandable_segments_as_env(tmp_path):
    text = ("$ vllm serve m --gpu-memory-utilization 0.9\n"
            "ERROR 10-20 03:00:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. "
            "GPU 0 has a total capacity of 79.15 GiB of which 1.00 GiB is free. Of the allocated memory 62.00 GiB is "
            "allocated by PyTorch, and 9.87 GiB is reserved by PyTorch but unallocated.\n"
            "ERROR 10-20 03:00:00 [core.py:1] EngineCore encountered a fatal error.")
    v = verdict_for(tmp_path, text)
    assert v.oom_class.value == "chronic"
    assert v.command.startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vllm serve m")


@pytest.mark.parametrize("text", [
    PREFIX_STATS_V0 + "\n" + OOM,
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.",
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests.",
])
def test_no_invented_flag_is_ever_recommended(tmp_path, text):
    v = verdict_for(tmp_path, "$ vllm serve m --max-num-seqs 1024\n" + text)
    assert not any(flag in (v.command or "") for flag in INVENTED_FLAGS)


def test_sglang_gets_sglang_flags(tmp_path):
    text = ("[2026-03-12 14:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B', mem_fraction_static=0.88, "
            "max_running_requests=None, tp_size=1)\n"
            "[2026-03-12 14:05:00 TP0] Prefill batch. #new-seq: 4, #new-token: 8192, #cached-token: 0, cache hit rate: "
            "1.00%, token usage: 0.97, #running-req: 60, #queue-req: 40\n"
            "RuntimeError: Prefill out of memory. Try to lower your batch size. Try to allocate 8192 tokens.\n"
            "Available tokens: 9000 (available_size=100 + evictable_size=8900)")
    v = verdict_for(tmp_path, text)
    assert v.oom_class.value == "prefix_cache"
    assert "--disable-radix-cache" in v.command and "sglang" in v.command


@pytest.mark.parametrize("engine, flag", [
    ("vllm", "--max-num-seqs"), ("sglang", "--max-running-requests"), ("lmdeploy", "--max-batch-size"),
    ("trtllm", "--max_batch_size"), ("llama.cpp", "--parallel"), ("mistral.rs", "--max-seqs"),
    ("an-engine-with-no-table", "--max-num-seqs"),
])
def test_each_engine_gets_its_own_flag_for_a_setting(engine, flag):
    from triage.advice import apply_changes
    from triage.model import Recommendation

    argv, env = apply_changes(["serve", "m"], [Recommendation("max_num_seqs", 64, 32, "why")], engine)
    assert argv == ["serve", "m", flag, "32"] and env == {}


def test_the_current_value_is_read_under_the_engines_own_name():
    from triage.classes.settings import current
    from triage.flowchart.context import first_arg

    class Launch:
        def __init__(self, engine, args):
            self.engine, self.args = engine, args

        def arg(self, *names):
            return first_arg(self.args, names)

    assert current(Launch("lmdeploy", {"cache_max_entry_count": 0.8}), "gpu_memory_utilization") == 0.8
    assert current(Launch("sglang", {"mem_fraction_static": 0.88}), "gpu_memory_utilization") == 0.88
    assert current(Launch("vllm", {"gpu_memory_utilization": 0.9}), "gpu_memory_utilization") == 0.9
