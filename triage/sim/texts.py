"""The long texts vLLM 0.11 writes: the engine config line, start-up lines, and the tracebacks.

Frames are copied from real 0.11 logs (the module paths, line numbers and source lines a
classifier reads to tell start-up from serving), kept as data so each failure is one list.
"""
from __future__ import annotations

from typing import Sequence

VERSION = "0.11.0"
_PKG = "/usr/local/lib/python3.12/dist-packages"
_VLLM = f"{_PKG}/vllm"
_TORCH = f"{_PKG}/torch"

Frame = tuple[str, int, str, str]     # file, line, function, source line

ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def config_line(model: str, max_seq_len: int, enforce_eager: bool, prefix_caching: bool) -> str:
    """The `Initializing a V1 LLM engine ... with config:` payload (VllmConfig.__str__ in 0.11)."""
    return (f"model='{model}', speculative_config=None, tokenizer='{model}', skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
            f"dtype=torch.bfloat16, max_seq_len={max_seq_len}, download_dir=None, load_format=auto, "
            "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, "
            f"quantization=None, enforce_eager={enforce_eager}, kv_cache_dtype=auto, device_config=cuda, "
            "structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_fallback=False, "
            "disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser=''), "
            "observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, "
            f"collect_detailed_traces=None), seed=0, served_model_name={model}, enable_prefix_caching={prefix_caching}, "
            "chunked_prefill_enabled=True, pooler_config=None, compilation_config={\"level\":"
            f"{0 if enforce_eager else 3},\"debug_dump_path\":\"\",\"cache_dir\":\"\",\"backend\":\"\",\"custom_ops\":[],"
            "\"use_inductor\":true,\"cudagraph_mode\":" + ("0" if enforce_eager else "[2,1]") +
            ",\"use_cudagraph\":" + ("false" if enforce_eager else "true") + ",\"max_capture_size\":512}")


def traceback_lines(frames: Sequence[Frame], exc: str) -> list[str]:
    """`Traceback (most recent call last):` ... `ExcType: message`, one string per line."""
    out = ["Traceback (most recent call last):"]
    for path, line, func, src in frames:
        out.append(f'  File "{path}", line {line}, in {func}')
        if src:
            out.append(f"    {src}")
    out.append(exc)
    return out


# --- start-up failures (EngineCore failed to start) ---------------------------------------------

_ENGINE_INIT: list[Frame] = [
    (f"{_VLLM}/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    (f"{_VLLM}/v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
]
FREE_MEMORY_FRAMES: list[Frame] = _ENGINE_INIT + [
    (f"{_VLLM}/v1/engine/core.py", 83, "__init__", "self.model_executor = executor_class(vllm_config)"),
    (f"{_VLLM}/executor/executor_base.py", 54, "__init__", "self._init_executor()"),
    (f"{_VLLM}/executor/uniproc_executor.py", 54, "_init_executor", 'self.collective_rpc("init_device")'),
    (f"{_VLLM}/executor/uniproc_executor.py", 83, "collective_rpc",
     "return [run_method(self.driver_worker, method, args, kwargs)]"),
    (f"{_VLLM}/utils/__init__.py", 3122, "run_method", "return func(*args, **kwargs)"),
    (f"{_VLLM}/worker/worker_base.py", 259, "init_device", "self.worker.init_device()  # type: ignore"),
    (f"{_VLLM}/v1/worker/gpu_worker.py", 187, "init_device", "raise ValueError("),
]
KV_CHECK_FRAMES: list[Frame] = _ENGINE_INIT + [
    (f"{_VLLM}/v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
    (f"{_VLLM}/v1/engine/core.py", 199, "_initialize_kv_caches",
     "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,"),
    (f"{_VLLM}/v1/core/kv_cache_utils.py", 1243, "get_kv_cache_configs",
     "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,"),
    (f"{_VLLM}/v1/core/kv_cache_utils.py", 717, "check_enough_kv_cache_memory", "raise ValueError("),
]
NO_BLOCKS_FRAMES: list[Frame] = KV_CHECK_FRAMES[:-1] + [
    (f"{_VLLM}/v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory", "raise ValueError("),
]


def process_exit_lines(frames: Sequence[Frame], exc: str) -> list[str]:
    """multiprocessing's own report when the engine process's target raises."""
    head: list[Frame] = [
        ("/usr/lib/python3.12/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
        ("/usr/lib/python3.12/multiprocessing/process.py", 108, "run", "self._target(*self._args, **self._kwargs)"),
        (f"{_VLLM}/v1/engine/core.py", 712, "run_engine_core", "raise e"),
    ]
    return ["Process EngineCore_DP0:"] + traceback_lines(head + list(frames), exc)


API_STARTUP_FRAMES: list[Frame] = [
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    (f"{_VLLM}/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)"),
    (f"{_VLLM}/entrypoints/cli/serve.py", 57, "cmd", "uvloop.run(run_server(args))"),
    (f"{_VLLM}/entrypoints/openai/api_server.py", 1884, "run_server",
     "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"),
    (f"{_VLLM}/entrypoints/openai/api_server.py", 1902, "run_server_worker", "async with build_async_engine_client("),
    (f"{_VLLM}/entrypoints/openai/api_server.py", 225, "build_async_engine_client_from_engine_args",
     "async_llm = AsyncLLM.from_vllm_config("),
    (f"{_VLLM}/v1/engine/async_llm.py", 134, "__init__", "self.engine_core = EngineCoreClient.make_async_mp_client("),
    (f"{_VLLM}/v1/engine/core_client.py", 448, "__init__", "with launch_core_engines(vllm_config, executor_class,"),
    (f"{_VLLM}/v1/engine/utils.py", 732, "launch_core_engines", "wait_for_engine_startup("),
    (f"{_VLLM}/v1/engine/utils.py", 785, "wait_for_engine_startup",
     'raise RuntimeError("Engine core initialization failed. "'),
]


def startup_failed_exc(codes: dict[str, int]) -> str:
    return f"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {codes}"


# --- runtime failures (EngineCore encountered a fatal error) -------------------------------------

_BUSY_LOOP: list[Frame] = [
    (f"{_VLLM}/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
    (f"{_VLLM}/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
    (f"{_VLLM}/v1/engine/core.py", 754, "_process_engine_step", "outputs, model_executed = self.step_fn()"),
    (f"{_VLLM}/v1/engine/core.py", 284, "step", "model_output = self.execute_model_with_error_logging("),
    (f"{_VLLM}/v1/engine/core.py", 270, "execute_model_with_error_logging", "raise err"),
    (f"{_VLLM}/v1/engine/core.py", 261, "execute_model_with_error_logging", "return model_fn(scheduler_output)"),
    (f"{_VLLM}/v1/executor/abstract.py", 103, "execute_model", 'output = self.collective_rpc("execute_model",'),
    (f"{_VLLM}/executor/uniproc_executor.py", 83, "collective_rpc",
     "return [run_method(self.driver_worker, method, args, kwargs)]"),
    (f"{_VLLM}/utils/__init__.py", 3122, "run_method", "return func(*args, **kwargs)"),
    (f"{_TORCH}/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
    (f"{_VLLM}/v1/worker/gpu_worker.py", 447, "execute_model",
     "output = self.model_runner.execute_model(scheduler_output,"),
    (f"{_TORCH}/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
]
_MODULE_CALL: list[Frame] = [
    (f"{_TORCH}/nn/modules/module.py", 1773, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
    (f"{_TORCH}/nn/modules/module.py", 1784, "_call_impl", "return forward_call(*args, **kwargs)"),
]
_FORWARD: list[Frame] = [
    (f"{_VLLM}/v1/worker/gpu_model_runner.py", 2064, "execute_model", "model_output = self.model("),
    *_MODULE_CALL,
    (f"{_VLLM}/model_executor/models/llama.py", 592, "forward",
     "model_output = self.model(input_ids, positions, intermediate_tensors,"),
    (f"{_VLLM}/compilation/decorators.py", 310, "__call__", "output = self.compiled_callable(*args, **kwargs)"),
]
# A long prefill: the MLP's gate_up projection of every prompt token at once.
BURST_FRAMES: list[Frame] = _BUSY_LOOP + _FORWARD + [
    (f"{_VLLM}/model_executor/models/llama.py", 405, "forward",
     "hidden_states, residual = layer(positions, hidden_states, residual)"),
    *_MODULE_CALL,
    (f"{_VLLM}/model_executor/models/llama.py", 318, "forward", "hidden_states = self.mlp(hidden_states)"),
    *_MODULE_CALL,
    (f"{_VLLM}/model_executor/models/llama.py", 96, "forward", "gate_up, _ = self.gate_up_proj(x)"),
    *_MODULE_CALL,
    (f"{_VLLM}/model_executor/layers/linear.py", 565, "forward",
     "output_parallel = self.quant_method.apply(self, input_, bias)"),
    (f"{_VLLM}/model_executor/layers/linear.py", 245, "apply",
     "return dispatch_unquantized_gemm()(layer, x, layer.weight, bias)"),
    (f"{_VLLM}/model_executor/layers/utils.py", 102, "default_unquantized_gemm",
     "return torch.nn.functional.linear(x, weight, bias)"),
]
# After long running: a compiled graph asks the allocator for a fresh intermediate buffer.
CHRONIC_FRAMES: list[Frame] = _BUSY_LOOP + _FORWARD + [
    (f"{_TORCH}/_dynamo/eval_frame.py", 736, "compile_wrapper", "return fn(*args, **kwargs)"),
    (f"{_VLLM}/compilation/piecewise_backend.py", 82, "__call__", "return self.compiled_graph_for_general_shape(*args)"),
    (f"{_TORCH}/_inductor/output_code.py", 584, "__call__", "return self.current_callable(inputs)"),
    ("/root/.cache/vllm/torch_compile_cache/5d2b7b6e8c/rank_0_0/inductor_cache/r4/"
     "cr4xq6yq3bvd5ucnzzpqamhhq3orlvxxsaeuj5xk7mwxxvcevg53.py", 641, "call",
     "buf5 = empty_strided_cuda((s0, 28672), (28672, 1), torch.bfloat16)"),
]
# A crowded decode step: the sampler sorts the logits of every running sequence for top-k/top-p
# (vllm/v1/sample/ops/topk_topp_sampler.py, v0.11.0).
SAMPLER_FRAMES: list[Frame] = _BUSY_LOOP + [
    (f"{_VLLM}/v1/worker/gpu_model_runner.py", 2140, "execute_model", "sampler_output = self.sampler("),
    *_MODULE_CALL,
    (f"{_VLLM}/v1/sample/sampler.py", 93, "forward",
     "sampled, processed_logprobs = self.sample(logits, sampling_metadata)"),
    (f"{_VLLM}/v1/sample/sampler.py", 160, "sample", "random_sampled, processed_logprobs = self.topk_topp_sampler("),
    *_MODULE_CALL,
    (f"{_VLLM}/v1/sample/ops/topk_topp_sampler.py", 104, "forward_native",
     "logits = self.apply_top_k_top_p(logits, k, p)"),
    (f"{_VLLM}/v1/sample/ops/topk_topp_sampler.py", 180, "apply_top_k_top_p",
     "logits_sort, logits_idx = logits.sort(dim=-1, descending=False)"),
]
# A prefix-cache bug: cached blocks whose references were never released are counted as
# evictable when the scheduler admits a request, and the block pool cannot hand them out
# (vllm/v1/core, v0.11.0: the scheduler's allocate_slots down to BlockPool.get_new_blocks).
PREFIX_CACHE_FRAMES: list[Frame] = _BUSY_LOOP[:3] + [
    (f"{_VLLM}/v1/engine/core.py", 279, "step", "scheduler_output = self.scheduler.schedule()"),
    (f"{_VLLM}/v1/core/sched/scheduler.py", 255, "schedule", "new_blocks = self.kv_cache_manager.allocate_slots("),
    (f"{_VLLM}/v1/core/kv_cache_manager.py", 288, "allocate_slots", "new_blocks = self.coordinator.allocate_new_blocks("),
    (f"{_VLLM}/v1/core/kv_cache_coordinator.py", 113, "allocate_new_blocks", "manager.allocate_new_blocks("),
    (f"{_VLLM}/v1/core/single_type_kv_cache_manager.py", 129, "allocate_new_blocks",
     "new_blocks = self.block_pool.get_new_blocks(num_new_blocks)"),
    (f"{_VLLM}/v1/core/block_pool.py", 269, "get_new_blocks", "raise ValueError("),
]

OUTPUT_HANDLER_FRAMES: list[Frame] = [
    (f"{_VLLM}/v1/engine/async_llm.py", 439, "output_handler", "outputs = await engine_core.get_output_async()"),
    (f"{_VLLM}/v1/engine/core_client.py", 846, "get_output_async", "raise self._format_exception(outputs) from None"),
]

ROUTES = [("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/health", "GET"), ("/load", "GET"),
          ("/ping", "POST"), ("/ping", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
          ("/v1/models", "GET"), ("/version", "GET"), ("/v1/chat/completions", "POST"),
          ("/v1/completions", "POST"), ("/metrics", "GET")]
