"""Runtime advice follows the engine's memory model: the KV cache is sized once at start-up, so a
runtime OOM is memory outside it that grew. The advice pulls the lever of the part that failed
(read from the failing stack) and sizes the budget cut from the allocator's own numbers, never a
concurrency cap from how full the KV cache was. A serving-loop OOM at a half-empty KV cache is
still a runtime OOM."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage.advice import advise
from triage.evidence.load import load_evidence
from triage.flowchart import decide
from triage.model import OomClass

_V = "/usr/local/lib/python3.12/dist-packages/vllm"
_T = "/usr/local/lib/python3.12/dist-packages/torch"

START_70B = """\
(APIServer pid=1) INFO 11-20 10:00:01 [api_server.py:1839] vLLM API server version 0.11.0
(APIServer pid=1) INFO 11-20 10:00:01 [utils.py:233] non-default args: {'model_tag': 'meta-llama/Llama-3.3-70B-Instruct', 'model': 'meta-llama/Llama-3.3-70B-Instruct', 'max_model_len': 32768, 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.95, 'max_num_batched_tokens': 16384, 'max_num_seqs': 256}
(EngineCore_DP0 pid=210) INFO 11-20 10:01:50 [gpu_worker.py:298] Available KV cache memory: 29.87 GiB
(EngineCore_DP0 pid=210) INFO 11-20 10:01:50 [kv_cache_utils.py:1087] GPU KV cache size: 195,760 tokens
(EngineCore_DP0 pid=210) INFO 11-20 10:02:31 [core.py:210] init engine (profile, create kv cache, warmup model) took 96.12 seconds
(APIServer pid=1) INFO 11-20 10:02:33 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
"""


def _stats(kv: float, hit: float, running: int = 61, waiting: int = 0) -> str:
    return (f"(APIServer pid=1) INFO 11-20 10:14:0{{s}} [loggers.py:127] Engine 000: Avg prompt throughput: 31250.4 "
            f"tokens/s, Avg generation throughput: 1204.8 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
            f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {hit:.1f}%\n")


def _oom(tried: str = "2.32 GiB", free: str = "1.06 GiB", in_use: str = "78.10 GiB") -> str:
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of "
            f"79.19 GiB of which {free} is free. Including non-PyTorch memory, this process has {in_use} memory in use. "
            "Of the allocated memory 77.41 GiB is allocated by PyTorch, with 118.00 MiB allocated in private pools "
            "(e.g., CUDA Graphs), and 212.33 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
            "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


BUSY_LOOP = [
    (f"{_V}/v1/executor/multiproc_executor.py", 666, "worker_busy_loop", "output = func(*args, **kwargs)"),
    (f"{_V}/v1/worker/gpu_worker.py", 447, "execute_model", "output = self.model_runner.execute_model(scheduler_output,"),
    (f"{_T}/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
]
MLP = BUSY_LOOP + [
    (f"{_V}/v1/worker/gpu_model_runner.py", 2277, "execute_model", "model_output = self._model_forward("),
    (f"{_V}/model_executor/models/llama.py", 318, "forward", "hidden_states = self.mlp(hidden_states)"),
    (f"{_V}/model_executor/models/llama.py", 96, "forward", "gate_up, _ = self.gate_up_proj(x)"),
    (f"{_V}/model_executor/layers/linear.py", 565, "forward", "output_parallel = self.quant_method.apply(self, input_, bias)"),
    (f"{_V}/model_executor/layers/utils.py", 102, "default_unquantized_gemm", "return torch.nn.functional.linear(x, weight, bias)"),
]
SAMPLER = BUSY_LOOP + [
    (f"{_V}/v1/worker/gpu_model_runner.py", 2328, "execute_model", "sampler_output = self.sampler("),
    (f"{_V}/v1/sample/sampler.py", 93, "forward", "sampled, processed_logprobs = self.sample(logits, sampling_metadata)"),
    (f"{_V}/v1/sample/sampler.py", 160, "sample", "random_sampled, processed_logprobs = self.topk_topp_sampler("),
    (f"{_V}/v1/sample/ops/topk_topp_sampler.py", 104, "forward_native", "logits = self.apply_top_k_top_p(logits, k, p)"),
    (f"{_V}/v1/sample/ops/topk_topp_sampler.py", 184, "apply_top_k_top_p", "logits_sort, logits_idx = logits.sort(dim=-1, descending=False)"),
]


def _worker_failure(frames, oom: str) -> str:
    prefix = "(Worker_TP0 pid=412) ERROR 11-20 10:14:09 [multiproc_executor.py:671] "
    lines = ["WorkerProc hit an exception.", "Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    lines.append(oom)
    out = "".join(prefix + line + "\n" for line in lines)
    return out + ("(EngineCore_DP0 pid=210) ERROR 11-20 10:14:09 [core.py:710] EngineCore encountered a fatal error.\n"
                  "(APIServer pid=1) ERROR 11-20 10:14:09 [async_llm.py:480] AsyncLLM output_handler failed.\n"
                  "(APIServer pid=1) INFO:     10.0.0.7:50312 - \"POST /v1/chat/completions HTTP/1.1\" 500 Internal Server Error\n")


def _log(tmp_path: Path, body: str, kv: float = 88.0, hit: float = 11.2, running: int = 61) -> str:
    stats = "".join(_stats(kv - 3 + i, hit, running).replace("{s}", str(i)) for i in range(3))
    path = tmp_path / "vllm.log"
    path.write_text(START_70B + stats + body, encoding="utf-8")
    return str(path)


def _advised(path: str):
    verdict, incident = decide(load_evidence([path]))
    advise(verdict, incident)
    return verdict, {r.setting: r for r in verdict.recommendations}


def test_over_budget_without_frames_lowers_the_budget_by_the_shortfall_not_max_num_seqs(tmp_path):
    body = ("(EngineCore_DP0 pid=210) ERROR 11-20 10:14:09 [core.py:710] EngineCore encountered a fatal error.\n"
            "(EngineCore_DP0 pid=210) ERROR 11-20 10:14:09 [core.py:710] " + _oom() + "\n")
    verdict, recs = _advised(_log(tmp_path, body, kv=97.0))
    assert verdict.oom_class is OomClass.BURST
    assert "max_num_seqs" not in recs, recs["max_num_seqs"].why
    util = recs["gpu_memory_utilization"]
    # (2.32 - 1.06) GiB short + 2% of 79.19 GiB, off 0.95 of the card: 0.95 - 2.84/79.19 = 0.914 -> 0.91
    assert (util.from_value, util.to_value) == (0.95, 0.91)
    assert "2.87 GiB over its 0.95 budget (75.23 GiB)" in util.why and "1.26 GiB short" in util.why
    assert "--gpu-memory-utilization 0.91" in verdict.command
    for kept in ("--tensor-parallel-size 2", "--max-num-batched-tokens 16384", "--max-model-len 32768",
                 "--max-num-seqs 256"):
        assert kept in verdict.command


def test_a_forward_activation_cuts_the_tokens_of_a_step_by_the_tensors_arithmetic(tmp_path):
    verdict, recs = _advised(_log(tmp_path, _worker_failure(MLP, _oom())))
    assert verdict.oom_class is OomClass.BURST
    tokens = recs["max_num_batched_tokens"]
    # keep 1 - 1.26/2.32 = 0.46 of the step so that the failed tensor alone frees the shortfall:
    # 16384 x 0.46 = 7489 -> 7168; the tensor is then 1.02 GiB, 1.31 GiB less
    assert (tokens.from_value, tokens.to_value) == (16384, 7168)
    assert "default_unquantized_gemm in layers/utils.py:102" in tokens.why and "1.31 GiB less" in tokens.why
    assert "max_num_seqs" not in recs and "enable_prefix_caching" not in recs
    assert "enable_chunked_prefill" not in recs       # V1 always chunks
    assert recs["gpu_memory_utilization"].to_value == 0.91


def test_the_sampler_cuts_the_sequences_it_samples_by_the_tensors_arithmetic(tmp_path):
    oom = _oom(tried="1.29 GiB", free="512.00 MiB", in_use="78.69 GiB")
    verdict, recs = _advised(_log(tmp_path, _worker_failure(SAMPLER, oom), running=61))
    seqs = recs["max_num_seqs"]
    # keep 1 - 0.79/1.29 = 0.39 of the 61 sequences sampled at once: 23
    assert (seqs.from_value, seqs.to_value) == (256, 23)
    assert "sampler" in seqs.why and "apply_top_k_top_p in ops/topk_topp_sampler.py:184" in seqs.why
    assert "61 running when it failed" in seqs.why
    assert "max_num_batched_tokens" not in recs


def test_another_process_on_the_card_is_named_as_a_step_for_a_person(tmp_path):
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.19 GiB of which 310.00 MiB is free. Process 5120 has 9.50 GiB memory in use. Including non-PyTorch "
           "memory, this process has 69.37 GiB memory in use. Of the allocated memory 68.10 GiB is allocated by "
           "PyTorch, and 180.00 MiB is reserved by PyTorch but unallocated.")
    verdict, recs = _advised(_log(tmp_path, _worker_failure(MLP, oom)))
    other = recs["other_gpu_processes"]
    assert other.manual and "PID 5120 (9.50 GiB)" in other.why
    assert "within its 0.95 budget" in recs["gpu_memory_utilization"].why
    assert "other_gpu_processes" not in (verdict.command or "")


def test_sglang_lowers_mem_fraction_static_and_keeps_its_running_requests(tmp_path):
    frames = "".join(f'  File "{p}", line {n}, in {f}\n    {c}\n' for p, n, f, c in [
        ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 2305, "run_scheduler_process",
         "scheduler.event_loop_overlap()"),
        ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 780, "event_loop_overlap",
         "result = self.run_batch(batch)"),
        ("/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", 1701, "forward",
         "return self.forward_extend("),
        ("/sgl-workspace/sglang/python/sglang/srt/models/qwen2.py", 260, "forward", "gate_up, _ = self.gate_up_proj(x)"),
        ("/sgl-workspace/sglang/python/sglang/srt/layers/linear.py", 430, "forward",
         "output_parallel = self.quant_method.apply(self, input_, bias)"),
    ])
    text = ("[2026-03-12 14:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', "
            "mem_fraction_static=0.88, max_running_requests=128, chunked_prefill_size=8192, tp_size=4)\n"
            "[2026-03-12 14:05:00 TP0] Prefill batch. #new-seq: 4, #new-token: 8192, #cached-token: 0, token usage: "
            "0.41, #running-req: 60, #queue-req: 0\n"
            "[2026-03-12 14:05:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" + frames
            + _oom(tried="3.00 GiB", free="1.20 GiB", in_use="77.98 GiB") + "\n")
    path = tmp_path / "sglang.log"
    path.write_text(text, encoding="utf-8")
    verdict, recs = _advised(str(path))
    assert verdict.oom_class is OomClass.BURST
    assert "max_num_seqs" not in recs
    assert recs["gpu_memory_utilization"].to_value < 0.88
    assert "--mem-fraction-static" in verdict.command and "--max-running-requests 128" in verdict.command
    assert recs["max_num_batched_tokens"].to_value == 3072     # 8192 x (1 - 1.80/3.00) = 3276 -> 3072
    assert "--chunked-prefill-size 3072" in verdict.command


@pytest.mark.parametrize("kv", [41.0, 12.0])
def test_a_serving_loop_oom_at_a_half_empty_cache_is_a_runtime_oom_not_unknown(tmp_path, kv):
    verdict, recs = _advised(_log(tmp_path, _worker_failure(MLP, _oom()), kv=kv, hit=40.3))
    assert verdict.oom_class is OomClass.BURST, verdict.summary
    assert "gpu_memory_utilization" in recs
    prefix_step = next(s for s in verdict.path if "prefix-cache" in s.question)
    assert "off or unknown" not in prefix_step.why and "40.3%" in prefix_step.why


def test_a_low_hit_rate_alone_is_not_a_prefix_cache_oom(tmp_path):
    verdict, recs = _advised(_log(tmp_path, _worker_failure(MLP, _oom()), kv=88.0, hit=11.0))
    assert verdict.oom_class is OomClass.BURST, verdict.summary
    assert "enable_prefix_caching" not in recs
