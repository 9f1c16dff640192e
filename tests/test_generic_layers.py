"""The generic reading layers: normalisation every reader sees, the lifecycle-phase vocabulary,
failure families, and the decision that keeps an unexplained error from reading as healthy."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage.api import classify_paths
from triage.evidence.logline import parse_line
from triage.timeref import default_reference


def _classify(tmp_path: Path, log: str):
    (tmp_path / "server.log").write_text(log, encoding="utf-8")
    verdict, _ = classify_paths([str(tmp_path)])
    return verdict


def test_markdown_bold_around_a_pasted_line_is_peeled():
    line = parse_line("**ERROR 04-02 08:25:00 [core.py:68] torch.OutOfMemoryError: CUDA out of memory.**",
                      default_reference(2026))
    assert line.level == "ERROR"
    assert line.message == "torch.OutOfMemoryError: CUDA out of memory."


def test_worker_method_names_the_startup_phase(tmp_path):
    v = _classify(tmp_path, "ERROR 08-01 10:00:00 multiproc_worker_utils.py:226] Exception in worker VllmWorkerProcess "
                            "while processing method load_model: CUDA out of memory. Tried to allocate 112.00 MiB. "
                            "GPU 1 has a total capacity of 23.65 GiB of which 20.06 MiB is free.\n")
    assert v.oom_class.value == "startup"
    assert "load_model" in v.path[1].why


def test_loader_thread_target_names_the_startup_phase(tmp_path):
    v = _classify(tmp_path, "Exception in thread Thread-3 (_create_weight_func):\n"
                            "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
                            "/lmdeploy/src/turbomind/core/allocator.cc:50\n")
    assert v.oom_class.value == "startup"


def test_prompt_in_progress_on_the_failing_line_is_serving(tmp_path):
    v = _classify(tmp_path, "Processing Prompt [BLAS] (3584 / 5525 tokens)CUDA error: out of memory\n")
    assert v.oom_class.value == "burst"


def test_an_error_no_signature_explains_is_not_healthy(tmp_path):
    v = _classify(tmp_path, "time=2025-01-01T00:00:00.000Z level=INFO source=server.go:1 msg=\"starting llama server\"\n"
                            "time=2025-01-01T00:00:01.000Z level=ERROR source=server.go:2 msg=\"post predict\" "
                            "error=\"EOF\"\n")
    assert v.oom_class.value == "unknown"


def test_preemption_alone_is_back_pressure_not_a_failure(tmp_path):
    v = _classify(tmp_path, "WARNING 05-01 10:00:00 scheduler.py:1089] Sequence group 264 is preempted by "
                            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
                            "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
                            "provide more KV cache memory. total_num_cumulative_preemption=1\n")
    assert v.oom_class.value == "no_oom"


@pytest.mark.parametrize("log", [
    "(raylet) Memory on the node (IP: 10.0.0.1, ID: 9af1) where the task (actor ID: 1, name=RayWorkerWrapper.__init__, "
    "pid=77, memory used=80.1GB) was running was 240.32GB / 251.50GB (0.955), which exceeds the memory usage thre\n"
    "shold of 0.95. Ray killed this worker (ID: w1) because it was the most recently scheduled task.\n",
    "Error: llama runner process has terminated: signal: killed\n",
    "TypeError: '<=' not supported between instances of 'int' and 'NoneType'\n",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for "
    "recv operation to complete\n",
])
def test_look_alike_families(tmp_path, log):
    assert _classify(tmp_path, log).oom_class.value == "not_gpu_oom"


def test_offline_progress_shows_serving(tmp_path):
    v = _classify(tmp_path, "Processed prompts:  45%|████▌     | 450/1000 [00:30<00:36, 15.1it/s]\n")
    assert v.oom_class.value == "no_oom"
    assert "serving" in v.summary


def test_ipython_frames_read_as_interpreter_frames():
    line = parse_line("File [/opt/conda/lib/python3.12/site-packages/vllm/entrypoints/llm.py:214]"
                      "(http://10.0.0.1:8888/opt/conda/lib/python3.12/site-packages/vllm/entrypoints/llm.py#line=213), "
                      "in LLM.__init__(self, model, tokenizer)", default_reference(2026))
    assert line.message == 'File "/opt/conda/lib/python3.12/site-packages/vllm/entrypoints/llm.py", line 214, in __init__'


def test_notebook_traceback_in_the_engine_constructor_is_startup(tmp_path):
    v = _classify(tmp_path, "OutOfMemoryError                          Traceback (most recent call last)\n"
                            "Cell In[2], line 1\n----> 1 llm = LLM(model=\"m\")\n\n"
                            "File /opt/conda/lib/python3.12/site-packages/vllm/entrypoints/llm.py:214, in LLM.__init__(self, model)\n"
                            "    189     raise TypeError(\n")
    assert v.oom_class.value == "startup"


def test_pipe_separated_python_logging_prefix_is_peeled():
    line = parse_line('2024-03-20 19:18:27 | ERROR | stderr |   File "/srv/worker.py", line 290, in <module>',
                      default_reference(2026))
    assert line.message.strip() == 'File "/srv/worker.py", line 290, in <module>'
    assert line.indented


def test_cut_stack_calling_a_startup_function_is_startup(tmp_path):
    v = _classify(tmp_path, "INFO 03-20 19:18:27 llm_engine.py:322] # GPU blocks: 1842, # CPU blocks: 655\n"
                            "Traceback (most recent call last):\n"
                            '  File "/srv/worker.py", line 290, in <module>\n'
                            "    engine = AsyncLLMEngine.from_engine_args(engine_args)\n"
                            "CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert v.oom_class.value == "startup"


def test_oom_returned_in_an_api_error_body_is_serving(tmp_path):
    v = _classify(tmp_path, "openai.InternalServerError: Error code: 500 - {'object': 'error', 'message': 'CUDA out of "
                            "memory. Tried to allocate 42.00 MiB (GPU 0; 31.75 GiB total capacity; 30.70 GiB already "
                            "allocated; 13.69 MiB free; 30.87 GiB reserved in total by PyTorch)', 'code': 50001}\n")
    assert v.oom_class.value == "burst"
    assert "API error" in v.path[1].why


def test_failed_generation_step_is_serving(tmp_path):
    v = _classify(tmp_path, "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
                            "llama_decode: failed to decode, ret = -3\n\n"
                            "Failed to predict at 43! Check your context buffer sizes!\n")
    assert v.oom_class.value == "burst"


def test_named_loader_function_in_an_error_is_startup(tmp_path):
    v = _classify(tmp_path, "[09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] Error executing load_single_module with args "
                            "('model.layers.9.mlp.gate_up_proj', Linear()): CUDA out of memory. Tried to allocate 40.00 MiB. "
                            "GPU 0 has a total capacity of 22.07 GiB of which 20.62 MiB is free.\n")
    assert v.oom_class.value == "startup"


@pytest.mark.parametrize("log", [
    "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 137438953504\n"
    "llama_kv_cache_init: failed to allocate buffer for kv cache\n",
    "Exception: No free chunks in cpu memory. Shouldn't happen in local cpu-only backend.\n",
    "ggml_cuda_host_malloc: failed to allocate 2.45 MiB of pinned memory: system has unsupported display driver / "
    "cuda driver combination\nllama_new_context_with_model:        CPU  output buffer size =     2.45 MiB\n",
    "[TensorRT-LLM][ERROR] Encountered an error in forward function: [TensorRT-LLM][ERROR] Assertion failed: "
    "freeBlockIterator.has_value() (/src/tensorrt_llm/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:249)\n",
    'data:{"error":"Request failed during generation: Server error: tensors used as indices must be long, byte or bool '
    'tensors","error_type":"generation"}\n',
])
def test_more_look_alike_families(tmp_path, log):
    assert _classify(tmp_path, log).oom_class.value == "not_gpu_oom"


def test_configuration_lines_alone_are_not_a_healthy_server(tmp_path):
    v = _classify(tmp_path, "INFO 06-28 23:40:03 api_server.py:206] vLLM API server version 0.5.0.post1\n"
                            "INFO 06-28 23:40:03 llm_engine.py:164] Initializing an LLM engine (v0.5.0.post1) with "
                            "config: model='m', tokenizer='m', max_seq_len=131072\n")
    assert v.oom_class.value == "unknown"


def test_engine_memory_estimate_is_startup_progress(tmp_path):
    v = _classify(tmp_path, "[2024-03-25 15:35:00] INFO engine.py:243: Estimated total single GPU memory usage: "
                            "14361.14 MB (Parameters: 3615.13 MB. KVCache: 10689.56 MB. Temporary buffer: 56.44 MB)\n")
    assert v.oom_class.value == "no_oom"


# --- a server no signature knows ("myserve"), and shapes the engines' own entries do not cover -----

def test_an_unknown_server_failing_while_it_loads_is_a_startup_oom(tmp_path):
    v = _classify(tmp_path, "2026-05-01 10:00:00 INFO myserve: loading model weights from /models/m (4 shards)\n"
                          "2026-05-01 10:00:09 INFO myserve: KV buffer size = 12288.00 MiB\n"
                          "2026-05-01 10:00:10 ERROR myserve: RuntimeError: Failed to initialize the engine: out of memory")
    assert v.oom_class.value == "startup" and v.confidence >= 0.8


def test_an_unknown_server_failing_after_it_served_is_not_a_startup_oom(tmp_path):
    v = _classify(tmp_path, "2026-05-01 10:00:00 INFO myserve: server is listening on http://0.0.0.0:9000\n"
                          "2026-05-01 10:01:00 INFO myserve: request 17 done, generation speed: 41.2 tok/s\n"
                          "2026-05-01 10:02:00 ERROR myserve: Exception while processing request 4f2a: insufficient GPU "
                          "memory for the batch")
    assert v.oom_class.value == "burst"


def test_a_flattened_traceback_is_read_frame_by_frame(tmp_path):
    """The frames of a traceback pasted onto one line still place the failure in the serving step."""
    v = _classify(tmp_path,
                '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 390, in step '
                'model_output = self.execute_model(scheduler_output) ^^^^ File "/usr/lib/python3.12/site-packages/'
                'vllm/v1/worker/gpu_model_runner.py", line 4308, in _get_prompt_logprobs_dict logprobs = '
                'self.sampler.compute_logprobs(logits)\n'
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.71 GiB. GPU 0 has a total capacity of "
                "22.30 GiB of which 1.52 GiB is free. Of the allocated memory 19.55 GiB is allocated by PyTorch, and "
                "245.00 MiB is reserved by PyTorch but unallocated.")
    assert v.oom_class.value == "burst"
    assert "serving loop" in v.path[1].why


def test_an_error_naming_another_cause_leans_not_a_gpu_oom_unless_the_server_served_on(tmp_path):
    error = "ERROR 05-01 10:00:05 [serving_chat.py:200] ValueError: Unsupported response_format type: xml_schema"
    alone = _classify(tmp_path, "INFO 05-01 10:00:00 [api_server.py:100] vLLM API server version 0.8.5\n" + error)
    assert alone.oom_class.value == "not_gpu_oom" and alone.confidence < 0.6       # a lean, and it says so
    served_on = _classify(tmp_path, "INFO 05-01 10:00:00 [api_server.py:100] vLLM API server version 0.8.5\n" + error + "\n"
                        'INFO:     127.0.0.1:5002 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert served_on.oom_class.value == "no_oom"


def test_unallocated_memory_about_the_request_size_is_not_fragmentation(tmp_path):
    """1.05 times the failed request sat reserved but unallocated: borderline, never chronic; 1.5
    times it (and over 3% of the card) is fragmentation."""
    def oom(unallocated_mib: int) -> str:
        return ("ERROR 05-01 10:02:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                f"1.00 GiB. GPU 0 has a total capacity of 23.57 GiB of which 20.00 MiB is free. Of the allocated memory "
                f"21.00 GiB is allocated by PyTorch, and {unallocated_mib}.00 MiB is reserved by PyTorch but unallocated.")
    served = 'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    assert _classify(tmp_path, served + oom(1075)).oom_class.value != "chronic"
    assert _classify(tmp_path, served + oom(1536)).oom_class.value == "chronic"


def test_an_oom_inside_a_javascript_clients_error_object_was_a_request(tmp_path):
    """A chat front end printing the backend's error answer as an object literal: the OOM was that
    request's, so the server was serving."""
    v = _classify(tmp_path, "{\n    msg: 'ran out of memory: CUDA out of memory. Tried to allocate 26.00 MiB (GPU 0; 14.76 GiB "
                            "total capacity; 13.65 GiB already allocated; 9.88 MiB free; 13.85 GiB reserved in total by "
                            "PyTorch)',\n    type: 'out_of_memory.gpu.cuda'\n}")
    assert v.oom_class.value == "burst"


def test_a_generation_summary_with_no_tokens_is_the_request_that_failed(tmp_path):
    v = _classify(tmp_path, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 8.00 GiB "
                            "total capacity; 6.50 GiB already allocated; 0 bytes free; 6.60 GiB reserved in total by "
                            "PyTorch)\nOutput generated in 1.20 seconds (0.00 tokens/s, 0 tokens, context 3100, seed 7)")
    assert v.oom_class.value == "burst"


def test_a_line_logged_at_error_level_is_a_failure_even_when_no_entry_names_it(tmp_path):
    """Start-up progress then an error no entry knows: never an all-clear; the same error followed by
    requests served was handled (one request's), and the server is healthy."""
    start = "2026-05-01T10:00:00.000000Z  INFO myserve::loader: Waiting for shard to be ready... rank=0\n"
    error = "2026-05-01T10:00:05.000000Z ERROR myserve::router: upstream worker returned an unexpected reply\n"
    assert _classify(tmp_path, start + error).oom_class.value == "unknown"
    served = '127.0.0.1 - - [01/May/2026:10:00:09 +0000] "POST /v1/completions HTTP/1.1" 200 512\n'
    assert _classify(tmp_path, start + error + served).oom_class.value == "no_oom"
