"""The closed vocabulary of evidence kinds. Parsers emit these; flowchart modules read them."""
from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    # --- what the server is and how it was launched -------------------------------------
    ENGINE_VERSION = "engine_version"          # engine, version, engine_mode (v0/v1)
    LAUNCH_CONFIG = "launch_config"            # args: dict of engine settings, argv when known
    # --- lifecycle: start-up -----------------------------------------------------------
    STARTUP_BEGIN = "startup_begin"            # a new server/engine start (resets the phase)
    WEIGHTS_LOADED = "weights_loaded"          # weights_bytes
    MEMORY_PROFILE = "memory_profile"          # total/util/weights/activation/non_torch/kv bytes
    KV_CAPACITY = "kv_capacity"                # kv_tokens (and blocks, block_size)
    MAX_CONCURRENCY = "max_concurrency"        # tokens_per_request, concurrency
    AVAILABLE_KV_MEMORY = "available_kv_memory"
    GRAPH_CAPTURE = "graph_capture"            # seconds, graph_bytes
    STARTUP_STEP = "startup_step"              # profiling, compiling, capturing graphs: still starting
    STARTUP_COMPLETE = "startup_complete"      # engine initialised / API server listening
    # --- lifecycle: serving --------------------------------------------------------------
    REQUEST_SERVED = "request_served"          # an access-log line (method, path, status)
    STATS = "stats"                            # periodic stats line: running/waiting/kv_usage/...
    PREEMPTION = "preemption"                  # a preemption warning (cumulative count)
    SLEEP_MEMORY = "sleep_memory"              # sleep mode: freed / still-in-use bytes
    # --- GPU memory failures -------------------------------------------------------------
    TORCH_OOM = "torch_oom"                    # the caching allocator's message, with numbers
    CUDA_OOM = "cuda_oom"                      # a raw CUDA/driver out-of-memory (no breakdown)
    KV_CACHE_INSUFFICIENT = "kv_cache_insufficient"  # max_model_len does not fit the KV cache
    NO_CACHE_BLOCKS = "no_cache_blocks"
    FREE_MEMORY_LOW = "free_memory_low"        # free memory at start-up below the budget
    WARMUP_OOM = "warmup_oom"                  # OOM in a start-up warm-up (sampler, TGI prefill)
    LOAD_MODEL_OOM = "load_model_oom"
    PROFILING_ERROR = "profiling_error"        # vLLM's profile sanity check: free memory did not fall (not exhaustion)
    KV_POOL_OOM = "kv_pool_oom"                # SGLang/TGI: token pool exhausted for a batch
    POOL_LEAK = "pool_leak"                    # an engine's own KV-pool leak check failed (SGLang): chronic
    # --- engine failure wrappers ---------------------------------------------------------
    ENGINE_START_FAILED = "engine_start_failed"
    ENGINE_DEAD = "engine_dead"
    PROCESS_DIED = "process_died"              # a server process died without saying why (sigquit, "Killed")
    REQUEST_FAILED = "request_failed"          # a request failed mid-generation (the server was serving)
    STEP_FAILED = "step_failed"                # a model step for scheduled requests failed (the serving loop)
    TRACEBACK = "traceback"                    # frames + the exception that ended them
    EXCEPTION = "exception"                    # an exception line not covered by a kind above
    # --- not a GPU OOM -------------------------------------------------------------------
    HOST_OOM_KILL = "host_oom_kill"            # kernel / cgroup OOM killer
    OOM_KILLED = "oom_killed"                  # Kubernetes OOMKilled / exit 137
    CHILD_KILLED = "child_killed"              # a worker/engine child died by SIGKILL (-9)
    WORKER_VANISHED = "worker_vanished"        # a worker that handles its own exceptions died: killed or crashed
    XID = "xid"
    ILLEGAL_MEMORY_ACCESS = "illegal_memory_access"
    ECC_ERROR = "ecc_error"
    GPU_LOST = "gpu_lost"
    NCCL_ERROR = "nccl_error"
    CUDA_ERROR = "cuda_error"                  # another CUDA/cuBLAS failure (not OOM)
    HOST_MEMORY_GROWTH = "host_memory_growth"  # process RSS / anonymous memory growing
    HOST_MEMORY_EXHAUSTED = "host_memory_exhausted"  # a host (CPU) allocation failed: ENOMEM, bad_alloc
    PROCESS_CRASH = "process_crash"            # segfault, stack overflow, abort by signal
    SETUP_ERROR = "setup_error"                # broken install or environment: import, driver, device, tokenizer
    SOFTWARE_FAULT = "software_fault"          # a panic, a hung process a watchdog or health check gave up on
    ERROR_NOT_MEMORY = "error_not_memory"      # an error stated in full whose words name no memory, capacity or limit
    FAILURE_SILENT_ON_MEMORY = "failure_silent_on_memory"  # derived: a failure no failure line of which speaks of memory
    FAILURE_IN_HOST_CODE = "failure_in_host_code"  # derived: failures raised or logged by host-only code
    TERMINATED = "terminated"                  # a process ended by SIGTERM: stopped from outside, not for memory
    CONTEXT_FULL = "context_full"              # llama.cpp's context has no free KV cell for a batch even at size 1
    RUNNER_STOPPED = "runner_stopped"          # a supervisor stopped its own runner on purpose (unload, idle expiry)
    # --- readings ------------------------------------------------------------------------
    GPU_MEMORY = "gpu_memory"                  # per-GPU used/total (nvidia-smi, NVML, DCGM)
    GPU_PROCESS = "gpu_process"                # a process holding GPU memory
    SERVER_PROCESS = "server_process"          # a server process named in a log prefix (role, pid)
    METRIC = "metric"                          # a /metrics sample: name (concept), value, labels
    MEMORY_STATS = "memory_stats"              # torch.cuda.memory_stats / memory_summary numbers
    POD_STATUS = "pod_status"                  # Kubernetes container state
    ALERT = "alert"                            # an Alertmanager alert


#: Kinds that prove a GPU memory exhaustion happened.
GPU_OOM_KINDS = frozenset({
    Kind.TORCH_OOM, Kind.CUDA_OOM, Kind.KV_CACHE_INSUFFICIENT, Kind.NO_CACHE_BLOCKS,
    Kind.FREE_MEMORY_LOW, Kind.WARMUP_OOM, Kind.LOAD_MODEL_OOM, Kind.KV_POOL_OOM, Kind.POOL_LEAK,
})

#: vLLM's own start-up memory checks: each one is a start-up failure by construction.
STARTUP_CHECK_KINDS = frozenset({
    Kind.KV_CACHE_INSUFFICIENT, Kind.NO_CACHE_BLOCKS, Kind.FREE_MEMORY_LOW,
    Kind.WARMUP_OOM, Kind.LOAD_MODEL_OOM,
})

#: Failures that look like an OOM in a dashboard but are not GPU memory exhaustion.
NOT_GPU_KINDS = frozenset({
    Kind.HOST_OOM_KILL, Kind.OOM_KILLED, Kind.CHILD_KILLED, Kind.WORKER_VANISHED, Kind.XID, Kind.ILLEGAL_MEMORY_ACCESS,
    Kind.ECC_ERROR, Kind.GPU_LOST, Kind.NCCL_ERROR, Kind.CUDA_ERROR, Kind.HOST_MEMORY_GROWTH,
    Kind.HOST_MEMORY_EXHAUSTED, Kind.PROCESS_CRASH, Kind.SETUP_ERROR, Kind.SOFTWARE_FAULT, Kind.ERROR_NOT_MEMORY, Kind.CONTEXT_FULL,
    Kind.PROFILING_ERROR, Kind.TERMINATED,
})

#: Lines that show a server doing normal work (used to tell "no failure" from "no evidence").
#: A preemption is one of them: the scheduler making room in a KV cache sized at start-up is
#: back-pressure it handles, not a failure (a full KV cache is not an OOM).
HEALTHY_KINDS = frozenset({
    Kind.WEIGHTS_LOADED, Kind.MEMORY_PROFILE, Kind.KV_CAPACITY, Kind.MAX_CONCURRENCY,
    Kind.AVAILABLE_KV_MEMORY, Kind.GRAPH_CAPTURE, Kind.STARTUP_STEP, Kind.STARTUP_COMPLETE, Kind.REQUEST_SERVED,
    Kind.STATS, Kind.ENGINE_VERSION, Kind.LAUNCH_CONFIG, Kind.STARTUP_BEGIN, Kind.PREEMPTION, Kind.RUNNER_STOPPED,
})

#: Healthy records that show requests being served (not only a server starting or up).
SERVING_KINDS = frozenset({Kind.REQUEST_SERVED, Kind.STATS, Kind.PREEMPTION})
