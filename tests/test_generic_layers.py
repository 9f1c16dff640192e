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


@pytest.mark.parametrize("log, function", [
    ("CUDA error: out of memory\nalloc_tensor_range: failed to allocate CUDA0 buffer of size 34359738368\n",
     "alloc_tensor_range"),
    ("CUDA error: out of memory\nllama_kv_cache_init: failed to allocate buffer for kv cache\n", "llama_kv_cache_init"),
])
def test_a_native_function_named_on_the_failure_tells_the_phase(tmp_path, log, function):
    v = _classify(tmp_path, log)
    assert v.oom_class.value == "startup"
    assert f"{function} reported the failure" in v.path[1].why


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


def test_ipython_7_frame_headers_read_as_interpreter_frames():
    # IPython 7 heads a frame "PATH in FUNC(ARGS)", Colab with the path as a link; no line number
    colab = parse_line("[/usr/local/lib/python3.10/dist-packages/exllamav2/model.py](https://localhost:8080/#) in "
                       "load_autosplit_gen(self, cache)", default_reference(2026))
    assert colab.message == 'File "/usr/local/lib/python3.10/dist-packages/exllamav2/model.py", line 0, in load_autosplit_gen'
    plain = parse_line("/opt/lib/python3.8/site-packages/x/runner.py in step(self, batch)", default_reference(2026))
    assert plain.message == 'File "/opt/lib/python3.8/site-packages/x/runner.py", line 0, in step'
    for other in ("[<ipython-input-28-595e>](https://localhost:8080/#) in <cell line: 12>()",
                  "loading /models/a.py in 3 parts (x)"):
        assert parse_line(other, default_reference(2026)).message == other


@pytest.mark.parametrize("raw, message", [
    ("vllm-service  | INFO 09-03 22:42:03 [api_server.py:1] ready", "ready"),     # compose v1 / container_name
    ("vllm-1  | INFO 09-03 22:42:03 [api_server.py:1] ready", "ready"),           # compose v2
    ("ERROR | the disk is full", "ERROR | the disk is full"),                       # a level word is no service
])
def test_a_compose_service_prefix_is_peeled(raw, message):
    assert parse_line(raw, default_reference(2026)).message == message


@pytest.mark.parametrize("row", [
    "| tensorrt_llm   | 1       | READY  |",            # Triton's model status table
    "|  4096 |   1024 |      0 |   44.583 |    91.87 |   93.665 |    10.93 |",   # a benchmark's results
])
def test_a_table_row_is_no_gutter_or_service_prefix(tmp_path, row):
    # A row's leading "| " and first cell look like a CI gutter and a compose service name; a line
    # ending in "|" is a table row and keeps them, so what the table says is read.
    assert parse_line(row, default_reference(2026)).message == row
    assert _classify(tmp_path, "+-------+\n" + row + "\n").oom_class.value == "no_oom"


@pytest.mark.parametrize("raw", [
    # journalctl's short format and rsyslog: the unit's own line follows "host prog[pid]: "
    "Jun 01 10:00:07 gpu-node-3 python3[4121]: ERROR 06-01 10:00:07 [core.py:343] EngineCore failed to start.",
    "Jun  1 10:00:07 gpu-node-3 docker[991]: #033[1;31mERROR#033[0m 06-01 10:00:07 [core.py:343] EngineCore failed to start.",
    # kubectl logs --prefix (and stern): "[pod/NAME/CONTAINER] "
    "[pod/vllm-0/vllm] ERROR 06-01 10:00:07 [core.py:343] EngineCore failed to start.",
])
def test_collector_envelopes_before_the_engines_own_prefix_are_peeled(raw):
    line = parse_line(raw, default_reference(2026))
    assert line.message == "EngineCore failed to start."
    assert line.level == "ERROR" and line.time is not None


@pytest.mark.parametrize("raw, message, level", [
    # Xinference's "asctime name pid LEVEL msg", its own lines and the engines' it relays
    ("2025-03-01 10:15:02,481 xinference.core.model 48377 ERROR    Model actor is out of memory.",
     "Model actor is out of memory.", "ERROR"),
    ("2025-03-01 10:15:02,481 vllm.engine.llm_engine 48377 INFO     # GPU blocks: 1234, # CPU blocks: 512",
     "# GPU blocks: 1234, # CPU blocks: 512", "INFO"),
    # a wrapper's "name - LEVEL - " in front of vLLM's own prefix
    ("2024-06-01 10:00:00,123 - app - INFO - (EngineCore_DP0 pid=12) ERROR 05-01 10:00:00 [core.py:1] EngineCore failed to start.",
     "EngineCore failed to start.", "ERROR"),
    # an engine's own logger given that layout by a wrapper's logging config
    ("2024-06-01 10:00:00,123 - vllm.engine.llm_engine - INFO - # GPU blocks: 1234, # CPU blocks: 512",
     "# GPU blocks: 1234, # CPU blocks: 512", "INFO"),
    # ... but not in front of another program's bare message: its words keep their prefix
    ("2024-06-01 10:00:00,123 - root - ERROR - Killed", "root - ERROR - Killed", "ERROR"),
])
def test_wrapper_logger_prefixes_are_peeled_where_they_are_known(raw, message, level):
    line = parse_line(raw, default_reference(2026))
    assert (line.message, line.level) == (message, level) and line.time is not None


def test_a_syslog_line_with_no_engine_prefix_keeps_its_program():
    line = parse_line("Feb 01 14:25:31 host kernel: Out of memory: Killed process 4121 (python3)",
                      default_reference(2026))
    assert line.message == "Out of memory: Killed process 4121 (python3)"
    assert (line.origin, line.file) == ("syslog", "kernel")


def test_pipe_separated_python_logging_prefix_is_peeled():
    line = parse_line('2024-03-20 19:18:27 | ERROR | stderr |   File "/srv/worker.py", line 290, in <module>',
                      default_reference(2026))
    assert line.message.strip() == 'File "/srv/worker.py", line 290, in <module>'
    assert line.indented


def test_oom_returned_in_an_api_error_body_is_serving(tmp_path):
    v = _classify(tmp_path, "openai.InternalServerError: Error code: 500 - {'object': 'error', 'message': 'CUDA out of "
                            "memory. Tried to allocate 42.00 MiB (GPU 0; 31.75 GiB total capacity; 30.70 GiB already "
                            "allocated; 13.69 MiB free; 30.87 GiB reserved in total by PyTorch)', 'code': 50001}\n")
    assert v.oom_class.value == "burst"
    assert "API error" in v.path[1].why


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


# --- a server no signature knows ("myserve"), and shapes the engines' own entries do not cover -----

def test_an_unknown_server_failing_while_it_loads_is_a_startup_oom(tmp_path):
    v = _classify(tmp_path, "2026-05-01 10:00:00 INFO myserve: loading model weights from /models/m (4 shards)\n"
                          "2026-05-01 10:00:09 INFO myserve: KV buffer size = 12288.00 MiB\n"
                          "2026-05-01 10:00:10 ERROR myserve: RuntimeError: Failed to initialize the engine: out of memory")
    assert v.oom_class.value == "startup" and v.confidence >= 0.8


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


def test_slack_far_above_a_small_request_but_under_the_floor_is_memory_in_use(tmp_path):
    """A 16 MiB request failing beside 1 GiB reserved-but-unallocated (4% of the card, 64 times the
    request): the slack a serving engine keeps cached, not a piece the request could have used; with
    serving frames it is a burst, not left open as borderline."""
    log = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 MiB (GPU 0; 23.67 GiB total "
           "capacity; 20.76 GiB already allocated; 30.38 MiB free; 21.76 GiB reserved in total by PyTorch)\n"
           "Traceback (most recent call last):\n"
           '  File "/srv/webui/modules/text_generation.py", line 252, in generate_with_callback\n'
           "    shared.model.generate(**kwargs)\n"
           '  File "/venv/lib/python3.10/site-packages/transformers/generation/utils.py", line 1530, in generate\n'
           "    return self.contrastive_search(\n")
    assert _classify(tmp_path, log).oom_class.value == "burst"


def test_a_compute_buffer_of_gigabytes_at_a_quiet_slot_is_a_spike_even_without_the_card_size(tmp_path):
    log = ("main: server is listening on http://0.0.0.0:8008 - starting the main loop\n"
           "slot update_slots: id  0 | task 0 | new prompt, n_ctx_slot = 32768, n_keep = 0, n_prompt_tokens = 72\n"
           "slot update_slots: id  0 | task 0 | prompt processing progress, n_past = 72, n_tokens = 72, progress = 1.0\n"
           "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 1: cudaMalloc failed: out of "
           "memory\nggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\n")
    v = _classify(tmp_path, log)
    assert v.oom_class.value == "burst"
    assert "9.63 GiB" in v.summary


def test_a_line_logged_at_error_level_is_a_failure_even_when_no_entry_names_it(tmp_path):
    """Start-up progress then an error no entry knows: never an all-clear; the same error followed by
    requests served was handled (one request's), and the server is healthy."""
    start = "2026-05-01T10:00:00.000000Z  INFO myserve::loader: Waiting for shard to be ready... rank=0\n"
    error = "2026-05-01T10:00:05.000000Z ERROR myserve::router: upstream worker returned an unexpected reply\n"
    assert _classify(tmp_path, start + error).oom_class.value == "unknown"
    served = '127.0.0.1 - - [01/May/2026:10:00:09 +0000] "POST /v1/completions HTTP/1.1" 200 512\n'
    assert _classify(tmp_path, start + error + served).oom_class.value == "no_oom"


# --- engine-independent readings added from the sixth mined batch's training half -----------------------

@pytest.mark.parametrize("raw, level", [
    ("2025-07-24 07:59:27,625 - lmdeploy - ERROR - engine.py:1135 - exception happened", "ERROR"),
    ("ERROR:    Exception in ASGI application", "ERROR"),
    ('time=2024-04-18T20:59:02.533-06:00 level=ERROR source=server.go:283 msg="error starting llama server"', "ERROR"),
    ("E0510 07:57:30.770724 21661 model_instance_state.cc:840] failed", "ERROR"),
    ("3.45.098.561 E srv  update_slots: decode() failed", "ERROR"),
    ("2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start", "ERROR"),
    ("the ERROR [x] was seen", None),
    ("[37723] 52.17.408.129 E init_batch: failed to prepare attention ubatches", "ERROR"),
    ("[TensorRT-LLM][WARNING] a warning", "WARNING"),
    ("hello - world - not a level", None),
])
def test_the_level_of_a_line_in_any_common_logger_format_is_read(raw, level):
    assert parse_line(raw, default_reference(2026)).level == level


# One log, the class its engine-independent reading decides (no engine's own entry reads these lines).
READINGS = {
    "loader thread target names the startup phase": (
        "Exception in thread Thread-3 (_create_weight_func):\n"
        "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
        "/lmdeploy/src/turbomind/core/allocator.cc:50\n", "startup"),
    "prompt in progress on the failing line is serving": (
        "Processing Prompt [BLAS] (3584 / 5525 tokens)CUDA error: out of memory\n", "burst"),
    "an error no signature explains is not healthy": (
        "time=2025-01-01T00:00:00.000Z level=INFO source=server.go:1 msg=\"starting llama server\"\n"
        "time=2025-01-01T00:00:01.000Z level=ERROR source=server.go:2 msg=\"post predict\" "
        "error=\"EOF\"\n", "unknown"),
    "preemption alone is back pressure not a failure": (
        "WARNING 05-01 10:00:00 scheduler.py:1089] Sequence group 264 is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
        "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
        "provide more KV cache memory. total_num_cumulative_preemption=1\n", "no_oom"),
    "notebook traceback in the engine constructor is startup": (
        "OutOfMemoryError                          Traceback (most recent call last)\n"
        "Cell In[2], line 1\n----> 1 llm = LLM(model=\"m\")\n\n"
        "File /opt/conda/lib/python3.12/site-packages/vllm/entrypoints/llm.py:214, in LLM.__init__(self, model)\n"
        "    189     raise TypeError(\n", "startup"),
    "cut stack calling a startup function is startup": (
        "INFO 03-20 19:18:27 llm_engine.py:322] # GPU blocks: 1842, # CPU blocks: 655\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/worker.py", line 290, in <module>\n'
        "    engine = AsyncLLMEngine.from_engine_args(engine_args)\n"
        "CUDA out of memory. Tried to allocate 2.00 GiB\n", "startup"),
    "failed generation step is serving": (
        "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
        "llama_decode: failed to decode, ret = -3\n\n"
        "Failed to predict at 43! Check your context buffer sizes!\n", "burst"),
    "named loader function in an error is startup": (
        "[09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] Error executing load_single_module with args "
        "('model.layers.9.mlp.gate_up_proj', Linear()): CUDA out of memory. Tried to allocate 40.00 MiB. "
        "GPU 0 has a total capacity of 22.07 GiB of which 20.62 MiB is free.\n", "startup"),
    "configuration lines alone lean healthy": (
        "INFO 06-28 23:40:03 api_server.py:206] vLLM API server version 0.5.0.post1\n"
        "INFO 06-28 23:40:03 llm_engine.py:164] Initializing an LLM engine (v0.5.0.post1) with "
        "config: model='m', tokenizer='m', max_seq_len=131072\n", "no_oom"),
    "engine memory estimate is startup progress": (
        "[2024-03-25 15:35:00] INFO engine.py:243: Estimated total single GPU memory usage: "
        "14361.14 MB (Parameters: 3615.13 MB. KVCache: 10689.56 MB. Temporary buffer: 56.44 MB)\n", "no_oom"),
    "an unknown server failing after it served is not a startup oom": (
        "2026-05-01 10:00:00 INFO myserve: server is listening on http://0.0.0.0:9000\n"
        "2026-05-01 10:01:00 INFO myserve: request 17 done, generation speed: 41.2 tok/s\n"
        "2026-05-01 10:02:00 ERROR myserve: Exception while processing request 4f2a: insufficient GPU "
        "memory for the batch", "burst"),
    # A chat front end printing the backend's error answer as an object literal: the OOM was that
    # request's, so the server was serving.
    "an oom inside a javascript clients error object was a request": (
        "{\n    msg: 'ran out of memory: CUDA out of memory. Tried to allocate 26.00 MiB (GPU 0; 14.76 GiB "
        "total capacity; 13.65 GiB already allocated; 9.88 MiB free; 13.85 GiB reserved in total by "
        "PyTorch)',\n    type: 'out_of_memory.gpu.cuda'\n}", "burst"),
    "a generation summary with no tokens is the request that failed": (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 8.00 GiB "
        "total capacity; 6.50 GiB already allocated; 0 bytes free; 6.60 GiB reserved in total by "
        "PyTorch)\nOutput generated in 1.20 seconds (0.00 tokens/s, 0 tokens, context 3100, seed 7)", "burst"),
    "a programming error stated as its class": (
        "2025-07-24 07:59:27,625 - lmdeploy - ERROR - engine.py:1135 - exception happened: <class 'IndexError'> "
        "index 17 is out of bounds for axis 0 with size 17\n", "not_gpu_oom"),
    "an index out of range": (
        'File "vllm/entrypoints/openai/serving_completion.py", line 591, in _create_logprobs\n'
        "    step_top_logprobs = top_logprobs[i]\nIndexError: list index out of range\n", "not_gpu_oom"),
    "a lost device": (
        "radv/amdgpu: The CS has been cancelled because the context is lost.\n"
        "3.45.098.561 E srv  update_slots: decode() failed: vk::Queue::submit: ErrorDeviceLost\n", "not_gpu_oom"),
    "a warm-up request refused a connection": (
        "[gpu_id=0] Memory pool end. avail mem=8.07 GB\n"
        "Initialization failed. warmup error: HTTPConnectionPool(host='0.0.0.0', port=30000): Max retries exceeded "
        "with url: /generate (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] "
        "Connection refused'))\n", "not_gpu_oom"),
    "a KV capacity shortfall wrapped over lines": (
        "To serve at least one request with the model's max seq len (262144), 9.29 GiB KV cache is needed,\n"
        "which is larger than the available KV cache memory (9.28 GiB). Based on the available memory, the\n"
        "estimated maximum model length is 260800.\n", "startup"),
    "an engine's own KV sizing lines": (
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 39.39 GiB, "
        "available: 21.89 GiB\n[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 631\n", "no_oom"),
    "a segfault": ("[1]    473206 segmentation fault  ./server -m model.gguf --port 8080\n", "not_gpu_oom"),
    "a context with no free cell for one token": (
        "\n".join(f"update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = {n}"
                  for n in (256, 128, 64, 32, 16, 8, 4, 2, 1))
        + "\nupdate_slots : failed to decode the batch, n_batch = 1, ret = 1\n", "not_gpu_oom"),
    "a context that made room by retrying smaller": (
        "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 256\n"
        "slot print_timing: id  0 | task 7 | n_decoded =    97, tg =  63.36 t/s\n", "no_oom"),
    "a C++ logic error": (
        "[TensorRT-LLM][ERROR] Encountered an error in forwardSync function: cannot create std::vector larger than "
        "max_size()\n", "not_gpu_oom"),
    "a worker's quoted error that names no memory": (
        "(EngineCore_DP0 pid=1230010) ERROR 10-22 20:01:49 [core.py:708] RuntimeError: Worker failed with error "
        "'cu_seqlens_q must be on CUDA', please check the stack trace above for the root cause\n", "not_gpu_oom"),
    "host memory in plain words": (
        "Error: not enough host memory to load the weights (needs 40 GiB, 31 GiB free)\n", "not_gpu_oom"),
    "a share of host memory that is no failure": (
        "WARNING 10-31 08:00:20 config.py:649] Possibly too large swap space. 32.00 GiB out of the 62.71 GiB total "
        "CPU memory is allocated for the swap space.\nINFO 10-31 08:02:40 metrics.py:349] Avg prompt throughput: "
        "312.5 tokens/s, Avg generation throughput: 41.0 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 0 reqs, "
        "GPU KV cache usage: 1.4%, CPU KV cache usage: 0.0%.\n", "no_oom"),
    "free memory below the budget at start-up": (
        "ValueError: Free memory on device cuda:0 (57.38/124.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.8, 99.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n",
        "startup"),
    "a negative KV cache after the weights": (
        "Loading model weights took 27.5376 GB\nAvailable KV cache memory: -0.87 GiB\n", "startup"),
    "an accelerator runtime error that is not memory": (
        "RuntimeError: ACL stream synchronize failed, error code:507035\n", "not_gpu_oom"),
    "a HIP error that is not memory": (
        "RuntimeError: HIP error: operation not permitted on an event last recorded in a capturing stream\n",
        "not_gpu_oom"),
    "a missed heartbeat": (
        "vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. Inspect the stacktrace to find the "
        "original error: TimeoutError('No heartbeat received from MQLLMEngine').\n", "not_gpu_oom"),
    "an OOM the engine loop died of": (
        "ERROR 03-26 01:39:58 [serving_chat.py:677] vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not "
        "running. Inspect the stacktrace to find the original error: OutOfMemoryError('CUDA out of memory. Tried to "
        "allocate 128.00 MiB. GPU 0 has a total capacity of 79.33 GiB of which 16.00 MiB is free. Process 36891 has "
        "79.29 GiB memory in use. Of the allocated memory 69.59 GiB is allocated by PyTorch, and 118.89 MiB is reserved "
        "by PyTorch but unallocated.').\n", "burst"),
    "a pool accounting check that failed": (
        "AssertionError: Mem Leak Detected! total_tokens=1029056 vs self.max_total_num_tokens=1029120\n", "prefix_cache"),
    "a scheduler's batch lines with requests running": (
        "[2025-03-09 11:42:35 TP0] Decode batch. #running-req: 1, #token: 2855, token usage: 0.03, gen throughput "
        "(token/s): 46.34, largest-len: 0, #queue-req: 0,\n", "no_oom"),
    "a KV cache too small for one sequence, in a C++ runtime's words": (
        "[TensorRT-LLM][ERROR] maxTokensInPagedKvCache must be large enough to process at least 1 sequence to "
        "completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)\n", "startup"),
    "an OOM while a web framework dispatched a request": (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/starlette/routing.py", line 74, in app\n'
        "    response = await func(request)\n"
        '  File "/srv/app/server.py", line 88, in complete\n'
        "    out = model(**batch)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 79.19 "
        "GiB of which 1.10 GiB is free. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 310.00 MiB is "
        "reserved by PyTorch but unallocated.\n", "burst"),
    "a scheduler's retraction that is the last thing it logged": (
        "[2025-01-12 11:34:41 TP0] Decode batch. #running-req: 2, #token: 307801, token usage: 1.00, gen throughput "
        "(token/s): 10.93, #queue-req: 0\n"
        "[2025-01-12 11:34:44 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> "
        "0.9446\n", "burst"),
    # Healthy activity in the words of servers no entry was written for.
    "a go framework's access table shows a serving server": (
        "4:29PM INF | 200 |  1.2s | 10.0.0.1 | POST \"/v1/chat/completions\"\n"
        "4:30PM INF | 200 |  0.9s | 10.0.0.1 | POST \"/v1/chat/completions\"\n", "no_oom"),
    "a json access record shows a serving server": (
        '{"ts":"2026-01-01T00:00:00Z","level":"info","msg":"request","path":"/v1/completions","method":"POST",'
        '"status":200}\n', "no_oom"),
    "a json stats line with active requests shows a serving server": (
        'I0101 00:00:00.000000 1 stats.cc:10] {"active_requests":2,"iteration":7,"free_blocks":30}\n', "no_oom"),
    "a scheduler's counts and speed with the number after its unit or before its word": (
        "2026-01-01T00:00:05.000000Z  INFO engine::logger: Throughput (T/s) 18.00, 2 running, 0 waiting\n"
        "2026-01-01T00:00:10.000000Z  INFO engine::logger: Throughput (T/s) 21.40, 1 running, 0 waiting\n", "no_oom"),
    # Look-alikes in the words of libraries and accelerators no engine entry speaks for.
    "an MPI failure between ranks": (
        "[TensorRT-LLM][ERROR] Assertion failed: Failed: MPI error /src/cpp/tensorrt_llm/common/mpiUtils.cpp:211 '6'\n"
        "terminate called after throwing an instance of 'tensorrt_llm::common::TllmException'\n", "not_gpu_oom"),
    "ggml's pre-sized graph buffer too small for a tensor": (
        "ggml_tallocr_alloc: not enough space in the buffer (needed 155582464, largest block available 151388160)\n"
        'GGML_ASSERT: ggml-alloc.c:114: !"not enough space in the buffer"\n', "not_gpu_oom"),
    "a gaudi bridge error that is not its allocator": (
        "ERROR 02-04 12:35:23 engine.py:387] [Rank:0] FATAL ERROR :: MODULE:PT_LAZY Error, ValidateSyncInputTensors "
        "tensor_data is empty. Tensorid:12\n", "not_gpu_oom"),
    # Start-up, read from the loader's own frames or the program's banner.
    "a compose v1 prefix before a worker's headless kv-cache traceback": (
        "api  | (Worker_TP0 pid=7) ERROR 09-03 22:42:03 [multiproc_executor.py:962]   File \"/venv/lib/python3.12/"
        "site-packages/vllm/v1/worker/gpu_model_runner.py\", line 6697, in _allocate_kv_cache_tensors\n"
        "api  | (Worker_TP0 pid=7) ERROR 09-03 22:42:03 [multiproc_executor.py:962]     tensor = torch.zeros(\n"
        "api  | (Worker_TP0 pid=7) ERROR 09-03 22:42:03 [multiproc_executor.py:962] torch.OutOfMemoryError: XPU out of "
        "memory. Tried to allocate 772.00 MiB. GPU 0 has a total capacity of 31.89 GiB of which 3.94 GiB is free.\n",
        "startup"),
    "an ipython 7 frame of a loader placing weights and cache": (
        "RuntimeError                              Traceback (most recent call last)\n"
        "[/usr/local/lib/python3.10/dist-packages/exllamav2/model.py](https://localhost:8080/#) in "
        "load_autosplit_gen(self, cache, reserve_vram)\n"
        "RuntimeError: Insufficient VRAM for model and cache\n", "startup"),
    "a module's parameters being copied onto the device": (
        '  File "/env/lib/site-packages/torch/nn/modules/module.py", line 1143, in convert\n'
        "    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 14.00 MiB (GPU 0; 6.00 GiB total "
        "capacity; 5.18 GiB already allocated; 0 bytes free; 5.35 GiB reserved in total by PyTorch)\n", "startup"),
    "a device oom right after llama.cpp's banner": (
        "main: build = 1233 (98311c4)\nmain: seed  = 1694804999\n\n"
        "CUDA error 2 at /src/llama.cpp/ggml-cuda.cu:5509: out of memory\n", "startup"),
    # A native runtime names the function that failed: its start-up functions tell the phase.
    "a native loader function reporting the failed allocation": (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 32768.00 MiB on device 0: cudaMalloc failed: out of "
        "memory\nalloc_tensor_range: failed to allocate CUDA0 buffer of size 34359738368\n", "startup"),
    "a function name on a failure another entry explains says where, not what": (
        "ggml_cuda_host_malloc: failed to allocate 2560.00 MiB of pinned memory: system has unsupported display "
        "driver / cuda driver combination\n", "not_gpu_oom"),
    "a device allocator with enough memory free but no block large enough": (
        "Out of Memory: Not enough space to allocate 58720256 B DRAM buffer across 12 banks, where each bank needs to "
        "store 4894720 B, but bank size is 1071821792 B (allocated: 888424448 B, free: 183397344 B, largest free "
        "block: 3382944 B)\n", "chronic"),
    "a device allocator whose largest free block would have held the request is not fragmented": (
        "Out of Memory: Not enough space to allocate 58720256 B DRAM buffer across 12 banks, where each bank needs to "
        "store 4894720 B, but bank size is 1071821792 B (allocated: 1068439040 B, free: 3382752 B, largest free "
        "block: 3382752 B)\n", "unknown"),
    # Look-alikes stated in a runtime's own words, and healthy work in an engine's own trace.
    "a timeout raised in the engine's busy loop": (
        "ERROR 08-07 07:04:32 [core.py:588]   File \"/vllm/v1/engine/core.py\", line 606, in run_busy_loop\n"
        "ERROR 08-07 07:04:32 [core.py:588]     self._process_engine_step()\n"
        "ERROR 08-07 07:04:32 [core.py:588] TimeoutError\n", "not_gpu_oom"),
    "a rocm page fault": (
        "Memory access fault by GPU node-2 (Agent handle: 0x5a0d7202eab0) on address 0x7d35a0c00000. Reason: Unknown.\n",
        "not_gpu_oom"),
    "a kernel trap in the server process": (
        "[Tue Sep  8 10:05:32 2026] traps: lmdeploy[3838286] general protection fault ip:7f8304036898 "
        "sp:7f7fde7fa710 error:0 in libc.so.6[7f8304036000+195000]\n", "not_gpu_oom"),
    "a server's crash handler announcing a segfault": (
        "Signal (11) received.\n 0# 0x000055F2E74E513D in tritonserver\n"
        " 1# 0x00007F8697BA2520 in /lib/x86_64-linux-gnu/libc.so.6\n", "not_gpu_oom"),
    "cuda that never initialised": (
        "/env/lib/python3.10/site-packages/torch/cuda/__init__.py:107: UserWarning: CUDA initialization: CUDA unknown "
        "error - this may be due to an incorrectly set up environment\n", "not_gpu_oom"),
    "a start-up failure whose stated cause is not memory": (
        "2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start model server: integer "
        "division or modulo by zero\n", "not_gpu_oom"),
    "an exception class named for a failure": (
        "Traceback (most recent call last):\n  File \"/srv/rpc/channel.py\", line 104, in recv\n"
        "    return deserialize(header, buffers)\n"
        "rpc.message.DeserializeMessageFailed: Deserialize b'<=\\xef' failed on channel 3\n", "not_gpu_oom"),
    "lmdeploy's session running out of tokens": (
        "2024-05-01 10:00:00,000 - lmdeploy - ERROR - run out of tokens. session_id=1\n", "not_gpu_oom"),
    "a key=value access record with the status first": (
        'INFO [      log_server_request] request | tid="1" timestamp=1713129102 remote_addr="127.0.0.1" '
        'remote_port=38270 status=200 method="POST" path="/v1/chat/completions" params={}\n', "no_oom"),
    "turbomind decoding a request's context": (
        "[TM][INFO] [forward] Enqueue requests\n[TM][INFO] context decoding start\n[TM][INFO] context decoding end\n"
        "[TM][INFO] [decodeContext] 18.60 ms\n", "no_oom"),
    "an oom while llama-server works on a request's image": (
        "srv  process_chun: processing image...\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4514.05 MiB on device 0: cudaMalloc failed: out of "
        "memory\n", "burst"),
    "a request its client gave up on is the client's failure": (
        "2026-08-24 23:29:57,251 - INFO - Prefill progress: request=3da22dc40 tokens=28672/47193 (60.8%)\n"
        "2026-08-24 23:29:57,751 - WARNING - Request failed: endpoint=/chat/completions stream=True "
        "error=stream_closed_before_completion in_flight=0\n", "no_oom"),
    "triton readying its grpc handlers after the models loaded": (
        "I0221 07:28:34.925705 342 grpc_server.cc:101] Ready for RPC 'ModelMetadata', 0\n"
        "I0221 07:28:34.925709 342 grpc_server.cc:101] Ready for RPC 'ModelConfig', 0\n", "no_oom"),
    "an oom in a warm-up named on its own line": (
        "2026-01-01 00:00:00 ERROR myserve: RuntimeError: CUDA out of memory during warmup of the decode graphs\n",
        "startup"),
    "a scheduler watchdog giving up on a batch": (
        "[2025-08-02 19:24:20] INFO:     10.0.0.1:48276 - \"POST /v1/completions HTTP/1.1\" 200 OK\n"
        "[2025-08-02 19:24:30 TP3] Watchdog timeout (self.watchdog_timeout=300)\n", "not_gpu_oom"),
    "a gpu backend that never initialised": (
        "ggml_cuda_init: failed to initialize CUDA: unknown error\nllm_load_tensors:        CPU buffer size = 47628.36 MiB\n",
        "not_gpu_oom"),
    "a cuda driver error code that is not memory": (
        'thread panicked at kv_cache/mod.rs:120: Could not prepare cache: DriverError(CUDA_ERROR_INVALID_VALUE, '
        '"invalid argument")\n', "not_gpu_oom"),
    "a launch that timed out waiting for its workers": (
        "2024-10-25 12:21:14,974 api 37502 ERROR    Timed out after 601 seconds waiting for clients. 1/2 clients "
        "joined.\n", "not_gpu_oom"),
    "a step failing with a stated cause that is not memory": (
        '2024-07-29T20:08:08.867914Z ERROR engine: step - Model failed with error: WithBacktrace { inner: Msg("key must '
        'be a cuda tensor"), backtrace: Backtrace [{ fn: "core::error::Error::bt" }, { fn: "attn::cache::reshape" }] }\n',
        "not_gpu_oom"),
    "a compiled model calling its runtime with the wrong arity": (
        "packed_func.h:1908: Function vm.builtin.kv_cache_create(0: runtime.ShapeTuple) -> relax.vm.AttentionKVCache "
        "expects 19 arguments, but 18 were provided.\n", "not_gpu_oom"),
    "ggml's host context buffer not allocated": (
        "GGML_ASSERT: /project/llama.cpp/ggml.c:4411: ctx->mem_buffer != NULL\n", "not_gpu_oom"),
    "a cancelled wait is the client's": (
        'time=2025-10-19T09:28:35.298Z level=INFO source=sched.go:449 msg="Load failed" error="timed out waiting for '
        'llama runner to start: context canceled"\n'
        "[GIN] 2025/10/19 - 09:28:35 | 499 | 15.01s | 127.0.0.1 | POST \"/api/generate\"\n", "no_oom"),
    "an oom right after a request's image was encoded": (
        "encode_image_with_clip: image encoded in  1236.17 ms by CLIP (    2.15 ms per image patch)\n"
        "CUDA error: out of memory\n   current device: 0, in function ggml_cuda_pool_malloc_vmm at ggml-cuda.cu:7991\n",
        "burst"),
    "triton initialising its backend and models": (
        'I0917 14:37:10.188899 72 libtensorrtllm.cc:55] "TRITONBACKEND_Initialize: tensorrtllm"\n'
        'I0917 14:37:10.195095 72 libtensorrtllm.cc:114] "TRITONBACKEND_ModelInitialize: tensorrt_llm (version 1)"\n',
        "no_oom"),
    "an offline batch's progress bar written after the traceback": (
        "[rank0]:   File \"/vllm/model_executor/layers/linear.py\", line 125, in apply\n"
        "[rank0]:     return F.linear(x, layer.weight, bias)\n"
        "[rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.32 GiB. GPU\n"
        "Processed prompts:  23%|##        | 58/256 [00:20<01:10,  2.80it/s, est. speed input: 5700.92 toks/s]\n",
        "burst"),
    "a server that was listening when the runtime threw": (
        "2023-10-12T12:37:08.293510Z  INFO serve: crates/serve/src/mod.rs:183: Listening at 0.0.0.0:8080\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  CUDA failed with error out of memory\n", "burst"),
    "an oom wrapped in an initialisation failure": (
        "RuntimeError: Orchestrator initialization failed: CUDA out of memory. Tried to allocate 18.00 MiB. GPU 0 has a "
        "total capacity of 22.03 GiB of which 3.12 MiB is free.\n", "startup"),
    "an oom while torch layers are being constructed": (
        '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/linear.py", line 109, in __init__\n'
        "    torch.empty((out_features, in_features), **factory_kwargs)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 72.00 MiB. GPU 0 has a total capacity of 44.52 GiB "
        "of which 43.88 MiB is free.\n", "startup"),
    "device allocations failing until a session cannot be created": (
        "ds4: ROCm tensor alloc failed: out of memory\nds4: ROCm tensor alloc failed: out of memory\n"
        "0614 14:16:15 ds4-server: failed to create rocm session\n", "startup"),
    "a graph re-reserved is not a failure": (
        "llama_new_context_with_model:      CUDA0 compute buffer size =  3009.50 MiB\n"
        "ggml_backend_sched_alloc_splits: failed to allocate graph, reserving (backend_ids_changed = 1)\n", "no_oom"),
    "a native backtrace printed from a signal handler": (
        "==== backtrace (tid:   1147) ====\n 0 0x0000000000042520 __sigaction()  ???:0\n"
        " 1 0x0000000003200e60 tvm::runtime::relax_vm::PagedAttentionKVCacheObj::GetTotalSequenceLength()  ???:0\n",
        "not_gpu_oom"),
    "a KV-cache allocation frame of any model runner": (
        "Traceback (most recent call last):\n"
        '  File "/site-packages/vllm_ascend/worker/model_runner_v1.py", line 2499, in _allocate_kv_cache_tensors\n'
        "    tensor = torch.zeros(kv_cache_tensor.size,\nRuntimeError: NPU out of memory. Tried to allocate 2.57 GiB "
        "(NPU 0; 60.96 GiB total capacity; 57.49 GiB already allocated; 57.49 GiB current active; 1.96 GiB free; "
        "57.62 GiB reserved in total by PyTorch)\n", "startup"),
}


@pytest.mark.parametrize("name", sorted(READINGS))
def test_an_engine_independent_reading_decides_the_class(tmp_path, name):
    log, expected = READINGS[name]
    assert _classify(tmp_path, log).oom_class.value == expected


def test_an_oom_of_a_process_that_held_almost_nothing_is_at_start_up(tmp_path):
    v = _classify(tmp_path, "RuntimeError: XPU out of memory. Tried to allocate 1.02 GiB (GPU 0; 15.56 GiB total "
                            "capacity; 0 bytes already allocated; 0 bytes reserved in total by PyTorch)\n")
    assert v.oom_class.value == "startup"
    assert "held" in v.path[1].why


def test_an_oom_of_a_process_holding_its_model_is_not_called_start_up_from_its_numbers(tmp_path):
    v = _classify(tmp_path, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total "
                            "capacity of 79.19 GiB of which 320.00 MiB is free. Of the allocated memory 74.10 GiB is "
                            "allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.\n")
    assert v.oom_class.value != "startup"


def test_a_bare_abort_shows_a_failure_not_its_kind(tmp_path):
    # C++ runtimes abort on an out-of-memory exception as readily as on a failed check.
    v = _classify(tmp_path, "2024-05-01 10:00:00,000 - lmdeploy - INFO - TurbomindEngineConfig(cache_max_entry_count=0.8)\n"
                            "Aborted (core dumped)\n")
    assert v.oom_class.value == "unknown"
    assert v.path[0].answer == "unknown"          # a failure, but not what failed


def test_a_ray_workers_prefix_with_its_address_is_peeled(tmp_path):
    line = parse_line("(RayWorkerWrapper pid=67451, ip=10.0.0.2) ERROR 06-25 15:28:30 worker_base.py:148] RuntimeError: "
                      "NCCL Error 2: unhandled system error", default_reference(2026))
    assert (line.process, line.pid, line.level) == ("RayWorkerWrapper", 67451, "ERROR")
    assert line.message.startswith("RuntimeError: NCCL Error 2")
    v = _classify(tmp_path, line.message + "\n")
    assert v.oom_class.value == "not_gpu_oom"


def test_configuration_lines_alone_are_a_lean_not_an_all_clear(tmp_path):
    """Only the engine's version and configuration, nothing failed: healthy as far as the excerpt
    goes, below the confident level, asking for the rest of the start-up."""
    from triage.thresholds import CONFIDENT

    verdict = _classify(tmp_path, READINGS["configuration lines alone lean healthy"][0])
    assert verdict.oom_class.value == "no_oom" and verdict.confidence < CONFIDENT
    assert any("rest of the start-up log" in a for a in verdict.attach)


@pytest.mark.parametrize("log", [
    "zsh: killed     python -m vllm.entrypoints.openai.api_server --model m\n",
    "[ERROR] Worker (pid:25134) was sent SIGKILL! Perhaps out of memory?\n",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': -11}\n",
    "panic: runtime error: invalid memory address or nil pointer dereference\n",
    "OSError: [Errno 28] No space left on device\n",
    "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached files.\n",
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n",
    ":0:rocdevice.cpp            :2992: 4026031038 us:  Callback: Queue 0x7d80 aborting with error : "
    "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address.\n",
    # an engine reporting out-of-memory over a host allocation: Ollama's launcher, TensorRT-LLM's explanation
    'time=2026-08-20T09:12:40.500Z level=INFO source=sched.go:641 msg="Load failed" model=/m error="llama-server '
    'reported out-of-memory during startup: ggml_aligned_malloc: insufficient memory (attempted to allocate 8192.00 MB)"\n',
    "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaHostAlloc(ptr, n, cudaHostAllocDefault): out of "
    "memory (/src/tllmBuffers.h:145)\n"
    "[11/28/2026-11:19:05] [TRT-LLM] [E] Executor creation failed due to insufficient GPU memory.\n",
    # broken setups and faults stated by any runtime
    "OSError: libnccl.so.2: cannot open shared object file: No such file or directory\n",
    "Failed to initialize NVML: Driver/library version mismatch\n",
    "error: unknown argument: --flash-attn-enable\n",
    "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM: size mismatch for model.embed_tokens.weight\n",
    "torch._C._distributed_c10d.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
    "via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n",
    "RuntimeError: Triton Error [CUDA]: device kernel image is invalid\n",
    "Exception: Model not found: /models/foo\n",
])
def test_kills_crashes_and_broken_setups_in_their_runtimes_words_are_look_alikes(tmp_path, log):
    """A shell's or supervisor's kill report, a crash signal in a launcher's exit code, a Go runtime
    panic, a full disk, an unreachable model hub, a dead Ray actor, a ROCm access fault: none is
    device memory running out, whatever words ("out of memory?", "memory") the line holds."""
    assert _classify(tmp_path, log).oom_class.value == "not_gpu_oom"


@pytest.mark.parametrize("line", [
    "ValueError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "[2025-10-06 11:20:03] Input length (70000 tokens) exceeds the maximum allowed length (65530 tokens). "
    "Use a shorter input or enable --allow-auto-truncate.",
])
def test_a_request_refused_for_its_length_shows_a_server_validating_requests(tmp_path, line):
    v = _classify(tmp_path, line + "\n")
    assert v.oom_class.value == "no_oom"


def test_a_pinned_host_allocation_that_cuda_reports_out_of_memory_is_host_memory(tmp_path):
    """TensorRT-LLM's pinned buffers are host RAM allocated through CUDA: "out of memory" from
    cudaHostAlloc is the host's, while the same check on cudaMallocAsync is the GPU's."""
    host = ("RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaHostAlloc(ptr, n, cudaHostAllocDefault): "
            "out of memory (/src/tensorrt_llm/cpp/include/tensorrt_llm/runtime/tllmBuffers.h:145)\n")
    assert _classify(tmp_path, host).oom_class.value == "not_gpu_oom"
    device = host.replace("::cudaHostAlloc(ptr, n, cudaHostAllocDefault)", "::cudaMallocAsync(ptr, n, mCudaStream->get())")
    assert _classify(tmp_path, device).oom_class.value != "not_gpu_oom"


def test_wsl_failing_to_make_gpu_memory_resident_is_device_memory(tmp_path):
    log = ("RuntimeError: CUDA driver error: device not ready\n"
           "misc dxg: dxgk: dxgkio_make_resident: Ioctl failed: -12\n")
    assert _classify(tmp_path, log).oom_class.value != "not_gpu_oom"


@pytest.mark.parametrize("log", [
    "2025-01-01T10:00:00.000000Z  INFO axum::serve: finished processing request latency=12 ms status=200\n",
    "2025-01-01T10:00:00Z INFO  mistralrs_server: Serving on http://0.0.0.0:1234.\n",
    " * Running on all addresses (0.0.0.0)\n",
    "I0101 10:00:00.000000 1 server.cc:677] | tensorrt_llm | 1       | READY  |\n",
    "Throughput: 10.5 requests/s, 5000.00 total tokens/s, 2500.00 output tokens/s\n",
])
def test_servers_up_or_answering_in_their_own_words_are_healthy(tmp_path, log):
    assert _classify(tmp_path, log).oom_class.value == "no_oom"


_SERVING = ('INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
            'INFO:     10.0.0.1:5001 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')


@pytest.mark.parametrize("line", [
    "[TM][ERROR][1128.11:57:43.123456][turbomind.cc:453] Warm-up for 8192 tokens failed with status 11",
    "[TM][ERROR][1128.12:30:00.000112][block.cc:79] leaked 12 logical blocks",
    "INFO 03-11 14:47:27 __init__.py:187] No platform detected, vLLM is running on UnspecifiedPlatform",
    "WARNING 03-12 14:00:00 [_custom_ops.py:20] Failed to import from vllm._C with "
    "ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')",
    "{'token': ' the', 'logprob': -7.3125, 'bytes': [32, 116, 104, 101]}",
])
def test_lines_an_engine_prints_and_survives_do_not_turn_a_serving_log_into_an_incident(tmp_path, line):
    """TurboMind logs a failed warm-up size and carries on; it reports leftover blocks when it is torn
    down; vLLM names its platform at INFO; a warning may quote a library it did without; a client's
    logprobs hold negative numbers. None of them is a failure of the server that went on serving."""
    assert _classify(tmp_path, line + "\n" + _SERVING).oom_class.value == "no_oom"


def test_a_failing_line_that_carries_a_request_id_is_not_a_request_served(tmp_path):
    v = _classify(tmp_path, 'time=2025-01-01T00:00:00.000Z level=ERROR source=server.go:1 msg="post predict" '
                            'request_id=chatcmpl-3f2a9c error="EOF"\n')
    assert v.oom_class.value == "unknown"


def test_gunicorn_killing_a_timed_out_worker_is_a_hang_not_the_host_oom_killer(tmp_path):
    log = ("[2025-03-01 10:05:31 +0000] [1] [CRITICAL] WORKER TIMEOUT (pid:7)\n"
           "[2025-03-01 10:05:32 +0000] [1] [ERROR] Worker (pid:7) was sent SIGKILL! Perhaps out of memory?\n")
    v = _classify(tmp_path, log)
    assert v.oom_class.value == "not_gpu_oom"
    assert "hang" in v.summary and "host OOM killer" not in v.summary


@pytest.mark.parametrize("log", [
    # cuDNN's allocation failure is device memory, not a cuDNN fault
    "INFO 05-01 10:00:00 [gpu_model_runner.py:1] Starting to load model m...\n"
    "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED\n",
    # a pool too small for one page: the start-up capacity check in an amount's words
    "ValueError: 51.00 MiB is too small to build a pool from the page sizes\n"
    "(attn.full_group=3.00 MiB, linear_attn/recurrent=9.00 MiB), even allowing each page to pad by 0%.\n",
    # an executor that failed to initialise on an OOM
    "[03/14/2026-18:47:16] [TRT-LLM] [RANK 3] [E] Failed to initialize executor on rank 3: CUDA out of memory. "
    "Tried to allocate 896.00 MiB. GPU 3 has a total capacity of 79.10 GiB of which 477.88 MiB is free.\n",
    # Flask's reloader starting the process again after "Running on": the OOM is the new start's
    " * Running on http://127.0.0.1:5000\n * Restarting with stat\n"
    "Loading checkpoint shards:  50%|#####     | 2/4 [00:10<00:10,  5.00s/it]\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity "
    "of 23.65 GiB of which 20.06 MiB is free.\n",
])
def test_start_up_ooms_told_by_lines_no_engine_entry_reads(tmp_path, log):
    assert _classify(tmp_path, log).oom_class.value == "startup"


_LOOP_FRAMES = (
    'ERROR 05-01 10:00:01 engine.py:158] Traceback (most recent call last):\n'
    'ERROR 05-01 10:00:01 engine.py:158]   File "/usr/lib/vllm/engine/multiprocessing/engine.py", line 219, in run_engine_loop\n'
    'ERROR 05-01 10:00:01 engine.py:158]     request_outputs = self.engine_step()\n'
    'ERROR 05-01 10:00:01 engine.py:158]   File "/usr/lib/vllm/engine/llm_engine.py", line 1398, in step\n'
    'ERROR 05-01 10:00:01 engine.py:158]     outputs = self.model_executor.execute_model(\n'
    'ERROR 05-01 10:00:01 engine.py:158]   File "/usr/lib/vllm/model_executor/models/qwen2_vl.py", line 1200, in _merge_multimodal_embeddings\n'
    'ERROR 05-01 10:00:01 engine.py:158]     raise ValueError(\n'
    'ERROR 05-01 10:00:01 engine.py:158] ValueError: {message}\n')


def test_an_engine_loop_that_raised_an_error_about_a_requests_input_died_of_it(tmp_path):
    """The line alone leaves an input error to the front end; raised inside the serving loop, with
    nothing served after, it is the engine's failure and names no memory: a lean to a look-alike."""
    v = _classify(tmp_path, _LOOP_FRAMES.format(
        message="Mismatch in `image` token count between text and `input_ids`. Got ids=[576] and text=[1]."))
    assert (v.oom_class.value, v.confidence) == ("not_gpu_oom", 0.55)
    # the same error speaking of memory or capacity is no stated cause of another kind
    v = _classify(tmp_path, _LOOP_FRAMES.format(message="Not enough KV cache blocks left for the image tokens."))
    assert v.oom_class.value == "unknown"


def test_a_requests_error_the_server_served_on_after_is_not_the_incident(tmp_path):
    log = ("INFO 05-01 10:00:00 engine.py:291] Added request chatcmpl-abc.\n"
           "ERROR 05-01 10:00:01 serving_chat.py:158] Error in preprocessing prompt inputs\n"
           "ERROR 05-01 10:00:01 serving_chat.py:158] Traceback (most recent call last):\n"
           'ERROR 05-01 10:00:01 serving_chat.py:158]   File "/usr/lib/vllm/entrypoints/openai/serving_chat.py", '
           "line 170, in create_chat_completion\n"
           "ERROR 05-01 10:00:01 serving_chat.py:158]     conversation = await self._preprocess_chat(\n"
           "ERROR 05-01 10:00:01 serving_chat.py:158] ValueError: Unknown part type: input_image\n"
           'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n')
    served = ("INFO 05-01 10:00:10 metrics.py:349] Avg prompt throughput: 120.0 tokens/s, Avg generation throughput: "
              "30.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 12.0%, CPU KV "
              "cache usage: 0.0%.\n"
              'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
    assert _classify(tmp_path, log + served).oom_class.value == "no_oom"
    assert _classify(tmp_path, log).oom_class.value == "unknown"     # nothing after it: it may be the end


def test_an_oom_in_transformers_decoding_loop_is_serving(tmp_path):
    log = ('Traceback (most recent call last):\n'
           '  File "/usr/lib/python3.10/site-packages/transformers/generation/utils.py", line 2634, in _sample\n'
           '    outputs = self(**model_inputs, return_dict=True)\n'
           '  File "/usr/lib/python3.10/site-packages/transformers/models/llama/modeling_llama.py", line 1189, in forward\n'
           '    logits = logits.float()\n'
           'torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of '
           '23.65 GiB of which 2.10 GiB is free. Process 4242 has 21.54 GiB memory in use. Of the allocated memory '
           '20.98 GiB is allocated by PyTorch, and 120.05 MiB is reserved by PyTorch but unallocated.\n')
    assert _classify(tmp_path, log).oom_class.value == "burst"


def test_a_kv_pool_oom_on_the_engines_own_warm_up_request_is_at_start_up(tmp_path):
    """SGLang sends one warm-up request before it says it is up; its KV pool running out there is
    a start-up failure, which the engine states. The same words while serving are a runtime OOM."""
    oom = ('AssertionError: {"detail":"Out of memory even after retracting all other requests in the decode batch. '
           'Aborting the last request."}\n')
    warmup = ("[2026-05-01 10:03:55] Initialization failed. warmup error: Traceback (most recent call last):\n"
              '  File "/usr/lib/sglang/srt/entrypoints/http_server.py", line 2501, in _execute_server_warmup\n'
              '    assert res.status_code == 200, f"{res.text}"\n' + oom)
    assert _classify(tmp_path, warmup).oom_class.value == "startup"
    serving = "[2026-05-01 12:41:09 TP0] retract_decode: aborted last request 5c1f0e7a due to OOM\n"
    assert _classify(tmp_path, serving).oom_class.value == "burst"



_DTYPE_ASSERTION = ("[TensorRT-LLM][ERROR] Assertion failed: weight->dtype() == engine.getTensorDataType(name.c_str())"
                    "Weight transformer.layers.0.mlp.fc.weight has dtype INT8 but engine expects FP4\n")


def test_a_stated_failure_whose_lines_speak_of_no_memory_leans_away_from_a_gpu_oom(tmp_path):
    v = _classify(tmp_path, "[TensorRT-LLM][INFO] Loaded engine size: 4012 MiB\n" + _DTYPE_ASSERTION)
    assert v.oom_class.value == "not_gpu_oom"
    assert v.confidence == pytest.approx(0.55)
    assert "speaks of no memory" in v.summary


@pytest.mark.parametrize("log", [
    # the same failure beside a line that speaks of memory running short
    _DTYPE_ASSERTION + "[TensorRT-LLM][ERROR] Failed to allocate the workspace\n",
    # a traceback the excerpt cut before its exception: what failed is not in the evidence
    _DTYPE_ASSERTION + "Traceback (most recent call last):\n"
                       '  File "/app/server.py", line 10, in <module>\n    main()\n',
    # a wrapper pointing at an earlier failure states nothing itself
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
    # a bare abort does not say what it aborted on
    "Aborted (core dumped)\n",
])
def test_silence_about_memory_is_no_evidence_when_the_failure_is_not_stated_or_memory_is_near(tmp_path, log):
    assert _classify(tmp_path, log).oom_class.value == "unknown"


@pytest.mark.parametrize("answer", [
    '{"error":{"code":500,"message":"llama runner process has terminated: signal: killed","type":""}}\n',
    '{\n  "object": "error",\n  "message": "llama runner process has terminated: signal: killed",\n  "code": 500\n}\n',
])
def test_an_api_error_answer_pasted_as_the_log_is_read_for_the_error_it_carries(tmp_path, answer):
    # A client's copy of the server's error answer is JSON, but no data format: its words are the evidence.
    v = _classify(tmp_path, answer)
    assert v.oom_class.value == "not_gpu_oom"
    assert "killed" in v.summary.lower() or "killed" in " ".join(e.text for e in v.evidence).lower()


def test_json_of_no_known_kind_that_is_no_error_answer_is_still_refused(tmp_path):
    (tmp_path / "server.log").write_text('{"model": "llama3", "created_at": "2026-01-01T00:00:00Z", "done": true}\n')
    with pytest.raises(Exception, match="JSON of an unrecognised kind|no evidence files"):
        classify_paths([str(tmp_path)])


@pytest.mark.parametrize("code, raised, answer", [
    # a missing toolchain: the message on the raising line names it
    ('raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")',
     "RuntimeError", "not_gpu_oom"),
    # an assertion: the statement itself is the error
    ("assert self.detokenizer is not None", "AssertionError", "not_gpu_oom"),
    # the allocator's own class with no message: never read as a look-alike (what ran out is not stated)
    ("raise torch.OutOfMemoryError", "OutOfMemoryError", "unknown"),
])
def test_a_cut_traceback_is_read_for_what_its_raising_line_raised(tmp_path, code, raised, answer):
    """An excerpt that lost the exception line still shows the statement that raised it."""
    log = ("Traceback (most recent call last):\n"
           '  File "/usr/lib/python3.12/site-packages/app/build.py", line 32, in _build\n'
           f"    {code}\n")
    (tmp_path / "server.log").write_text(log, encoding="utf-8")
    verdict, ev = classify_paths([str(tmp_path)])
    tb = next(e for e in ev.items if e.kind == "traceback")
    assert tb.fields["exception"] == raised and tb.fields["exception_from_source"]
    assert verdict.oom_class.value == answer
    if answer == "not_gpu_oom":
        assert any(e.line == 3 for e in verdict.evidence)      # cites the raising line


def test_a_raising_line_that_names_no_class_says_nothing():
    from triage.evidence.log_patterns import raised_by_source_line

    assert raised_by_source_line("raise") is None                   # a re-raise: the class is elsewhere
    assert raised_by_source_line("raise self._exception") is None
    assert raised_by_source_line("return self.fn(*args)") is None


_SIGTERM_DEATH = "ERROR 08-17 23:28:45 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 1221546 died, exit code: -15\n"


def test_a_server_stopped_by_sigterm_before_it_served_is_a_look_alike(tmp_path):
    v = _classify(tmp_path, "INFO 08-17 23:20:01 api_server.py:100] vLLM API server version 0.5.5\n" + _SIGTERM_DEATH)
    assert v.oom_class.value == "not_gpu_oom" and v.confidence == pytest.approx(0.6)
    assert "SIGTERM" in v.summary


def test_a_sigterm_after_the_server_served_is_its_shutdown(tmp_path):
    served = ('INFO 08-17 23:25:00 metrics.py:351] Avg prompt throughput: 412.3 tokens/s, Avg generation throughput: '
              '98.1 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 12.1%, '
              'CPU KV cache usage: 0.0%.\n')
    v = _classify(tmp_path, "INFO 08-17 23:20:01 api_server.py:100] vLLM API server version 0.5.5\n" + served + _SIGTERM_DEATH)
    assert v.oom_class.value == "no_oom"


def test_a_sigterm_beside_a_gpu_oom_is_its_teardown(tmp_path):
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 1.02 GiB is free.\n")
    v = _classify(tmp_path, oom + _SIGTERM_DEATH)
    assert v.oom_class.value not in ("not_gpu_oom", "no_oom")


_RESERVE_FAILED = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8281.63 MiB on device 0: cudaMalloc failed: out of memory\n"
                   "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 8683921920\n")


def test_a_failed_compute_graph_reservation_alone_leans_to_start_up_below_a_confident_answer(tmp_path):
    # llama.cpp reserves its compute buffers when it creates a context; again while serving only
    # when a graph outgrows them: a lean, named below a confident answer.
    v = _classify(tmp_path, _RESERVE_FAILED)
    assert v.oom_class.value == "startup" and v.confidence < 0.5


def test_a_failed_compute_graph_reservation_while_a_slot_works_is_serving(tmp_path):
    slot = '{"function":"launch_slot_with_data","level":"INFO","line":826,"msg":"slot is processing task","slot_id":0,"task_id":0}\n'
    v = _classify(tmp_path, slot + _RESERVE_FAILED)
    assert v.oom_class.value != "startup"
    assert v.path[1].answer == "no"           # it failed while serving


def _cut(text: str, width: int) -> str:
    """Every line longer than `width` cut into pieces of exactly `width`, as a terminal copies it."""
    out = []
    for line in text.splitlines():
        out += [line[i:i + width] for i in range(0, len(line), width)] or [""]
    return "\n".join(out) + "\n"


_SERVING_OOM = (
    'INFO:     127.0.0.1:51494 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    "(EngineCore_DP0 pid=93) ERROR 10-17 04:12:55 [core.py:710] EngineCore encountered a fatal error.\n"
    "(EngineCore_DP0 pid=93) ERROR 10-17 04:12:55 [core.py:710] Traceback (most recent call last):\n"
    '(EngineCore_DP0 pid=93) ERROR 10-17 04:12:55 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/'
    'vllm/v1/engine/core.py", line 701, in run_engine_core\n'
    "(EngineCore_DP0 pid=93) ERROR 10-17 04:12:55 [core.py:710]     engine_core.run_busy_loop()\n"
    "(EngineCore_DP0 pid=93) ERROR 10-17 04:12:55 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried "
    "to allocate 7.50 GiB. GPU 0 has a total capacity of 44.39 GiB of which 1.12 GiB is free. Including non-PyTorch "
    "memory, this process has 43.26 GiB memory in use. Of the allocated memory 40.21 GiB is allocated by PyTorch, and "
    "310.00 MiB is reserved by PyTorch but unallocated.\n")


@pytest.mark.parametrize("width", [80, 100, 132])
def test_a_log_a_terminal_wrapped_at_a_fixed_width_reads_as_written(tmp_path, width):
    whole = _classify(tmp_path, _SERVING_OOM)
    wrapped = _classify(tmp_path, _cut(_SERVING_OOM, width))
    assert wrapped.oom_class == whole.oom_class and wrapped.oom_class.value == "burst"
    assert wrapped.confidence == whole.confidence
    # the OOM is cited at its first piece: the line after the pieces of the five lines before it
    first_piece = _cut("".join(_SERVING_OOM.splitlines(keepends=True)[:5]), width).count("\n") + 1
    assert any(e.kind == "torch_oom" and e.line == first_piece for e in wrapped.evidence)


def test_lines_that_merely_share_the_longest_length_are_not_joined():
    from triage.evidence.log_wrap import detect_wrap

    same = "ERROR 10-17 04:12:55 [core.py:710] EngineCore encountered a fatal error in step 12.\n"
    log = (same + "INFO 10-17 04:12:56 [core.py:1] restarting\n") * 3
    assert detect_wrap(log.encode()) is None                  # each longest line is followed by a record
    assert detect_wrap(_cut(_SERVING_OOM, 80).encode()).width == 80


def test_a_log_whose_first_line_opens_with_a_bracketed_number_is_a_log(tmp_path):
    # "[1784273406.684686]" parses as a JSON array; the bracket after it is a host tag, no document.
    line = ("[1784273406.684686] [host-1:994396:0]      ib_mlx5_dv.c:452  UCX  ERROR   "
            "mlx5dv_devx_obj_create(CQ) failed on mlx5_1, syndrome 0x2aac7c: Remote I/O error\n")
    (tmp_path / "server.log").write_text(line * 3)
    verdict, ev = classify_paths([str(tmp_path)])
    # read as a log, not refused as JSON of no known kind
    assert [(s.kind, s.error) for s in ev.sources] == [("log", None)]


_TOOL_PARSER_FAILURE = (
    '(APIServer pid=85343) INFO:     127.0.0.1:50001 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    "(APIServer pid=85343) ERROR 10-09 09:39:54 [hermes_tool_parser.py:157] Error in extracting tool call from response.\n"
    "(APIServer pid=85343) ERROR 10-09 09:39:54 [hermes_tool_parser.py:157] Traceback (most recent call last):\n"
    '(APIServer pid=85343) ERROR 10-09 09:39:54 [hermes_tool_parser.py:157]   File "/usr/lib/python3.10/site-packages/'
    'vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py", line 135, in extract_tool_calls\n'
    "(APIServer pid=85343) ERROR 10-09 09:39:54 [hermes_tool_parser.py:157]     json.loads(match[0] if match[0] else match[1])\n")


def test_a_failure_in_code_that_runs_on_the_host_only_leans_away_from_a_gpu_oom(tmp_path):
    v = _classify(tmp_path, _TOOL_PARSER_FAILURE)
    assert v.oom_class.value == "not_gpu_oom" and v.confidence == pytest.approx(0.6)
    assert "host CPU" in v.summary


def test_a_device_frame_below_host_code_is_no_host_failure(tmp_path):
    # The same parser's frame above a model layer's: the stack ends in device work.
    deeper = _TOOL_PARSER_FAILURE + (
        '(APIServer pid=85343) ERROR 10-09 09:39:54 [hermes_tool_parser.py:157]   File "/usr/lib/python3.10/'
        'site-packages/vllm/model_executor/layers/linear.py", line 510, in forward\n')
    assert _classify(tmp_path, deeper).oom_class.value != "not_gpu_oom"
    # and a request handler's error, which may relay the engine's failure, is not read as host code
    relayed = ("ERROR 05-01 01:51:54 [serving_chat.py:898] Error in chat_completion_stream_generator.\n")
    assert _classify(tmp_path, relayed).oom_class.value == "unknown"


def test_an_error_answer_saying_the_runner_failed_to_start_is_a_start_up_oom(tmp_path):
    # The client's copy of the answer: the request only asked for a model the runner could not load.
    answer = ('Error: 500 {"error":"llama runner process has terminated: cudaMalloc failed: out of memory\\n'
              'ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9646586240"}\n')
    assert _classify(tmp_path, answer).oom_class.value == "startup"
    served = 'Error: 500 {"error":"CUDA out of memory. Tried to allocate 2.00 GiB"}\n'
    assert _classify(tmp_path, served).oom_class.value == "burst"


def test_a_logfmt_error_value_that_speaks_of_no_memory_leans_away_from_a_gpu_oom(tmp_path):
    line = ('time=2025-01-01T00:00:00.000Z level=ERROR source=server.go:812 msg="post predict" '
            'error="invalid character \'<\' looking for beginning of value"\n')
    v = _classify(tmp_path, line)
    assert v.oom_class.value == "not_gpu_oom" and v.confidence == pytest.approx(0.55)
    memory = line.replace("invalid character '<' looking for beginning of value", "cudaMalloc failed: out of memory")
    assert _classify(tmp_path, memory).oom_class.value != "not_gpu_oom"


def test_a_tracebacks_carets_logged_at_error_level_are_no_failure_of_their_own(tmp_path):
    served = 'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    carets = "(EngineCore pid=990) ERROR 07-20 20:33:13 [core.py:1233] ^^^^^^^^^^^^^^^^^^^^^^^^\n"
    assert _classify(tmp_path, served + carets).oom_class.value == "no_oom"
