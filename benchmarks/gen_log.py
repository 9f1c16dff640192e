#!/usr/bin/env python3
"""Write a large, realistic, deterministic vLLM server log for the benchmarks.

    python benchmarks/gen_log.py OUT --size 1G [--seed N] [--ansi] [--no-cr]
    python benchmarks/gen_log.py OUT --size 40M --shape vllm-debug   (other shapes: gen_shapes.py)

The log imitates vLLM 0.11 (V1 engine) serving Llama-3.1-8B on one 80 GB H100 behind
uvicorn: a start-up block, hours of access-log lines with a stats line every 10 s of log
time (GPU KV cache usage slowly climbing), then a short overload ramp (KV usage near 99 %,
a growing waiting queue) and a runtime CUDA OOM in the engine core, logged the way vLLM
logs it (every traceback line carries the process and level prefix, records joined by
CR LF), followed by the API server's EngineDeadError, a few 500s and the shutdown.

Output depends only on (size, seed, flags). Memory use is bounded: lines are built one
block of log seconds at a time and written as they are made. Standard library only.
"""
from __future__ import annotations

import argparse
import itertools
import math
import operator
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO

# --- fixed facts about the simulated server -------------------------------------------

START = datetime(2025, 11, 20, 12, 0, 0)  # the year never appears in the log
API = "(APIServer pid=1)"
ENGINE = "(EngineCore_DP0 pid=412)"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SITE = "/usr/local/lib/python3.12/dist-packages"
STATS_EVERY_S = 10          # VLLM_LOG_STATS_INTERVAL default
PROBE_EVERY_S = 10          # kubelet liveness + readiness
SCRAPE_EVERY_S = 15         # Prometheus
MAX_NUM_SEQS = 256
RAMP_FRACTION = 0.001       # the overload ramp is the last ~0.1 % of the bulk ...
RAMP_MIN_BYTES = 1_500_000  # ... but long enough to hold a handful of stats lines
FLUSH_BYTES = 4 << 20       # write in ~4 MiB blocks
SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
ANSI_CYAN, ANSI_RESET = "\x1b[1;36m", "\x1b[0;0m"


def parse_size(text: str) -> int:
    """'1G' -> 1073741824; accepts K/M/G/T with optional 'B'/'iB', binary multiples."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (examples: 500K, 20M, 1G)")
    size = int(float(m.group(1)) * SIZE_UNITS[m.group(2)])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return size


# --- line prefixes --------------------------------------------------------------------


class Prefixes:
    """Builds the per-process stream prefix and the vLLM logging prefix."""

    def __init__(self, ansi: bool, cr: bool) -> None:
        wrap = (lambda p: f"{ANSI_CYAN}{p}{ANSI_RESET} ") if ansi else (lambda p: p + " ")
        self.api = wrap(API)
        self.engine = wrap(ENGINE)
        self.sep = "\r\n" if cr else "\n"  # vLLM's NewLineFormatter joins record lines with CR LF

    @staticmethod
    def stamp(t: datetime) -> str:
        return t.strftime("%m-%d %H:%M:%S")

    def record(self, proc: str, level: str, t: datetime, where: str, lines: list[str]) -> str:
        """One log record; every continuation line repeats the full prefix (vLLM does)."""
        head = f"{proc}{level} {self.stamp(t)} [{where}] "
        return self.sep.join(head + line for line in lines) + "\n"

    def raw(self, proc: str, lines: list[str]) -> str:
        """Text printed straight to the stream (tqdm, interpreter tracebacks): no level."""
        return "".join(f"{proc}{line}\n" for line in lines)

    def uvicorn(self, level: str, message: str) -> str:
        return f"{self.api}{(level + ':').ljust(9)} {message}\n"


# --- start-up block -------------------------------------------------------------------

CONFIG = (
    f"model='{MODEL}', speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
    "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=auto, "
    "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
    "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
    "device_config=cuda, structured_outputs_config=StructuredOutputsConfig(backend='auto', "
    "disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, "
    "reasoning_parser=''), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
    "otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, "
    f"served_model_name={MODEL}, enable_prefix_caching=True, chunked_prefill_enabled=True, "
    "pooler_config=None, compilation_config={\"level\":3,\"debug_dump_path\":\"\",\"cache_dir\":\"\","
    "\"backend\":\"\",\"custom_ops\":[],\"splitting_ops\":[\"vllm.unified_attention\","
    "\"vllm.unified_attention_with_output\",\"vllm.mamba_mixer2\"],\"use_inductor\":true,"
    "\"compile_sizes\":[],\"cudagraph_mode\":[2,1],\"use_cudagraph\":true,\"cudagraph_num_of_warmups\":1,"
    "\"cudagraph_capture_sizes\":[512,504,496,488,480,472,464,456,448,440,432,424,416,408,400,392,384,"
    "376,368,360,352,344,336,328,320,312,304,296,288,280,272,264,256,248,240,232,224,216,208,200,192,"
    "184,176,168,160,152,144,136,128,120,112,104,96,88,80,72,64,56,48,40,32,24,16,8,4,2,1],"
    "\"full_cuda_graph\":false,\"max_capture_size\":512,\"local_cache_dir\":null}"
)
NON_DEFAULT_ARGS = (
    f"{{'model_tag': '{MODEL}', 'host': '0.0.0.0', 'model': '{MODEL}', 'max_model_len': 32768, "
    "'gpu_memory_utilization': 0.9, 'max_num_seqs': 256, 'enable_prefix_caching': True}"
)
ROUTES = [
    ("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"), ("/load", "GET"),
    ("/ping", "POST"), ("/ping", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
    ("/v1/models", "GET"), ("/version", "GET"), ("/v1/responses", "POST"),
    ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/v1/embeddings", "POST"),
    ("/metrics", "GET"),
]


def startup_block(px: Prefixes) -> tuple[str, datetime]:
    """The lines a V1 0.11 server writes from launch to 'Application startup complete.'."""
    out: list[str] = []

    def api(dt: float, where: str, msg: str, level: str = "INFO") -> None:
        out.append(px.record(px.api, level, START + timedelta(seconds=dt), where, [msg]))

    def eng(dt: float, where: str, msg: str, level: str = "INFO") -> None:
        out.append(px.record(px.engine, level, START + timedelta(seconds=dt), where, [msg]))

    api(0, "api_server.py:1839", "vLLM API server version 0.11.0")
    api(0, "utils.py:233", f"non-default args: {NON_DEFAULT_ARGS}")
    api(6, "model.py:547", "Resolved architecture: LlamaForCausalLM")
    api(6, "model.py:1510", "Using max model len 32768")
    api(6, "scheduler.py:205", "Chunked prefill is enabled with max_num_batched_tokens=8192.")
    eng(13, "core.py:644", "Waiting for init message from front-end.")
    eng(13, "core.py:77", f"Initializing a V1 LLM engine (v0.11.0) with config: {CONFIG}")
    eng(15, "parallel_state.py:1208", "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, "
        "TP rank 0, EP rank 0")
    eng(15, "gpu_model_runner.py:2602", f"Starting to load model {MODEL}...")
    eng(15, "gpu_model_runner.py:2634", "Loading model from scratch...")
    eng(15, "cuda.py:366", "Using Flash Attention backend on V1 engine.")
    eng(16, "weight_utils.py:392", "Using model weights format ['*.safetensors']")
    out.append(px.raw(px.engine, [
        "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:05<00:00,  1.28s/it]",
    ]))
    eng(21, "default_loader.py:267", "Loading weights took 5.13 seconds")
    eng(22, "gpu_model_runner.py:2653", "Model loading took 14.9889 GiB and 6.201234 seconds")
    eng(29, "backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache/"
        "1f3a9c2b7e/rank_0_0/backbone for vLLM's torch.compile")
    eng(29, "backends.py:559", "Dynamo bytecode transform time: 6.02 s")
    eng(33, "backends.py:164", "Directly load the compiled graph(s) for dynamic shape from the cache, "
        "took 3.412 s")
    eng(35, "monitor.py:34", "torch.compile takes 9.43 s in total")
    eng(37, "gpu_worker.py:298", "Available KV cache memory: 52.31 GiB")
    eng(37, "kv_cache_utils.py:1087", "GPU KV cache size: 428,528 tokens")
    eng(37, "kv_cache_utils.py:1091", "Maximum concurrency for 32,768 tokens per request: 13.08x")
    out.append(px.raw(px.engine, [
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|\u2588\u2588\u2588\u2588\u2588"
        "\u2588\u2588\u2588\u2588\u2588| 67/67 [00:03<00:00, 19.47it/s]",
        "Capturing CUDA graphs (decode, FULL): 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588"
        "\u2588\u2588| 35/35 [00:01<00:00, 22.10it/s]",
    ]))
    eng(42, "gpu_model_runner.py:3480", "Graph capturing finished in 5 secs, took 0.52 GiB")
    eng(42, "core.py:210", "init engine (profile, create kv cache, warmup model) took 20.71 seconds")
    api(43, "loggers.py:147", "Engine 000: vllm cache_config_info with initialization after "
        "num_gpu_blocks is: 26783")
    api(43, "api_server.py:1634", "Supported_tasks: ['generate']")
    api(43, "api_server.py:1912", "Starting vLLM server on http://0.0.0.0:8000")
    api(43, "launcher.py:34", "Available routes are:")
    for path, methods in ROUTES:
        api(43, "launcher.py:42", f"Route: {path}, Methods: {methods}")
    out.append(px.uvicorn("INFO", "Started server process [1]"))
    out.append(px.uvicorn("INFO", "Waiting for application startup."))
    out.append(px.uvicorn("INFO", "Application startup complete."))
    return "".join(out), START + timedelta(seconds=45)


# --- bulk: access log, probes, stats, warnings ----------------------------------------

# (request line + status, weight); most traffic is chat completions
REQUESTS = [
    ('"POST /v1/chat/completions HTTP/1.1" 200 OK', 82000),
    ('"POST /v1/completions HTTP/1.1" 200 OK', 13000),
    ('"GET /v1/models HTTP/1.1" 200 OK', 2500),
    ('"POST /tokenize HTTP/1.1" 200 OK', 600),
    ('"POST /v1/chat/completions HTTP/1.1" 400 Bad Request', 900),
    ('"POST /v1/completions HTTP/1.1" 400 Bad Request', 150),
    ('"POST /v1/chat/completions HTTP/1.1" 422 Unprocessable Entity', 200),
    ('"GET /v1/model HTTP/1.1" 404 Not Found', 40),
    ('"GET /favicon.ico HTTP/1.1" 404 Not Found', 20),
    ('"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error', 1),  # ~1 in 100k
]
CLIENT_IPS = [f"10.0.{a}.{b}" for a, b in
              [(3, 17), (3, 41), (3, 88), (4, 9), (4, 112), (4, 201), (5, 23), (5, 77),
               (7, 130), (7, 131), (12, 6), (12, 54), (12, 199), (14, 3), (14, 250), (21, 18)]]
PROBE_IP, SCRAPER_IP = "10.0.0.12", "10.0.9.4"
WARNINGS = [
    "The following fields were present in the request but ignored: {'metadata'}",
    "The following fields were present in the request but ignored: {'store'}",
    "The following fields were present in the request but ignored: {'service_tier', 'user'}",
]


class Bulk:
    """Makes the serving part of the log, one log second at a time."""

    def __init__(self, px: Prefixes, rng: random.Random) -> None:
        self.px = px
        self.rng = rng
        access = px.api + "INFO:     "
        # client "ip:port" strings with the access prefix baked in (ports are ephemeral)
        self.clients = [f"{access}{rng.choice(CLIENT_IPS)}:{rng.randint(32768, 60999)} - "
                        for _ in range(8192)]
        self.requests = [r + "\n" for r, _ in REQUESTS]
        self.cum_weights = list(itertools.accumulate(w for _, w in REQUESTS))
        self.probe = [f"{access}{PROBE_IP}:{rng.randint(32768, 60999)} - "
                      '"GET /health HTTP/1.1" 200 OK\n' for _ in range(256)]
        self.scrape = [f"{access}{SCRAPER_IP}:{rng.randint(32768, 60999)} - "
                       '"GET /metrics HTTP/1.1" 200 OK\n' for _ in range(256)]
        self.hit_rate = 55.0

    def second(self, t: datetime, tick: int, progress: float, ramp: float) -> str:
        """All lines of one log second. `progress` in [0, 1]; `ramp` in [0, 1] near the end."""
        rng = self.rng
        parts: list[str] = []
        if tick % PROBE_EVERY_S == 0:
            parts += rng.sample(self.probe, 2)
        if tick % SCRAPE_EVERY_S == 0:
            parts.append(rng.choice(self.scrape))
        if tick % STATS_EVERY_S == 0:
            parts.append(self.stats_line(t, tick, progress, ramp))
        if rng.random() < 0.004:
            parts.append(self.px.record(self.px.api, "WARNING", t, "protocol.py:93",
                                        [rng.choice(WARNINGS)]))
        if rng.random() < 0.0005:
            parts.append(self.px.uvicorn("WARNING", "Invalid HTTP request received."))
        n = self.request_rate(tick, ramp)
        clients = rng.choices(self.clients, k=n)
        requests = rng.choices(self.requests, cum_weights=self.cum_weights, k=n)
        parts.append("".join(map(operator.add, clients, requests)))
        return "".join(parts)

    def request_rate(self, tick: int, ramp: float) -> int:
        """100-300 requests per log second, with a slow daily swing and a surge in the ramp."""
        swing = 0.5 + 0.5 * math.sin(tick / 7200.0)
        base = 110 + 120 * swing + 70 * ramp
        return max(100, min(300, int(base + self.rng.uniform(-10, 10))))

    def stats_line(self, t: datetime, tick: int, progress: float, ramp: float) -> str:
        rng = self.rng
        if ramp > 0:
            kv = 90.0 + 9.5 * ramp + rng.uniform(-0.2, 0.3)
            waiting = int(3 + 140 * ramp * ramp + rng.randint(0, 4))
        else:
            kv = 15.0 + 70.0 * progress + 5.0 * math.sin(tick / 900.0) + rng.gauss(0.0, 1.5)
            waiting = rng.randint(1, 6) if kv > 80 and rng.random() < 0.3 else 0
        kv = min(99.9, max(0.5, kv))
        running = min(MAX_NUM_SEQS, int(30 + 2.2 * kv + rng.uniform(-8, 8)))
        prompt_tps = rng.uniform(3000, 9000) * (1 + ramp)
        gen_tps = running * rng.uniform(18, 30)
        self.hit_rate = min(75.0, max(35.0, self.hit_rate + rng.uniform(-1.0, 1.0)))
        msg = (f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
               f"Avg generation throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, "
               f"Waiting: {waiting} reqs, GPU KV cache usage: {kv:.1f}%, "
               f"Prefix cache hit rate: {self.hit_rate:.1f}%")
        return self.px.record(self.px.api, "INFO", t, "loggers.py:127", [msg])


# --- the crash ------------------------------------------------------------------------

OOM_MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 301.94 MiB is free. Process 2841733 has 78.88 GiB memory in use. "
    "Of the allocated memory 76.02 GiB is allocated by PyTorch, with 530.00 MiB allocated in private "
    "pools (e.g., CUDA Graphs), and 214.37 MiB is reserved by PyTorch but unallocated. If reserved "
    "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)
CACHE_PY = ("/root/.cache/vllm/torch_compile_cache/1f3a9c2b7e/rank_0_0/inductor_cache/"
            "q4/cq4lmzx7d3kfsm2j6v5ae3ypnqdr6ugwq2c4hyzq6rbf3oz7vyib.py")

# (file, line, function, source line, whether 3.12 prints carets under the call); innermost last
Frame = tuple[str, int, str, str, bool]
ENGINE_FRAMES: list[Frame] = [
    ("vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()", False),
    ("vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()", False),
    ("vllm/v1/engine/core.py", 754, "_process_engine_step",
     "outputs, model_executed = self.step_fn()", True),
    ("vllm/v1/engine/core.py", 284, "step",
     "model_output = self.execute_model_with_error_logging(", True),
    ("vllm/v1/engine/core.py", 270, "execute_model_with_error_logging", "raise err", False),
    ("vllm/v1/engine/core.py", 261, "execute_model_with_error_logging",
     "return model_fn(scheduler_output)", True),
    ("vllm/v1/executor/abstract.py", 103, "execute_model",
     'output = self.collective_rpc("execute_model",', True),
    ("vllm/executor/uniproc_executor.py", 83, "collective_rpc",
     "return [run_method(self.driver_worker, method, args, kwargs)]", True),
    ("vllm/utils/__init__.py", 3122, "run_method", "return func(*args, **kwargs)", True),
    ("torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)", True),
    ("vllm/v1/worker/gpu_worker.py", 447, "execute_model",
     "output = self.model_runner.execute_model(scheduler_output,", True),
    ("torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)", True),
    ("vllm/v1/worker/gpu_model_runner.py", 2260, "execute_model", "model_output = self.model(", True),
    ("vllm/compilation/cuda_graph.py", 126, "__call__", "return self.runnable(*args, **kwargs)", True),
    ("torch/nn/modules/module.py", 1773, "_wrapped_call_impl",
     "return self._call_impl(*args, **kwargs)", True),
    ("torch/nn/modules/module.py", 1784, "_call_impl", "return forward_call(*args, **kwargs)", True),
    ("vllm/model_executor/models/llama.py", 592, "forward",
     "model_output = self.model(input_ids, positions, intermediate_tensors,", False),
    ("vllm/compilation/decorators.py", 305, "__call__",
     "output = self.compiled_callable(*args, **kwargs)", True),
    ("torch/_dynamo/eval_frame.py", 736, "compile_wrapper", "return fn(*args, **kwargs)", True),
    ("vllm/model_executor/models/llama.py", 377, "forward", "def forward(", False),
    ("torch/_dynamo/eval_frame.py", 929, "_fn", "return fn(*args, **kwargs)", True),
    ("torch/fx/graph_module.py", 848, "call_wrapped",
     "return self._wrapped_call(self, *args, **kwargs)", True),
    ("torch/fx/graph_module.py", 424, "__call__", "raise e", False),
    ("torch/fx/graph_module.py", 411, "__call__",
     "return super(self.cls, obj).__call__(*args, **kwargs)  # type: ignore[misc]", False),
    ("<eval_with_key>.66", 209, "forward",
     "submod_2 = self.submod_2(getitem_3, s0, l_self_modules_layers_modules_0_modules_mlp_"
     "modules_down_proj_parameters_weight_, getitem_4, l_positions_)", False),
    ("vllm/compilation/cuda_graph.py", 121, "__call__", "return self.runnable(*args, **kwargs)", True),
    ("vllm/compilation/piecewise_backend.py", 90, "__call__",
     "return self.compiled_graph_for_general_shape(*args)", True),
    ("torch/_inductor/output_code.py", 584, "__call__", "return self.current_callable(inputs)", True),
    (CACHE_PY, 512, "call",
     "buf5 = empty_strided_cuda((s0, 28672), (28672, 1), torch.bfloat16)", True),
]
PROCESS_FRAMES: list[Frame] = [
    ("/usr/lib/python3.12/multiprocessing/process.py", 314, "_bootstrap", "self.run()", False),
    ("/usr/lib/python3.12/multiprocessing/process.py", 108, "run",
     "self._target(*self._args, **self._kwargs)", False),
    ("vllm/v1/engine/core.py", 712, "run_engine_core", "raise e", False),
]
API_FRAMES: list[Frame] = [
    ("vllm/v1/engine/async_llm.py", 439, "output_handler",
     "outputs = await engine_core.get_output_async()", True),
    ("vllm/v1/engine/core_client.py", 846, "get_output_async",
     "raise self._format_exception(outputs) from None", False),
]
ENGINE_DEAD = ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
               "See stack trace (above) for the root cause.")


def traceback_lines(frames: list[Frame], last: str) -> list[str]:
    """Python 3.12 style traceback text, as a list of lines."""
    lines = ["Traceback (most recent call last):"]
    for path, lineno, func, src, caret in frames:
        full = path if path.startswith(("/", "<")) else f"{SITE}/{path}"
        lines.append(f'  File "{full}", line {lineno}, in {func}')
        lines.append(f"    {src}")
        if caret:
            lines.append("    " + _carets(src))
    lines.append(last)
    return lines


def _carets(src: str) -> str:
    """Underline the call expression: the right-hand side of '=' or what 'return' returns."""
    if " = " in src:
        start = src.index(" = ") + 3
    elif src.startswith("return ["):
        start = 8
    elif src.startswith("return "):
        start = 7
    else:
        start = 0
    end = len(src) - 1 if src.endswith("]") else len(src)
    return " " * start + "^" * (end - start)


def crash_block(px: Prefixes, t: datetime, rng: random.Random) -> str:
    """The engine-core OOM and what the API server writes after it."""
    t1 = t + timedelta(seconds=1)
    out: list[str] = []
    eng = px.engine
    out.append(px.record(eng, "ERROR", t, "dump_input.py:69",
                         [f"Dumping input data for V1 LLM engine (v0.11.0) with config: {CONFIG}, "]))
    out.append(px.record(eng, "ERROR", t, "dump_input.py:76", [
        "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], "
        "scheduled_cached_reqs=CachedRequestData(req_ids=['chatcmpl-7d1c0e4b9a2f4e55b0c1f3a6d8e2b419', "
        "'chatcmpl-0f9e8d7c6b5a49382716a5b4c3d2e1f0'], resumed_from_preemption=[false, false], "
        "new_token_ids=[], new_block_ids=[null, null], num_computed_tokens=[18432, 9216]), "
        "num_scheduled_tokens={chatcmpl-7d1c0e4b9a2f4e55b0c1f3a6d8e2b419: 8192}, "
        "total_num_scheduled_tokens=8192, scheduled_spec_decode_tokens={}, "
        "scheduled_encoder_inputs={}, num_common_prefix_blocks=[0], finished_req_ids=[], "
        "free_encoder_mm_hashes=[], structured_output_request_ids={}, grammar_bitmask=null, "
        "kv_connector_metadata=null)"]))
    out.append(px.record(eng, "ERROR", t, "dump_input.py:79", [
        "Dumping scheduler stats: SchedulerStats(num_running_reqs=256, num_waiting_reqs=147, "
        "step_counter=0, current_wave=0, kv_cache_usage=0.9941234, prefix_cache_stats=PrefixCacheStats("
        "reset=False, requests=5, queries=41216, hits=23552), spec_decoding_stats=None, "
        "num_corrupted_reqs=0)"]))
    out.append(px.record(eng, "ERROR", t, "core.py:710",
                         ["EngineCore encountered a fatal error."]
                         + traceback_lines(ENGINE_FRAMES, OOM_MESSAGE)))
    # re-raised: the interpreter prints it again, stream prefix only
    out.append(px.raw(eng, ["Process EngineCore_DP0:"]
                      + traceback_lines(PROCESS_FRAMES + ENGINE_FRAMES, OOM_MESSAGE)))
    out.append(px.record(px.api, "ERROR", t, "async_llm.py:480",
                         ["AsyncLLM output_handler failed."]
                         + traceback_lines(API_FRAMES, ENGINE_DEAD)))
    for _ in range(rng.randint(4, 7)):
        ip, port = rng.choice(CLIENT_IPS), rng.randint(32768, 60999)
        out.append(px.uvicorn("INFO", f'{ip}:{port} - "POST /v1/chat/completions HTTP/1.1" '
                                      "500 Internal Server Error"))
    out.append(px.record(px.api, "ERROR", t1, "core_client.py:565",
                         ["Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."]))
    for msg in ("Shutting down", "Waiting for application shutdown.",
                "Application shutdown complete.", "Finished server process [1]"):
        out.append(px.uvicorn("INFO", msg))
    return "".join(out)


# --- driver ---------------------------------------------------------------------------


def bulk_chunks(
    px: Prefixes, rng: random.Random, start: datetime, budget: int
) -> Iterator[tuple[str, datetime]]:
    """Yields (text, time of last line) blocks until about `budget` bytes were produced."""
    bulk = Bulk(px, rng)
    ramp_bytes = min(budget, max(int(budget * RAMP_FRACTION), RAMP_MIN_BYTES))
    ramp_start = budget - ramp_bytes
    done, tick, t = 0, 0, start
    block: list[str] = []
    block_len = 0
    while done < budget:
        ramp = max(0.0, (done - ramp_start) / ramp_bytes) if ramp_bytes else 0.0
        text = bulk.second(t, tick, done / budget, ramp)
        block.append(text)
        block_len += len(text)
        done += len(text)  # the bulk is pure ASCII: chars == bytes
        if block_len >= FLUSH_BYTES:
            yield "".join(block), t
            block, block_len = [], 0
        tick += 1
        t += timedelta(seconds=1)
    yield "".join(block), t - timedelta(seconds=1)


def generate(out: Path, size: int, seed: int, ansi: bool = False, cr: bool = True) -> int:
    """Writes the log to `out` (atomically, via a .part file). Returns bytes written."""
    rng = random.Random(seed)
    px = Prefixes(ansi=ansi, cr=cr)
    head, bulk_start = startup_block(px)
    head_b = head.encode()
    tail_len = len(crash_block(px, START, random.Random(seed)).encode())  # same length at any time
    budget = max(0, size - len(head_b) - tail_len)
    tmp = out.with_name(out.name + ".part")
    written = 0
    with open(tmp, "wb", buffering=0) as f:
        written += _write(f, head_b)
        end = bulk_start
        for text, end in bulk_chunks(px, rng, bulk_start, budget):  # noqa: B007 (end is used after)
            written += _write(f, text.encode())
        written += _write(f, crash_block(px, end + timedelta(seconds=1), rng).encode())
    os.replace(tmp, out)
    return written


def _write(f: BinaryIO, data: bytes) -> int:
    f.write(data)
    return len(data)


def main(argv: list[str] | None = None) -> int:
    import gen_shapes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="file to write")
    ap.add_argument("--size", type=parse_size, default=parse_size("100M"),
                    help="approximate size, e.g. 20M, 1G (binary units; default 100M)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--ansi", action="store_true",
                    help="colour the process prefixes as vLLM 0.11 does even off a TTY")
    ap.add_argument("--no-cr", dest="cr", action="store_false",
                    help="join multi-line records with LF only (vLLM writes CR LF)")
    ap.add_argument("--shape", choices=("access", *gen_shapes.SHAPES), default="access",
                    help="the access log above (default), or a shape of gen_shapes.py")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.shape == "access":
        n = generate(args.out, args.size, args.seed, ansi=args.ansi, cr=args.cr)
    else:
        n = gen_shapes.generate(args.out, args.size, args.seed, args.shape)
    dt = time.perf_counter() - t0
    print(f"wrote {args.out} ({n:,} bytes) in {dt:.1f} s ({n / dt / 1e6:.0f} MB/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
