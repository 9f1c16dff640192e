"""The start-up lines of a vLLM 0.11 server, and the start-up failure when the flags do not fit.

The order and wording follow a real 0.11 log: the front end's version and `non-default args`,
the engine's config line, the free-memory check (before weights load), weights, the KV-cache
sizing and its check, then the API server's routes and uvicorn's start-up lines.
"""
from __future__ import annotations

from .args import SimArgs, non_default_args
from .memory import GiB, Sizing, startup_error
from .texts import (API_STARTUP_FRAMES, FREE_MEMORY_FRAMES, KV_CHECK_FRAMES, NO_BLOCKS_FRAMES, ROUTES, VERSION,
                    config_line, process_exit_lines, startup_failed_exc, traceback_lines)
from .vlog import Proc, VllmLog

_CHECK_FRAMES = {"free_memory": FREE_MEMORY_FRAMES, "no_blocks": NO_BLOCKS_FRAMES, "max_seq_len": KV_CHECK_FRAMES}


def engine_config(args: SimArgs) -> str:
    return config_line(args.model, args.model_len, args.enforce_eager, args.prefix_caching)


def write_frontend(log: VllmLog, api: Proc, args: SimArgs) -> None:
    log.record(None, "INFO", "__init__.py:216", "Automatically detected platform cuda.")
    log.record(api, "INFO", "api_server.py:1839", f"vLLM API server version {VERSION}")
    log.record(api, "INFO", "utils.py:233", f"non-default args: {non_default_args(args)!r}")
    log.record(api, "INFO", "model.py:547", "Resolved architecture: LlamaForCausalLM")
    log.record(api, "INFO", "model.py:1510", f"Using max model len {args.model_len}")
    log.record(api, "INFO", "scheduler.py:205",
               f"Chunked prefill is enabled with max_num_batched_tokens={args.batched_tokens}.")


def start_engine(log: VllmLog, engine: Proc, args: SimArgs, sizing: Sizing) -> tuple[str, str] | None:
    """Writes the engine's start-up lines; returns (check, message) of the check that failed."""
    error = startup_error(sizing)
    log.record(None, "INFO", "__init__.py:216", "Automatically detected platform cuda.")
    log.record(engine, "INFO", "core.py:654", "Waiting for init message from front-end.")
    log.record(engine, "INFO", "core.py:77",
               f"Initializing a V1 LLM engine (v{VERSION}) with config: {engine_config(args)}")
    if error and error[0] == "free_memory":
        return error          # init_device checks free memory before anything is loaded
    log.record(engine, "INFO", "parallel_state.py:1208",
               "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0")
    log.record(engine, "INFO", "gpu_model_runner.py:2602", f"Starting to load model {args.model}...")
    log.record(engine, "INFO", "gpu_model_runner.py:2653",
               f"Model loading took {sizing.weights / GiB:.4f} GiB and {2.0 + sizing.weights / GiB / 4:.6f} seconds")
    log.record(engine, "INFO", "gpu_worker.py:298", f"Available KV cache memory: {sizing.kv_bytes / GiB:.2f} GiB")
    if error:
        return error
    log.record(engine, "INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {sizing.kv_tokens:,} tokens")
    log.record(engine, "INFO", "kv_cache_utils.py:1091",
               f"Maximum concurrency for {args.model_len:,} tokens per request: {sizing.max_concurrency:.2f}x")
    if not args.enforce_eager:
        log.record(engine, "INFO", "gpu_model_runner.py:3480", "Graph capturing finished in 2 secs, took 0.61 GiB")
    log.record(engine, "INFO", "core.py:210", "init engine (profile, create kv cache, warmup model) took 4.87 seconds")
    return None


def write_startup_failure(log: VllmLog, api: Proc, engine: Proc, check: str, message: str,
                          exit_codes: dict[str, int]) -> None:
    frames = _CHECK_FRAMES[check]
    exc = f"ValueError: {message}"
    log.record(engine, "ERROR", "core.py:708", "EngineCore failed to start.\n" + "\n".join(traceback_lines(frames, exc)))
    log.raw(engine, process_exit_lines(frames, exc))
    # The front end's own uncaught exception: printed by the interpreter, so no level prefix.
    log.raw(api, traceback_lines(API_STARTUP_FRAMES, startup_failed_exc(exit_codes)))


def write_serving(log: VllmLog, api: Proc, host: str, port: int, num_gpu_blocks: int) -> str:
    """The lines from the end of start-up to uvicorn's `Application startup complete.`; the URL."""
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    log.record(api, "INFO", "loggers.py:142",
               f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: {num_gpu_blocks}")
    log.record(api, "INFO", "api_server.py:1634", "Supported_tasks: ['generate']")
    log.record(api, "INFO", "api_server.py:1912", f"Starting vLLM API server 0 on {url}")
    log.record(api, "INFO", "launcher.py:34", "Available routes are:")
    for route, methods in ROUTES:
        log.record(api, "INFO", "launcher.py:42", f"Route: {route}, Methods: {methods}")
    log.uvicorn(api, f"Started server process [{api.pid}]")
    log.uvicorn(api, "Waiting for application startup.")
    log.uvicorn(api, "Application startup complete.")
    return url
