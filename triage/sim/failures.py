"""The log lines of a running engine's death (formats.md 2.2 crash dump, 2.7, 3.1).

Engine side: vLLM 0.11's input/scheduler dump, then `EngineCore encountered a fatal error.`
with the traceback through run_engine_core/run_busy_loop/step/execute_model ending in the
allocator's `torch.OutOfMemoryError`. API side: `AsyncLLM output_handler failed.` with the
EngineDeadError. The server then stays up answering /health 503 and requests 500 (vLLM with
VLLM_KEEP_ALIVE_ON_ENGINE_DEATH; without it the process exits, which leaves nothing to probe).
"""
from __future__ import annotations

from .engine import Failure
from .texts import ENGINE_DEAD, OUTPUT_HANDLER_FRAMES, VERSION, traceback_lines
from .vlog import Proc, VllmLog


def write_fatal_error(log: VllmLog, api: Proc, engine: Proc, failure: Failure, config: str) -> None:
    f = failure
    ids = list(f.request_ids[:3]) + (["..."] if len(f.request_ids) > 3 else [])
    requests, queries, hits = f.prefix_stats
    log.record(engine, "ERROR", "dump_input.py:69",
               f"Dumping input data for V1 LLM engine (v{VERSION}) with config: {config}, ")
    log.record(engine, "ERROR", "dump_input.py:76",
               f"Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], "
               f"scheduled_cached_reqs=CachedRequestData(req_ids={ids}, resumed_from_preemption=[], new_token_ids=[], "
               f"new_block_ids=[], num_computed_tokens=[]), num_scheduled_tokens={{...}}, "
               f"total_num_scheduled_tokens={f.scheduled_tokens}, scheduled_spec_decode_tokens={{}}, "
               "scheduled_encoder_inputs={}, num_common_prefix_blocks=[0], finished_req_ids=[], "
               "free_encoder_mm_hashes=[], structured_output_request_ids={}, grammar_bitmask=null, "
               "kv_connector_metadata=null)")
    log.record(engine, "ERROR", "dump_input.py:79",
               f"Dumping scheduler stats: SchedulerStats(num_running_reqs={f.running}, num_waiting_reqs={f.waiting}, "
               f"step_counter=0, current_wave=0, kv_cache_usage={f.kv_usage}, prefix_cache_stats=PrefixCacheStats("
               f"reset=False, requests={requests}, queries={queries}, hits={hits}), spec_decoding_stats=None, "
               "kv_connector_stats=None, num_corrupted_reqs=0)")
    tb = traceback_lines(f.frames, f.exception or f"torch.OutOfMemoryError: {f.oom}")
    log.record(engine, "ERROR", "core.py:710", "EngineCore encountered a fatal error.\n" + "\n".join(tb))
    dead = traceback_lines(OUTPUT_HANDLER_FRAMES, f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD}")
    log.record(api, "ERROR", "async_llm.py:480", "AsyncLLM output_handler failed.\n" + "\n".join(dead))


def write_engine_died(log: VllmLog, api: Proc, name: str) -> None:
    """The engine process vanished (killed from outside): 0.11's process monitor."""
    log.record(api, "ERROR", "core_client.py:565", f"Engine core proc {name} died unexpectedly, shutting down client.")


def write_shutdown(log: VllmLog, api: Proc) -> None:
    log.uvicorn(api, "Shutting down")
    log.uvicorn(api, "Waiting for application shutdown.")
    log.uvicorn(api, "Application shutdown complete.")
    log.uvicorn(api, f"Finished server process [{api.pid}]")
