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


def test_prefix_caching_off_on_old_vllm_drops_the_flag(tmp_path):
    text = ("$ vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 --enable-prefix-caching --max-num-seqs 4096\n"
            "INFO 10-17 14:00:00 api_server.py:1] vLLM API server version 0.6.0\n" + PREFIX_STATS_V0 + "\n" + OOM)
    v = verdict_for(tmp_path, text)
    assert v.oom_class.value == "prefix_cache"
    assert {c.id for c in v.causes} >= {"prefix_cache_pressure", "known_engine_bug"}
    argv = shlex.split(v.command)
    assert "--enable-prefix-caching" not in argv and "--no-enable-prefix-caching" not in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"        # untouched settings stay
    # Sized from the evidence, not halved: 4000 running at 94.6% KV usage -> 4000 x 0.80/0.946 = 3382.7.
    assert argv[argv.index("--max-num-seqs") + 1] == "3382"
    seqs = next(r for r in v.recommendations if r.setting == "max_num_seqs")
    assert seqs.basis == "incident" and "4000 running at 94.6% KV-cache usage" in seqs.why \
        and "(4000 x 0.80/0.946)" in seqs.why
    upgrade = [r for r in v.recommendations if r.setting == "engine_version"]
    assert upgrade and upgrade[0].to_value == "0.6.2" and upgrade[0].basis == "knowledge_base"


def test_prefix_caching_off_on_new_vllm_uses_the_no_flag(tmp_path):
    text = ("$ vllm serve Qwen/Qwen2.5-7B --enable-prefix-caching\n"
            "INFO 10-17 14:00:00 [api_server.py:1] vLLM API server version 0.8.5\n" + PREFIX_STATS_V0 + "\n" + OOM)
    v = verdict_for(tmp_path, text)
    assert "--no-enable-prefix-caching" in shlex.split(v.command)


def test_burst_caps_use_the_observed_concurrency_and_the_gpu_size(tmp_path):
    stats = "\n".join(
        f"INFO 10-17 12:00:{s:02d} metrics.py:349] Avg prompt throughput: 9000.0 tokens/s, Avg generation throughput: "
        f"100.0 tokens/s, Running: 48 reqs, Swapped: 0 reqs, Pending: {s * 2} reqs, GPU KV cache usage: {95 + s / 10:.1f}%, "
        "CPU KV cache usage: 0.0%." for s in range(0, 50, 5))
    v = verdict_for(tmp_path, "$ vllm serve m --max-num-batched-tokens 65536\n" + stats + "\n" + OOM)
    assert v.oom_class.value == "burst"
    recs = {r.setting: r for r in v.recommendations}
    # 48 running with the cache 99.5% full (the fullest of the last readings) -> 48 x 0.80/0.995 = 38.6
    assert recs["max_num_seqs"].to_value == 38 and recs["max_num_seqs"].basis == "incident"
    assert "48 x 0.80/0.995" in recs["max_num_seqs"].why
    assert recs["max_num_batched_tokens"].to_value == 16384 and recs["max_num_batched_tokens"].basis == "rule_of_thumb"
    # Never a "cap" above what is in force or what failed.
    unknown = verdict_for(tmp_path, stats + "\n" + OOM)
    assert "max_num_batched_tokens" not in {r.setting for r in unknown.recommendations}
    few = verdict_for(tmp_path, stats.replace("Running: 48", "Running: 5") + "\n" + OOM)
    seqs = [r.to_value for r in few.recommendations if r.setting == "max_num_seqs"]
    assert seqs == [] or seqs[0] < 5


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
