"""The log parser on real-shaped lines: every prefix format, years, tracebacks, OOM wordings."""
from __future__ import annotations

import gzip
from datetime import datetime, timezone

import pytest

from triage.evidence import logs
from triage.evidence.base import InputFile, ParseContext
from triage.evidence.logline import parse_line
from triage.evidence.torch_oom import parse_torch_oom
from triage.timeref import TimeReference

REF = TimeReference(datetime(2026, 3, 20, tzinfo=timezone.utc), "test")
GiB, MiB = 1 << 30, 1 << 20


def parse_text(text: str, name: str = "server.log", ref: TimeReference = REF, processes: bool = False):
    """The records of `text`; the first-sighting server_process records only when asked for."""
    src = InputFile(display=name, path=None, data=text.encode())
    return [e for e in logs.parse(src, ParseContext(times=ref)) if processes or e.kind != "server_process"]


@pytest.mark.parametrize("raw, level, file, process, message", [
    ("INFO 10-17 12:00:05 metrics.py:349] Avg prompt throughput: 1.0 tokens/s", "INFO", "metrics.py", None,
     "Avg prompt throughput: 1.0 tokens/s"),
    ("ERROR 03-12 14:17:03 [core.py:343] EngineCore failed to start.", "ERROR", "core.py", None,
     "EngineCore failed to start."),
    ("\x1b[1;36m(EngineCore_DP0 pid=412)\x1b[0;0m ERROR 03-12 14:17:03 [core.py:710] boom", "ERROR", "core.py",
     "EngineCore_DP0", "boom"),
    ("(VllmWorker rank=3 pid=10672) ERROR 03-16 06:12:38 [multiproc_executor.py:375] x", "ERROR",
     "multiproc_executor.py", "VllmWorker", "x"),
    ("(APIServer pid=1) INFO 11-20 12:00:10 [loggers.py:335] Engine 000: y", "INFO", "loggers.py", "APIServer",
     "Engine 000: y"),
    ("2026-03-12T14:17:03.123456789Z stdout F INFO 03-12 14:17:03 [core.py:1] z", "INFO", "core.py", None, "z"),
    ("vllm-1  | WARNING 03-12 14:17:03 [scheduler.py:1] w", "WARNING", "scheduler.py", None, "w"),
    ("INFO 2025-11-19T20:16:36.096501749Z [resource.labels.containerName: vllm] (EngineCore_DP0 pid=270) "
     "ERROR 11-19 12:16:36 [v1/engine/core.py:842] e", "ERROR", "v1/engine/core.py", "EngineCore_DP0", "e"),
    ("    | [2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302] ci", "ERROR", "core.py", None, "ci"),
    ("> ^[[0;36m(EngineCore_DP0 pid=738)^[[0;0m ^[[31mERROR^[[0m ^[[90m01-26 09:25:37^[[0m ^[[90m[core.py:935]^[[0m v",
     "ERROR", "core.py", "EngineCore_DP0", "v"),
    # Python logging's "asctime - name - LEVEL - [file:line - ]msg" as lmdeploy writes it, and with the
    # file and line for any logger; another program's bare "name - LEVEL - msg" keeps its words
    ("2025-08-04 10:20:15,118 - lmdeploy - INFO - base.py:177 - Building Model.", "INFO", "base.py", None,
     "Building Model."),
    ("2024-06-03 11:10:02,331 - lmdeploy - ERROR - TP process Rank[1] failed.", "ERROR", None, None,
     "TP process Rank[1] failed."),
    ("2025-08-04 11:00:05,441 - app.worker - ERROR - worker.py:12 - boom", "ERROR", "worker.py", None, "boom"),
    ("2025-08-04 11:00:05,441 - redis_client - INFO - Connected", "INFO", None, None,
     "redis_client - INFO - Connected"),
])
def test_prefixes_are_peeled(raw, level, file, process, message):
    line = parse_line(raw, REF)
    assert (line.level, line.file, line.process, line.message) == (level, file, process, message)


def test_outer_iso_time_wins_and_yearless_time_uses_reference():
    cri = parse_line("2026-03-12T14:17:03Z stdout F INFO 03-12 06:17:03 [core.py:1] z", REF)
    assert cri.time == datetime(2026, 3, 12, 14, 17, 3, tzinfo=timezone.utc)
    plain = parse_line("INFO 03-12 06:17:03 [core.py:1] z", REF)
    assert plain.time == datetime(2026, 3, 12, 6, 17, 3, tzinfo=timezone.utc)


def test_december_log_read_in_january_is_last_year():
    ref = TimeReference(datetime(2026, 1, 2, tzinfo=timezone.utc), "test")
    assert parse_line("INFO 12-31 23:59:59 [core.py:1] z", ref).time.year == 2025
    assert parse_line("INFO 01-01 00:00:01 [core.py:1] z", ref).time.year == 2026


def test_sglang_tgi_kernel_prefixes():
    assert parse_line("[2026-03-12 14:17:03 TP0] Prefill batch. #new-seq: 1", REF).origin == "sglang"
    assert parse_line("2024-02-21T10:28:11.366563Z ERROR text_generation_launcher: Shard 0 failed to start", REF).origin == "tgi"
    k = parse_line("[Thu Aug 27 00:39:44 2026] Out of memory: Killed process 1 (x)", REF)
    assert k.origin == "kernel" and k.time == datetime(2026, 8, 27, 0, 39, 44, tzinfo=timezone.utc)


@pytest.mark.parametrize("text, tried, capacity, unalloc", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
     "of which 1.06 GiB is free. Process 123 has 78.10 GiB memory in use. Of the allocated memory 75.20 GiB is "
     "allocated by PyTorch, with 46.00 MiB allocated in private pools (e.g., CUDA Graphs), and 1.10 GiB is reserved "
     "by PyTorch but unallocated.", 2 * GiB, 79.19, 1.10),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 1 has a total capacty of "
     "79.10 GiB of which 364.31 MiB is free. Of the allocated memory 72.12 GiB is allocated by PyTorch, and 3.78 GiB "
     "is reserved by PyTorch but unallocated.", 448 * MiB, 79.10, 3.78),
    ("RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB "
     "already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)", 36 * MiB, 7.93, (188 - 130.35) / 1024),
])
def test_torch_oom_wordings(text, tried, capacity, unalloc):
    f = parse_torch_oom(text)
    assert f["tried_bytes"] == tried
    assert abs(f["capacity_bytes"] / GiB - capacity) < 0.01
    assert abs(f["reserved_unallocated_bytes"] / GiB - unalloc) < 0.01


def test_torch_oom_wrapped_over_lines_is_joined():
    text = ("RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 128.00 MiB.\n"
            "GPU 0 has a total capacity of 94.97 GiB of which 100.19 MiB is free.\n"
            "Including non-PyTorch memory, this process has 94.86 GiB memory in use.\n"
            "Of the allocated memory 93.46 GiB is allocated by PyTorch, and\n"
            "100.28 MiB is reserved by PyTorch but unallocated.'\n")
    [oom] = [e for e in parse_text(text) if e.kind == "torch_oom"]
    assert oom.line == 1
    assert oom.fields["reserved_unallocated_bytes"] == round(100.28 * MiB)
    assert oom.fields["self_bytes"] == round(94.86 * GiB)


def test_traceback_is_grouped_with_frames_and_exception_per_process():
    text = "\n".join([
        "(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710] EngineCore encountered a fatal error.",
        "(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710] Traceback (most recent call last):",
        '(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 701, in run_engine_core',
        "(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710]     engine_core.run_busy_loop()",
        '(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 728, in run_busy_loop',
        "(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710]     self._process_engine_step()",
        "(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710]     ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Of the "
        "allocated memory 75.20 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.",
    ])
    records = parse_text(text, processes=True)
    kinds = [e.kind for e in records]
    assert kinds == ["server_process", "engine_dead", "traceback", "torch_oom"]
    proc = records[0]
    assert (proc.fields["pid"], proc.fields["role"], proc.line) == (9, "EngineCore_DP0", 1)
    tb = records[2]
    assert [f[2] for f in tb.fields["frames"]] == ["run_engine_core", "run_busy_loop"]
    assert tb.fields["exception"] == "OutOfMemoryError" and tb.fields["failure_kinds"] == ["torch_oom"]
    assert tb.line == 2 and tb.time == datetime(2026, 3, 12, 14, 17, 3, tzinfo=timezone.utc)


def test_phase_follows_the_lifecycle():
    text = "\n".join([
        "INFO 03-12 14:00:00 [gpu_model_runner.py:1] Model loading took 14.99 GiB and 6.2 seconds",
        "INFO 03-12 14:00:30 [api_server.py:1] Starting vLLM server on http://0.0.0.0:8000",
        'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "ERROR 03-12 16:00:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Of the allocated memory 75.20 GiB is "
        "allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated.",
    ])
    oom = [e for e in parse_text(text) if e.kind == "torch_oom"][0]
    assert oom.fields["phase"] == "serving"
    assert oom.fields["uptime_s"] == 2 * 3600


@pytest.mark.parametrize("line, kind", [
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.", "no_cache_blocks"),
    ("ValueError: Free memory on device cuda:0 (1.53/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", "free_memory_low"),
    ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.", "warmup_oom"),
    ("[ 2448.628970] Out of memory: Killed process 16014 (cicc) total-vm:3069420kB, anon-rss:2111980kB, file-rss:2412kB", "host_oom_kill"),
    ("NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "xid"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal_memory_access"),
    ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)", "nccl_error"),
    ("ERROR 03-12 14:17:03 [multiproc_executor.py:1] Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.", "child_killed"),
    ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory", "cuda_oom"),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_memory_exhausted"),
    ("RuntimeError: Prefill out of memory. Try to lower your batch size.", "kv_pool_oom"),
    ("[2026-03-12 14:17:03 TP0] Decode out of memory happened. #retracted_reqs: 3, #new_token_ratio: 0.5", "preemption"),
    ("Fatal Python error: Segmentation fault", "process_crash"),
])
def test_failure_signatures(line, kind):
    assert kind in [e.kind for e in parse_text(line)]


def test_not_a_failure_when_vllm_warns_about_memory():
    text = ("INFO 10-17 12:00:00 model_runner.py:1] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are "
            "running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.")
    assert [e.kind for e in parse_text(text)] == []


def test_stats_lines_v0_v1_and_sglang():
    v0 = parse_text("INFO 10-17 12:00:05 metrics.py:349] Avg prompt throughput: 512.3 tokens/s, Avg generation "
                    "throughput: 88.1 tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: "
                    "97.4%, CPU KV cache usage: 0.0%.")[0]
    assert (v0.fields["running"], v0.fields["waiting"], round(v0.fields["kv_usage"], 3)) == (12, 3, 0.974)
    v1 = parse_text("(APIServer pid=1) INFO 11-20 12:00:10 [loggers.py:335] Engine 000: Avg prompt throughput: 1203.4 "
                    "tokens/s, Avg generation throughput: 310.2 tokens/s, Running: 48 reqs, Waiting: 5 reqs, "
                    "Preemptions: 2, GPU KV cache usage: 99.1%, Prefix cache hit rate: 63.0%")[-1]
    assert (v1.fields["preemptions"], round(v1.fields["prefix_hit_rate"], 2)) == (2, 0.63)
    sg = parse_text("[16:43:30 TP0] Prefill batch. #new-seq: 6, #new-token: 8192, #cached-token: 2753, cache hit rate: "
                    "14.16%, token usage: 0.18, #running-req: 4, #queue-req: 34")[0]
    assert (sg.fields["running"], sg.fields["waiting"], sg.fields["kv_usage"]) == (4, 34, 0.18)


def test_launch_config_from_non_default_args_and_command_line():
    recs = parse_text("(APIServer pid=1) INFO 10-05 12:00:00 [utils.py:233] non-default args: {'model': "
                      "'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 131072, 'gpu_memory_utilization': 0.95}\n"
                      "$ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 --enforce-eager\n")
    assert recs[0].fields["args"]["max_model_len"] == 131072
    assert recs[1].fields["argv"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert recs[1].fields["args"] == {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 131072,
                                      "enforce_eager": True}


def test_gzip_input_is_read():
    data = gzip.compress(b"ValueError: No available memory for the cache blocks.\n")
    src = InputFile(display="x.log.gz", path=None, data=data)
    assert [e.kind for e in logs.parse(src, ParseContext(times=REF))] == ["no_cache_blocks"]


def test_memory_summary_inside_a_log_becomes_memory_stats():
    table = """|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 7         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  40960 MiB |  70000 MiB |   1000 GiB |    960 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  75000 MiB |  76000 MiB |    100 GiB |     25 GiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |  30000 MiB |  31000 MiB |    500 GiB |    470 GiB |
|===========================================================================|
INFO 03-12 14:00:00 [core.py:1] after
"""
    stats = [e for e in parse_text(table) if e.kind == "memory_stats"]
    assert len(stats) == 1
    assert stats[0].fields["num_alloc_retries"] == 7
    assert stats[0].fields["reserved_bytes"] == 75000 * MiB


def test_json_per_line_logs_are_read():
    text = ('{"asctime": "2026-03-12 14:20:03,001", "levelname": "ERROR", "name": "vllm.v1.engine.core", '
            '"processName": "EngineCore_0", "process": 42, "message": "ValueError: No available memory for the cache '
            'blocks. Try increasing `gpu_memory_utilization` when initializing the engine."}\n'
            '{"log":"INFO 03-12 14:21:00 [core.py:1] Starting vLLM server on http://0.0.0.0:8000\\n","stream":"stdout",'
            '"time":"2026-03-12T14:21:00.5Z"}\n')
    recs = parse_text(text)
    assert [e.kind for e in recs] == ["no_cache_blocks", "startup_complete"]
    assert recs[0].time == datetime(2026, 3, 12, 14, 20, 3, 1000, tzinfo=timezone.utc)
    assert recs[0].fields["process"] == "EngineCore_0"


def test_feb_29_with_a_non_leap_reference_year():
    ref = TimeReference(datetime(2026, 3, 20, tzinfo=timezone.utc), "test")
    assert parse_line("INFO 02-29 12:00:00 [core.py:1] z", ref).time == datetime(2024, 2, 29, 12, tzinfo=timezone.utc)


def test_v1_crash_dump_scheduler_stats_are_read():
    line = ("(EngineCore_DP0 pid=9) ERROR 03-12 14:17:03 [dump_input.py:79] Dumping scheduler stats: SchedulerStats("
            "num_running_reqs=61, num_waiting_reqs=17, step_counter=0, current_wave=0, kv_cache_usage=0.9731, "
            "prefix_cache_stats=PrefixCacheStats(reset=False, requests=0, queries=0, hits=0))")
    [rec] = parse_text(line)
    assert rec.kind == "stats" and rec.fields["running"] == 61 and rec.fields["kv_usage"] == pytest.approx(0.9731)


def test_the_halving_search_finds_exactly_the_non_access_lines_in_order():
    """_odd_lines must return what a plain look at every line would: same lines, positions, numbers."""
    import random

    from triage.evidence.logs import ACCESS_MARK, _odd_lines

    access = b'(APIServer pid=1) INFO:     10.0.0.1:4000 - "POST /v1/completions HTTP/1.1" 200 OK'
    others = [b"INFO 03-12 14:17:03 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s",
              b"", b"WARNING 03-12 14:17:04 [scheduler.py:1] preempted", b"  File \"x.py\", line 1, in f"]
    rng = random.Random(7)
    for trial in range(300):
        lines = [rng.choice(others) if rng.random() < rng.choice((0.001, 0.02, 0.3)) else access
                 for _ in range(rng.randint(1, 400))]
        buf = bytearray(b"\n".join(lines) + b"\n")
        start_line = rng.randint(1, 10**6)
        expected, at = [], 0
        for i, raw in enumerate(lines):
            if ACCESS_MARK not in raw:
                expected.append((at, start_line + i, raw))
            at += len(raw) + 1
        got = [(p, n, bytes(r)) for p, n, r in _odd_lines(buf, 0, len(buf), start_line, len(lines))]
        assert got == expected, trial
