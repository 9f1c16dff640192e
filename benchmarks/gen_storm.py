#!/usr/bin/env python3
"""Write big, deterministic V0 vLLM logs of three shapes for the benchmarks: a storm, probes, a dead engine.

    python benchmarks/gen_storm.py OUT --shape storm  --size 600M [--seed N] [--no-cr]
    python benchmarks/gen_storm.py OUT --shape probes --size 1G   [--seed N] [--no-cr]
    python benchmarks/gen_storm.py OUT --shape dead   --size 600M [--seed N] [--no-cr]

Both imitate vLLM 0.6.3.post1 (V0 engine, Llama-3.1-8B on one 80 GB GPU, no process prefixes,
no ANSI colour) and start with the start-up block of samples/burst-long-prompts-v0 (`vLLM API
server version`, `args: Namespace(...)`, `Initializing an LLM engine (v0.6.3.post1)`, weights,
`# GPU blocks`, CUDA graphs, routes, uvicorn's start lines).

storm: a preemption storm, by lines about 89 % uvicorn access lines (`POST /v1/completions`,
  plus kubelet `GET /health` every 10 s and Prometheus `GET /metrics` every 15 s of log time),
  5 % V0 preemption warnings (`scheduler.py:1560] Sequence group cmpl-...-0 is preempted by
  PreemptionMode.RECOMPUTE mode ... total_num_cumulative_preemption=N`, N going up by 50 as
  V0 logs every 50th), 1 % V0 stats lines (`metrics.py:351]`, every 5 s, GPU KV cache usage
  97-99.9 %), 5 % other WARNING lines, ~20 lines per second of log time; a last ramp (prompt
  throughput up, Pending over 80) and the runtime torch OOM of that sample: `Engine background
  task failed` with the chained traceback, printed again by the interpreter, then
  AsyncEngineDeadError, 500s, `AsyncLLMEngine has failed` and the shutdown. Verdict: burst.
  (`scheduler.py:1560` and `metrics.py:351` as in a field report; 0.6.3.post1 has 1484 and 349.)

probes: an idle server watched by Prometheus and kubelets: after the start-up, two minutes of
  light traffic (POSTs and stats lines), then only `GET /metrics` / `GET /health` access
  lines (HTTP/1.1 and HTTP/1.0 checks, uvicorn behind a proxy (`ip:0`) and on a unix socket
  (no client), and a few nginx- and envoy-style proxy lines), with a short burst of traffic
  and a stats line every 1/16 of the file. No failure. Verdict: no_oom.

dead: a dead engine that keeps its HTTP server up: 2 % of the budget of storm, the runtime OOM,
  then every later request answered 500 with uvicorn's `Exception in ASGI application` and a
  traceback of its own ending in `AsyncEngineDeadError: Background loop has errored already.`
  (V0's add_request on a dead background loop), ~40 a second of log time, with the probes and
  scrapes still coming; the termination lines at the end. Verdict: burst (the crash decides).

Output depends only on (shape, size, seed, --no-cr). Memory stays flat: lines are built one
log second at a time and written in ~4 MiB blocks, into OUT.part, renamed to OUT at the end.
Standard library only; shares its helpers with gen_log.py.
"""
from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import gen_log
from gen_log import FLUSH_BYTES, Frame, parse_size, traceback_lines

SHAPES = ("storm", "probes", "dead")
START = datetime(2024, 10, 14, 9, 58, 2)  # V0 writes no year; incident.yaml needs one
YEAR = START.year
STATS_EVERY_S = 5            # V0 _LOCAL_LOGGING_INTERVAL_SEC
PROBE_EVERY_S = 10           # kubelet liveness + readiness
SCRAPE_EVERY_S = 15          # Prometheus
PREEMPT_LOG_EVERY = 50       # V0 warns on the 1st, 51st, 101st, ... preemption
PROBES_PER_S = 50            # probes shape: access lines per second of log time
PROBE_BLIPS = 16             # probes shape: bursts of traffic (with a stats line) in the bulk
RAMP_BYTES = 150_000         # storm: the last ~80 s of log time before the OOM


# --- line prefixes (V0: no brackets, no process prefix) -------------------------------


class V0:
    def __init__(self, cr: bool) -> None:
        self.sep = "\r\n" if cr else "\n"  # NewLineFormatter joins record lines with CR LF

    def record(self, level: str, stamp: str, where: str, lines: list[str]) -> str:
        head = f"{level} {stamp} {where}] "
        return self.sep.join(head + line for line in lines) + "\n"

    @staticmethod
    def uvicorn(level: str, message: str) -> str:
        return f"{(level + ':').ljust(9)} {message}\n"


def stamp(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


# --- start-up: samples/burst-long-prompts-v0, lines 1-35 ------------------------------

ARGS = (
    "args: Namespace(host=None, port=8000, uvicorn_log_level='info', allow_credentials=False, "
    "allowed_origins=['*'], allowed_methods=['*'], allowed_headers=['*'], api_key=None, lora_modules=None, "
    "prompt_adapters=None, chat_template=None, response_role='assistant', ssl_keyfile=None, ssl_certfile=None, "
    "ssl_ca_certs=None, ssl_cert_reqs=0, root_path=None, middleware=[], return_tokens_as_token_ids=False, "
    "disable_frontend_multiprocessing=True, enable_auto_tool_choice=False, tool_call_parser=None, "
    "tool_parser_plugin='', model='meta-llama/Llama-3.1-8B-Instruct', tokenizer=None, skip_tokenizer_init=False, "
    "revision=None, code_revision=None, tokenizer_revision=None, tokenizer_mode='auto', trust_remote_code=False, "
    "download_dir=None, load_format='auto', config_format=<ConfigFormat.AUTO: 'auto'>, dtype='auto', "
    "kv_cache_dtype='auto', quantization_param_path=None, max_model_len=32768, "
    "guided_decoding_backend='outlines', distributed_executor_backend=None, worker_use_ray=False, "
    "pipeline_parallel_size=1, tensor_parallel_size=1, max_parallel_loading_workers=None, "
    "ray_workers_use_nsight=False, block_size=16, enable_prefix_caching=False, disable_sliding_window=False, "
    "use_v2_block_manager=False, num_lookahead_slots=0, seed=0, swap_space=4, cpu_offload_gb=0, "
    "gpu_memory_utilization=0.95, num_gpu_blocks_override=None, max_num_batched_tokens=None, max_num_seqs=256, "
    "max_logprobs=20, disable_log_stats=False, quantization=None, rope_scaling=None, rope_theta=None, "
    "enforce_eager=False, max_context_len_to_capture=None, max_seq_len_to_capture=8192, "
    "disable_custom_all_reduce=False, tokenizer_pool_size=0, tokenizer_pool_type='ray', "
    "tokenizer_pool_extra_config=None, limit_mm_per_prompt=None, mm_processor_kwargs=None, enable_lora=False, "
    "max_loras=1, max_lora_rank=16, lora_extra_vocab_size=256, lora_dtype='auto', long_lora_scaling_factors=None, "
    "max_cpu_loras=None, fully_sharded_loras=False, enable_prompt_adapter=False, max_prompt_adapters=1, "
    "max_prompt_adapter_token=0, device='auto', num_scheduler_steps=1, multi_step_stream_outputs=True, "
    "scheduler_delay_factor=0.0, enable_chunked_prefill=None, speculative_model=None, "
    "speculative_model_quantization=None, num_speculative_tokens=None, speculative_disable_mqa_scorer=False, "
    "speculative_draft_tensor_parallel_size=None, speculative_max_model_len=None, "
    "speculative_disable_by_batch_size=None, ngram_prompt_lookup_max=None, ngram_prompt_lookup_min=None, "
    "spec_decoding_acceptance_method='rejection_sampler', typical_acceptance_sampler_posterior_threshold=None, "
    "typical_acceptance_sampler_posterior_alpha=None, disable_logprobs_during_spec_decoding=None, "
    "model_loader_extra_config=None, ignore_patterns=[], preemption_mode=None, "
    "served_model_name=['llama-3.1-8b-instruct'], qlora_adapter_name_or_path=None, otlp_traces_endpoint=None, "
    "collect_detailed_traces=None, disable_async_output_proc=False, override_neuron_config=None, "
    "disable_log_requests=True, max_log_len=None, disable_fastapi_docs=False, enable_prompt_tokens_details=False)"
)
ENGINE_CONFIG = (
    "Initializing an LLM engine (v0.6.3.post1) with config: model='meta-llama/Llama-3.1-8B-Instruct', "
    "speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', skip_tokenizer_init=False, "
    "tokenizer_mode=auto, revision=None, override_neuron_config=None, rope_scaling=None, rope_theta=None, "
    "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, "
    "download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, pipeline_parallel_size=1, "
    "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
    "quantization_param_path=None, device_config=cuda, "
    "decoding_config=DecodingConfig(guided_decoding_backend='outlines'), "
    "observability_config=ObservabilityConfig(otlp_traces_endpoint=None, collect_model_forward_time=False, "
    "collect_model_execute_time=False), seed=0, served_model_name=llama-3.1-8b-instruct, num_scheduler_steps=1, "
    "chunked_prefill_enabled=False multi_step_stream_outputs=True, enable_prefix_caching=False, "
    "use_async_output_proc=True, use_cached_outputs=False, mm_processor_kwargs=None)"
)
# (seconds after launch, level, "file.py:line] message"); None: printed without the vLLM prefix
STARTUP: list[tuple[int | None, str, str]] = [
    (0, "INFO", "api_server.py:528] vLLM API server version 0.6.3.post1"),
    (0, "INFO", "api_server.py:529] " + ARGS),
    (8, "INFO", "llm_engine.py:238] " + ENGINE_CONFIG),
    (9, "INFO", "model_runner.py:1056] Starting to load model meta-llama/Llama-3.1-8B-Instruct..."),
    (9, "INFO", "weight_utils.py:243] Using model weights format ['*.safetensors']"),
    (None, "", "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]"),
    (None, "", "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:05,  1.82s/it]"),
    (None, "", "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.74s/it]"),
    (None, "", "Loading safetensors checkpoint shards:  75% Completed | 3/4 [00:05<00:01,  1.71s/it]"),
    (None, "", "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:05<00:00,  1.22s/it]"),
    (None, "", "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:05<00:00,  1.41s/it]"),
    (None, "", ""),
    (16, "INFO", "model_runner.py:1067] Loading model weights took 14.9888 GB"),
    (20, "INFO", "gpu_executor.py:122] # GPU blocks: 28426, # CPU blocks: 2048"),
    (20, "INFO", "gpu_executor.py:126] Maximum concurrency for 32768 tokens per request: 13.88x"),
    (22, "INFO", "model_runner.py:1395] Capturing the model for CUDA graphs. This may lead to unexpected "
     "consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use "
     "'--enforce-eager' in the CLI."),
    (22, "INFO", "model_runner.py:1399] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are "
     "running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode. You can also "
     "reduce the `max_num_seqs` as needed to decrease memory usage."),
    (35, "INFO", "model_runner.py:1523] Graph capturing finished in 13 secs."),
    (36, "INFO", "launcher.py:19] Available routes are:"),
    *((36, "INFO", f"launcher.py:27] Route: {route}, Methods: {methods}") for route, methods in [
        ("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/docs/oauth2-redirect", "HEAD, GET"),
        ("/redoc", "HEAD, GET"), ("/health", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
        ("/v1/models", "GET"), ("/version", "GET"), ("/v1/chat/completions", "POST"),
        ("/v1/completions", "POST"), ("/v1/embeddings", "POST")]),
    (None, "", "INFO:     Started server process [1]"),
    (None, "", "INFO:     Waiting for application startup."),
    (None, "", "INFO:     Application startup complete."),
    (None, "", "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)"),
]
STARTUP_S = 38  # the first request after the start-up


def startup_block(v0: V0) -> str:
    out = []
    for dt, level, text in STARTUP:
        if dt is None:
            out.append(text + "\n")
        else:
            where, msg = text.split("] ", 1)
            out.append(v0.record(level, stamp(START + timedelta(seconds=dt)), where, [msg]))
    return "".join(out)


# --- the traffic ----------------------------------------------------------------------

CLIENT_IPS = [f"10.42.{a}.{b}" for a, b in
              [(3, 114), (3, 27), (7, 19), (7, 88), (9, 201), (9, 14), (11, 6), (11, 73), (12, 40), (15, 9)]]
KUBELET_IP, PROMETHEUS_IPS = "10.42.0.1", ["10.42.5.31", "10.42.6.12"]
HAPROXY_IP, INGRESS_IP = "10.42.0.77", "10.42.1.5"


def _ports(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(32768, 60999) for _ in range(n)]


def access(ip: str, port: int | str, request: str, status: str = "200 OK") -> str:
    client = f"{ip}:{port}" if ip else ""
    return f'INFO:     {client} - "{request}" {status}\n'


def stats_line(v0: V0, st: str, prompt: float, gen: float, running: int, pending: int, kv: float) -> str:
    msg = (f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
           f"Running: {running} reqs, Swapped: 0 reqs, Pending: {pending} reqs, "
           f"GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%.")
    return v0.record("INFO", st, "metrics.py:351", [msg])


class Storm:
    """The preemption storm, one log second at a time (about 20 lines a second)."""

    def __init__(self, v0: V0, rng: random.Random) -> None:
        self.v0, self.rng = v0, rng
        self.posts = [access(rng.choice(CLIENT_IPS), p, "POST /v1/completions HTTP/1.1") for p in _ports(rng, 8192)]
        self.bad = [access(rng.choice(CLIENT_IPS), p, "POST /v1/completions HTTP/1.1", "400 Bad Request")
                    for p in _ports(rng, 64)]
        self.health = [access(KUBELET_IP, p, "GET /health HTTP/1.1") for p in _ports(rng, 256)]
        self.scrape = [access(ip, p, "GET /metrics HTTP/1.1") for ip in PROMETHEUS_IPS for p in _ports(rng, 128)]
        self.preemptions = 1   # total_num_cumulative_preemption of the next warning
        self.counts: Counter[str] = Counter()

    def preempt(self, st: str) -> str:
        msg = (f"Sequence group cmpl-{self.rng.getrandbits(128):032x}-0 is preempted by PreemptionMode.RECOMPUTE "
               "mode because there is not enough KV cache space. This can affect the end-to-end performance. "
               "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
               f"total_num_cumulative_preemption={self.preemptions}")
        self.preemptions += PREEMPT_LOG_EVERY
        return self.v0.record("WARNING", st, "scheduler.py:1560", [msg])

    def noise(self, st: str) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.55:
            fields = rng.choice(["{'user'}", "{'metadata'}", "{'store'}", "{'user', 'service_tier'}"])
            return self.v0.record("WARNING", st, "protocol.py:58",
                                  [f"The following fields were present in the request but ignored: {fields}"])
        if r < 0.90:
            return self.v0.record("WARNING", st, "scheduler.py:1147",
                                  [f"Input prompt ({rng.randint(32769, 60000)} tokens) is too long and "
                                   "exceeds limit of 32768"])
        return self.v0.uvicorn("WARNING", "Invalid HTTP request received.")

    def second(self, t: datetime, tick: int, ramp: float) -> str:
        """All lines of one log second; `ramp` in [0, 1] over the last ~80 s before the OOM."""
        rng, c = self.rng, self.counts
        st = stamp(t)
        lines = rng.choices(self.posts, k=rng.randint(14, 21))
        if rng.random() < 0.02:
            lines.append(rng.choice(self.bad))
        if tick % PROBE_EVERY_S == 0:
            lines += rng.sample(self.health, 2)
        if tick % SCRAPE_EVERY_S == 0:
            lines.append(rng.choice(self.scrape))
        c["access"] += len(lines)
        extra = []
        n_pre = (1 if rng.random() < 0.8 else 2 * (rng.random() < 0.5)) + (rng.random() < ramp)
        extra += [self.preempt(st) for _ in range(n_pre)]
        c["preemption"] += n_pre
        n_noise = 1 if rng.random() < 0.8 else 2 * (rng.random() < 0.5)
        extra += [self.noise(st) for _ in range(n_noise)]
        c["other"] += n_noise
        for line in extra:
            lines.insert(rng.randrange(len(lines) + 1), line)
        if tick % STATS_EVERY_S == 0:
            c["stats"] += 1
            if ramp > 0:
                line = stats_line(self.v0, st, rng.uniform(7000, 11500), rng.uniform(560, 640),
                                  rng.randint(28, 32), int(60 + 30 * ramp) + rng.randint(0, 3),
                                  99.2 + 0.5 * ramp + rng.uniform(-0.1, 0.1))
            else:
                line = stats_line(self.v0, st, rng.uniform(2000, 6000), rng.uniform(400, 900),
                                  rng.randint(20, 45), rng.randint(5, 60), min(99.9, rng.uniform(97.0, 100.5)))
            lines.insert(0, line)
        return "".join(lines)


class Probes:
    """Access lines of health checks and scrapes, 50 a second of log time, and rare traffic blips."""

    # (kind, weight per 10,000 lines)
    MIX = [("metrics", 6000), ("health", 3000), ("health10", 600), ("metrics10", 200),
           ("proxied", 150), ("unix", 50)]

    def __init__(self, v0: V0, rng: random.Random) -> None:
        self.v0, self.rng = v0, rng
        make = {
            "metrics": lambda p: access(rng.choice(PROMETHEUS_IPS), p, "GET /metrics HTTP/1.1"),
            "health": lambda p: access(KUBELET_IP, p, "GET /health HTTP/1.1"),
            "health10": lambda p: access(HAPROXY_IP, p, "GET /health HTTP/1.0"),   # HAProxy httpchk
            "metrics10": lambda p: access(rng.choice(PROMETHEUS_IPS), p, "GET /metrics HTTP/1.0"),
            "proxied": lambda p: access(INGRESS_IP, 0, rng.choice(["GET /health HTTP/1.1", "GET /metrics HTTP/1.1"])),
            "unix": lambda p: access("", 0, "GET /health HTTP/1.1"),
        }
        self.pool = [make[kind](p) for kind, weight in self.MIX for p in _ports(rng, weight)]
        self.posts = [access(rng.choice(CLIENT_IPS), p, "POST /v1/chat/completions HTTP/1.1") for p in _ports(rng, 256)]
        self.counts: Counter[str] = Counter()

    def nginx(self, t: datetime) -> str:
        path, agent, size = self.rng.choice([("/metrics", "Prometheus/2.53.1", 14502),
                                              ("/health", "kube-probe/1.29", 0)])
        return (f'{PROMETHEUS_IPS[0]} - - [{t.strftime("%d/%b/%Y:%H:%M:%S")} +0000] "GET {path} HTTP/1.1" '
                f'200 {size} "-" "{agent}"\n')

    def envoy(self, t: datetime) -> str:
        rid = f"{self.rng.getrandbits(128):032x}"
        rid = f"{rid[:8]}-{rid[8:12]}-{rid[12:16]}-{rid[16:20]}-{rid[20:]}"
        return (f'[{t.strftime("%Y-%m-%dT%H:%M:%S")}.{self.rng.randrange(1000):03d}Z] "GET /health HTTP/1.1" 200 - 0 0 '
                f'1 1 "{KUBELET_IP}" "kube-probe/1.29" "{rid}" "vllm:8000" "127.0.0.1:8000"\n')

    def second(self, t: datetime) -> str:
        rng = self.rng
        lines = rng.choices(self.pool, k=PROBES_PER_S)
        if rng.random() < 0.05:   # about one in 1,000 lines
            lines.insert(rng.randrange(len(lines)), self.nginx(t))
        if rng.random() < 0.05:
            lines.insert(rng.randrange(len(lines)), self.envoy(t))
        self.counts["access"] += len(lines)
        return "".join(lines)

    def traffic(self, t: datetime, seconds: int) -> tuple[str, datetime]:
        """A short burst of real requests: a few POSTs a second and a stats line every 5 s."""
        rng, out = self.rng, []
        for s in range(seconds):
            posts = rng.choices(self.posts, k=rng.randint(0, 3))
            self.counts["access"] += len(posts)
            out += posts
            if s % STATS_EVERY_S == STATS_EVERY_S - 1:
                self.counts["stats"] += 1
                running = rng.randint(1, 7)
                out.append(stats_line(self.v0, stamp(t), rng.choice([0.0, rng.uniform(200, 900)]),
                                      running * rng.uniform(30, 45), running, 0, running * rng.uniform(0.3, 0.7)))
            t += timedelta(seconds=1)
        return "".join(out), t


# --- the crash (storm): samples/burst-long-prompts-v0, lines 1050-1251 -----------------

SITE = gen_log.SITE
MODULE = "torch/nn/modules/module.py"
CALL = [(MODULE, 1553, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)", True),
        (MODULE, 1562, "_call_impl", "return forward_call(*args, **kwargs)", True)]
LLAMA = "vllm/model_executor/models/llama.py"
EXECUTE_FRAMES: list[Frame] = [
    ("vllm/worker/model_runner_base.py", 116, "_wrapper", "return func(*args, **kwargs)", True),
    ("vllm/worker/model_runner.py", 1698, "execute_model", "hidden_or_intermediate_states = model_executable(", True),
    *CALL,
    (LLAMA, 566, "forward", "model_output = self.model(input_ids, positions, kv_caches,", True),
    *CALL,
    (LLAMA, 352, "forward", "hidden_states, residual = layer(positions, hidden_states,", True),
    *CALL,
    (LLAMA, 269, "forward", "hidden_states = self.mlp(hidden_states)", True),
    *CALL,
    (LLAMA, 92, "forward", "gate_up, _ = self.gate_up_proj(x)", True),
    *CALL,
    ("vllm/model_executor/layers/linear.py", 367, "forward",
     "output_parallel = self.quant_method.apply(self, input_, bias)", True),
    ("vllm/model_executor/layers/linear.py", 135, "apply", "return F.linear(x, layer.weight, bias)", True),
]
ENGINE_PY = "vllm/engine/async_llm_engine.py"
LOOP_FRAMES: list[Frame] = [
    (ENGINE_PY, 54, "_log_task_completion", "return_value = task.result()", True),
    (ENGINE_PY, 851, "run_engine_loop", "result = task.result()", True),
    (ENGINE_PY, 774, "engine_step", "request_outputs = await self.engine.step_async(virtual_engine)", True),
    (ENGINE_PY, 346, "step_async", "outputs = await self.model_executor.execute_model_async(", True),
    ("vllm/executor/gpu_executor.py", 185, "execute_model_async",
     "output = await make_async(self.driver_worker.execute_model", True),
    ("/usr/lib/python3.12/concurrent/futures/thread.py", 58, "run", "result = self.fn(*self.args, **self.kwargs)", True),
    ("vllm/worker/worker_base.py", 327, "execute_model", "output = self.model_runner.execute_model(", True),
    ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)", True),
    ("vllm/worker/model_runner_base.py", 146, "_wrapper", "raise type(err)(", False),
]
DEAD_FRAMES: list[Frame] = [
    ("/usr/lib/python3.12/asyncio/events.py", 88, "_run", "self._context.run(self._callback, *self._args)", False),
    (ENGINE_PY, 66, "_log_task_completion", "raise AsyncEngineDeadError(", False),
]
OOM = ("CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of 79.35 GiB of which 1.21 GiB "
       "is free. Including non-PyTorch memory, this process has 78.14 GiB memory in use. Of the allocated memory "
       "76.83 GiB is allocated by PyTorch, with 931.84 MiB allocated in private pools (e.g., CUDA Graphs), and "
       "120.37 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
       "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
DEAD = ("vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly. This should never happen! "
        "Please open an issue on Github. See stack trace above for the actual cause.")
CAUSE = ["", "The above exception was the direct cause of the following exception:", ""]
CALLBACK = ("_log_task_completion(error_callback=<bound method...7f6a3c8e1d50>>)(<Task finishe...lloc-conf)')>) "
            f"at {SITE}/{ENGINE_PY}:44")


def crash_block(v0: V0, t: datetime, rng: random.Random) -> str:
    """The runtime OOM of the V0 engine and the API server going down after it."""
    st, st1 = stamp(t), stamp(t + timedelta(seconds=1))
    dump = f"/tmp/err_execute_model_input_{YEAR}{t.strftime('%m%d-%H%M%S')}.pkl"
    first = traceback_lines(EXECUTE_FRAMES, f"torch.OutOfMemoryError: {OOM}")
    second = traceback_lines(LOOP_FRAMES, f"torch.OutOfMemoryError: Error in model execution (input dumped to "
                                          f"{dump}): {OOM}")
    out = [
        v0.record("INFO", st, "model_runner_base.py:120", [f"Writing input of failed execution to {dump}..."]),
        v0.record("INFO", st, "model_runner_base.py:149", [f"Completed writing input of failed execution to {dump}."]),
        v0.record("ERROR", st, "async_llm_engine.py:64", ["Engine background task failed", *first, *CAUSE, *second]),
        f"Exception in callback {CALLBACK}\n",
        f"handle: <Handle {CALLBACK}>\n",
        "".join(line + "\n" for line in
                [*first, *CAUSE, *second, *CAUSE, *traceback_lines(DEAD_FRAMES, DEAD)]),
    ]
    fails = [access(rng.choice(CLIENT_IPS), rng.randint(32768, 60999), "POST /v1/completions HTTP/1.1",
                    "500 Internal Server Error") for _ in range(8)]
    out += fails[:6]
    out.append(v0.record("CRITICAL", st1, "launcher.py:88", ["AsyncLLMEngine has failed, terminating server process"]))
    out.append(fails[6])
    out.append(v0.record("CRITICAL", st1, "launcher.py:99", ["AsyncLLMEngine is already dead, terminating server process"]))
    out.append(fails[7])
    out += [v0.uvicorn("INFO", m) for m in ("Shutting down", "Waiting for application shutdown.",
                                              "Application shutdown complete.", "Finished server process [1]")]
    return "".join(out)


# --- driver ---------------------------------------------------------------------------


def storm_blocks(v0: V0, rng: random.Random, budget: int, counts: Counter[str]) -> Iterator[str]:
    storm = Storm(v0, rng)
    storm.counts = counts
    ramp_start = budget - min(budget, RAMP_BYTES)
    done, tick, t = 0, 0, START + timedelta(seconds=STARTUP_S)
    block: list[str] = []
    block_len = 0
    while done < budget:
        ramp = (done - ramp_start) / RAMP_BYTES if done >= ramp_start else 0.0
        text = storm.second(t, tick, min(1.0, ramp))
        block.append(text)
        block_len += len(text)
        done += len(text)   # ASCII: chars == bytes
        if block_len >= FLUSH_BYTES:
            yield "".join(block)
            block, block_len = [], 0
        tick += 1
        t += timedelta(seconds=1)
    block.append(crash_block(v0, t, rng))
    yield "".join(block)


ADD_REQUEST_FRAMES: list[Frame] = [
    (f"{SITE}/uvicorn/protocols/http/httptools_impl.py", 401, "run_asgi",
     "result = await app(  # type: ignore[func-returns-value]", False),
    ("vllm/entrypoints/openai/api_server.py", 315, "create_completion",
     "generator = await completion(raw_request).create_completion(request, raw_request)", False),
    (ENGINE_PY, 696, "add_request", "raise AsyncEngineDeadError(", False),
]
LOOP_ERRORED = "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already."
DEAD_REQUESTS_PER_S = 40
DEAD_LEAD_SHARE = 0.02        # dead: the share of the budget that is storm before the crash


def dead_blocks(v0: V0, rng: random.Random, budget: int, counts: Counter[str]) -> Iterator[str]:
    """A short storm and its crash, then the dead engine failing every request (see the docstring)."""
    lead = int(budget * DEAD_LEAD_SHARE)
    last = ""
    for text in storm_blocks(v0, rng, lead, counts):     # the last block holds the crash
        if last:
            yield last
        last = text
    end = last.find("CRITICAL")            # the termination lines close the log, after the errors
    head, tail = last[:end], last[end:]
    yield head
    failed = "".join(line + "\n" for line in
                     ["ERROR:    Exception in ASGI application", *traceback_lines(ADD_REQUEST_FRAMES, LOOP_ERRORED)])
    yield from _in_blocks(_dead_seconds(rng, failed, budget - lead - len(tail), counts), tail)


def _dead_seconds(rng: random.Random, failed: str, budget: int, counts: Counter[str]) -> Iterator[str]:
    """One second of log time a piece (uvicorn's lines carry no time)."""
    done = 0
    while done < budget:
        lines = []
        for i in range(DEAD_REQUESTS_PER_S):
            if i % PROBE_EVERY_S == 0:
                lines.append(access("10.42.0.1", rng.randint(32768, 60999), "GET /health HTTP/1.1"))
            lines.append(access(rng.choice(CLIENT_IPS), rng.randint(32768, 60999), "POST /v1/completions HTTP/1.1",
                                "500 Internal Server Error"))
            lines.append(failed)
        counts["dead request"] += DEAD_REQUESTS_PER_S
        text = "".join(lines)
        done += len(text)
        yield text


def _in_blocks(pieces: Iterator[str], last: str) -> Iterator[str]:
    """The pieces joined into blocks of about FLUSH_BYTES, `last` at the end."""
    block, size = [], 0
    for text in pieces:
        block.append(text)
        size += len(text)
        if size >= FLUSH_BYTES:
            yield "".join(block)
            block, size = [], 0
    block.append(last)
    yield "".join(block)


def probe_blocks(v0: V0, rng: random.Random, budget: int, counts: Counter[str]) -> Iterator[str]:
    probes = Probes(v0, rng)
    probes.counts = counts
    text, t = probes.traffic(START + timedelta(seconds=STARTUP_S), 120)
    block, block_len, done = [text], len(text), len(text)
    blip_every = max(1, budget // PROBE_BLIPS)
    next_blip = blip_every
    while done < budget:
        if done >= next_blip:
            text, t = probes.traffic(t, rng.randint(5, 15))
            next_blip += blip_every
        else:
            text = probes.second(t)
            t += timedelta(seconds=1)
        block.append(text)
        block_len += len(text)
        done += len(text)
        if block_len >= FLUSH_BYTES:
            yield "".join(block)
            block, block_len = [], 0
    text, t = probes.traffic(t, 5)   # ends on a stats line: the log's last time
    block.append(text)
    yield "".join(block)


def generate(out: Path, size: int, seed: int, shape: str = "storm", cr: bool = True) -> tuple[int, Counter[str]]:
    """Writes the log to `out` (via a .part file). Returns (bytes written, lines by kind)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}")
    rng = random.Random(f"{shape}-{seed}")
    v0 = V0(cr)
    head = startup_block(v0).encode()
    tail = len(crash_block(v0, START, random.Random(0)).encode()) if shape == "storm" else 0
    budget = max(0, size - len(head) - tail)
    counts: Counter[str] = Counter()
    blocks = {"storm": storm_blocks, "probes": probe_blocks, "dead": dead_blocks}[shape](v0, rng, budget, counts)
    tmp = out.with_name(out.name + ".part")
    written = 0
    with open(tmp, "wb", buffering=0) as f:
        for data in itertools.chain([head], (b.encode() for b in blocks)):
            f.write(data)
            written += len(data)
    os.replace(tmp, out)
    return written, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="file to write")
    ap.add_argument("--shape", choices=SHAPES, default="storm", help="storm (default), probes or dead")
    ap.add_argument("--size", type=parse_size, default=parse_size("100M"),
                    help="approximate size, e.g. 20M, 1G (binary units; default 100M)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--no-cr", dest="cr", action="store_false",
                    help="join multi-line records with LF only (vLLM writes CR LF)")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    n, counts = generate(args.out, args.size, args.seed, args.shape, args.cr)
    dt = time.perf_counter() - t0
    total = sum(counts.values())
    mix = ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in counts.most_common()) or "none"
    print(f"wrote {args.out} ({n:,} bytes) in {dt:.1f} s ({n / dt / 1e6:.0f} MB/s); "
          f"bulk lines {total:,}: {mix}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
