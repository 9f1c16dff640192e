"""The log shapes users have beyond an access log: generators for gen_log.py --shape.

Each shape is a start-up, a bulk of the lines that make that shape what it is, and a runtime
CUDA OOM at the end (so every shape has a verdict to get right):

  vllm-debug  vLLM 0.11 V1 with VLLM_LOGGING_LEVEL=DEBUG: ~90 % DEBUG chatter from the engine
              core and the API server, some access lines, a stats line every 10 s
  sglang      SGLang: prefill/decode batch lines, access lines, a few DEBUG lines
  tgi         TGI (Rust tracing): per-request span lines, DEBUG router lines
  blob        vLLM DEBUG where a client's requests are dumped: JSON bodies with base64 images,
              and base64 tensors wrapped at 76 columns
  long-lines  vLLM DEBUG with scheduler dumps of 64 KiB - 1 MiB on one line
  crlf        vllm-debug with CR LF line ends (a log copied through Windows)
  k8s         vllm-debug as `kubectl logs --timestamps` / the CRI file writes it
  journal     vllm-debug as journalctl prints it
  mixed       vLLM, SGLang and TGI lines interleaved with the kernel's, as a node's merged log

Output depends only on (shape, size, seed). Standard library only.
"""
from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import gen_log

SHAPES = ("vllm-debug", "sglang", "tgi", "blob", "long-lines", "crlf", "k8s", "journal", "mixed")
# shape -> the verdict class classify must give (the tail is a runtime CUDA OOM in each)
EXPECTED = {shape: "burst" for shape in SHAPES}
START = gen_log.START
HEX = "0123456789abcdef"

_DEBUG_V1 = (
    ("core.py:797", "EngineCore loop active."),
    ("core.py:791", "EngineCore waiting for work."),
    ("core.py:812", "Scheduled {n} requests ({t} tokens) in step {s}"),
    ("gpu_model_runner.py:2105", "Running batch of {n} requests with {t} tokens (cudagraph=True, padded to {p})"),
    ("kv_cache_manager.py:301", "Allocated {k} KV blocks for {rid}; {f} blocks free"),
    ("shm_broadcast.py:512", "Broadcast block {s} written by rank 0 ({b} bytes)"),
    ("async_llm.py:402", "Waiting for output from engine core for {rid}"),
    ("utils.py:211", "Detokenized {t} tokens for {rid} in {ms} ms"),
    ("scheduler.py:601", "Request {rid} moved to running queue (num_computed_tokens={t})"),
    ("structured_output.py:88", "No grammar for {rid}; skipping bitmask"),
)


def _rid(rng: random.Random) -> str:
    return "chatcmpl-" + "".join(rng.choice(HEX) for _ in range(32))


def _debug_message(rng: random.Random) -> tuple[str, str, str]:
    where, text = rng.choice(_DEBUG_V1)
    proc = gen_log.ENGINE if where.split(".")[0] in ("core", "gpu_model_runner", "kv_cache_manager",
                                                      "shm_broadcast", "scheduler") else gen_log.API
    return proc, where, text.format(n=rng.randint(1, 256), t=rng.randint(1, 16384), s=rng.randint(1, 10**7),
                                    p=rng.choice((8, 16, 32, 64, 128, 256, 512)), k=rng.randint(1, 64),
                                    f=rng.randint(100, 30000), rid=_rid(rng), b=rng.randint(64, 65536),
                                    ms=rng.randint(1, 90))


class VllmBulk:
    """One log second of a V1 server at DEBUG level."""

    def __init__(self, rng: random.Random, debug_per_s: int = 120, access_per_s: int = 12) -> None:
        self.rng = rng
        self.px = gen_log.Prefixes(ansi=False, cr=True)
        self.stats = gen_log.Bulk(self.px, rng)
        self.debug_per_s, self.access_per_s = debug_per_s, access_per_s

    def second(self, t: datetime, tick: int, progress: float) -> str:
        rng, px = self.rng, self.px
        stamp = px.stamp(t)
        parts = [f"{proc} DEBUG {stamp} [{where}] {msg}\n"
                 for proc, where, msg in (_debug_message(rng) for _ in range(self.debug_per_s))]
        for _ in range(self.access_per_s):
            parts.append(f"{gen_log.API} INFO:     {rng.choice(gen_log.CLIENT_IPS)}:{rng.randint(32768, 60999)} - "
                         '"POST /v1/chat/completions HTTP/1.1" 200 OK\n')
        if tick % gen_log.STATS_EVERY_S == 0:
            parts.append(self.stats.stats_line(t, tick, progress, 0.0))
        rng.shuffle(parts)
        return "".join(parts)


def vllm_head_tail(seed: int) -> tuple[str, datetime, Callable[[datetime], str]]:
    px = gen_log.Prefixes(ansi=False, cr=True)
    head, bulk_start = gen_log.startup_block(px)
    return head, bulk_start, lambda t: gen_log.crash_block(px, t, random.Random(seed))


# --- SGLang -----------------------------------------------------------------------------

def _sg(t: datetime, msg: str) -> str:
    return f"[{t:%Y-%m-%d %H:%M:%S} TP0] {msg}\n"


SGLANG_HEAD = (
    "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, mem_fraction_static=0.88, "
    "max_running_requests=None, chunked_prefill_size=8192, disable_radix_cache=False)",
    "Load weight begin. avail mem=78.61 GB",
    "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.45 GB, mem usage=15.16 GB.",
    "KV Cache is allocated. #tokens: 431040, K size: 26.31 GB, V size: 26.31 GB",
    "Memory pool end. avail mem=9.70 GB",
    "Capture cuda graph begin. This can take up to several minutes. avail mem=9.55 GB",
    "Capture cuda graph end. Time elapsed: 21.04 s. mem usage=0.87 GB. avail mem=8.68 GB.",
    "max_total_num_tokens=431040, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, "
    "context_len=131072, available_gpu_mem=8.68 GB",
    "INFO:     Started server process [2231]",
    "INFO:     Application startup complete.",
    "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
    "The server is fired up and ready to roll!",
)
SGLANG_CRASH = (
    "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2398, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1380, in forward_extend',
    "    return self.model.forward(",
    '  File "/sgl-workspace/sglang/python/sglang/srt/layers/logits_processor.py", line 326, in forward',
    "    logits = self._get_logits(pruned_states, lm_head, logits_metadata)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 2.04 GiB is free. Process 2231 has 77.14 GiB memory in use. Of the allocated memory "
    "72.61 GiB is allocated by PyTorch, and 1.85 GiB is reserved by PyTorch but unallocated.",
)


class SglangBulk:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def second(self, t: datetime, tick: int, progress: float) -> str:
        rng = self.rng
        usage = min(0.97, 0.2 + 0.7 * progress + rng.uniform(-0.03, 0.03))
        running = rng.randint(20, 120)
        parts = []
        for _ in range(rng.randint(2, 5)):
            parts.append(_sg(t, f"Prefill batch. #new-seq: {rng.randint(1, 4)}, #new-token: {rng.randint(64, 8192)}, "
                                f"#cached-token: {rng.randint(0, 4096)}, token usage: {usage:.2f}, "
                                f"#running-req: {running}, #queue-req: {rng.randint(0, 3)}"))
        for _ in range(2):
            parts.append(_sg(t, f"Decode batch. #running-req: {running}, #token: {int(usage * 431040)}, "
                                f"token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): "
                                f"{rng.uniform(800, 4000):.2f}, #queue-req: 0"))
        for _ in range(rng.randint(25, 45)):
            parts.append(f"[{t:%Y-%m-%d %H:%M:%S}] INFO:     10.0.{rng.randint(0, 20)}.{rng.randint(1, 250)}:"
                         f"{rng.randint(32768, 60999)} - \"POST /generate HTTP/1.1\" 200 OK\n")
        for _ in range(rng.randint(5, 15)):
            parts.append(_sg(t, f"Cache hit for rid={''.join(rng.choice(HEX) for _ in range(32))}: "
                                f"{rng.randint(0, 8192)} tokens reused"))
        return "".join(parts)


# --- TGI --------------------------------------------------------------------------------

def _tgi(t: datetime, level: str, target: str, msg: str) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}Z {level:>5} {target}: {msg}\n"


TGI_HEAD = (
    ("INFO", "text_generation_launcher", "Args { model_id: \"meta-llama/Llama-3.1-8B-Instruct\", "
     "max_input_tokens: Some(8000), max_total_tokens: Some(8192), max_batch_prefill_tokens: Some(8242), "
     "cuda_memory_fraction: 1.0, port: 80, shard_uds_path: \"/tmp/text-generation-server\" }"),
    ("INFO", "download", "text_generation_launcher: Starting download process."),
    ("INFO", "download", "text_generation_launcher: Successfully downloaded weights for meta-llama/Llama-3.1-8B"),
    ("INFO", "shard-manager", "text_generation_launcher: Starting shard rank=0"),
    ("INFO", "shard-manager", "text_generation_launcher: Shard ready in 21.42s rank=0"),
    ("INFO", "text_generation_router::server", "router/src/server.rs:1797: Using config Some(Llama)"),
    ("INFO", "text_generation_router::server", "router/src/server.rs:2114: Setting max batch total tokens to 201856"),
    ("INFO", "text_generation_router::server", "router/src/server.rs:2336: Connected"),
)


class TgiBulk:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def second(self, t: datetime, tick: int, progress: float) -> str:
        rng = self.rng
        parts = []
        for i in range(rng.randint(20, 35)):
            ti = t + timedelta(microseconds=i * 20000)
            total = rng.uniform(0.3, 9.0)
            parts.append(_tgi(ti, "INFO", "compat_generate{default_return_full_text=true compute_type=Extension("
                              "ComputeType(\"1-nvidia-h100-80gb-hbm3\"))}:generate_stream{parameters="
                              f"GenerateParameters {{ best_of: None, temperature: Some(0.7), max_new_tokens: "
                              f"Some({rng.randint(16, 1024)}), seed: None }} total_time=\"{total:.3f}s\" "
                              f"validation_time=\"{rng.uniform(0.1, 2):.3f}ms\" queue_time=\"{rng.uniform(0.01, 40):.3f}ms\" "
                              f"inference_time=\"{total:.3f}s\" time_per_token=\"{rng.uniform(10, 30):.3f}ms\" "
                              f"seed=\"None\"}}:text_generation_router::server", "router/src/server.rs:637: Success"))
        for i in range(rng.randint(40, 80)):
            ti = t + timedelta(microseconds=i * 9000)
            parts.append(_tgi(ti, "DEBUG", "next_batch{min_size=None max_size=None prefill_token_budget=8242 "
                              "token_budget=201856}", f"text_generation_router::infer::v3::queue: "
                              f"router/src/infer/v3/queue.rs:{rng.randint(300, 400)}: Accepting entry "
                              f"{rng.randint(1, 10**6)}, {rng.randint(1, 50)} entries in queue"))
        return "".join(parts)


TGI_CRASH = (
    ("ERROR", "batch{batch_size=4}:prefill:prefill{id=8812 size=4}:prefill{id=8812 size=4}",
     "text_generation_router::infer: router/src/infer/mod.rs:866: Request failed during generation: Server error: "
     "CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.01 GiB "
     "is free. Process 41 has 78.17 GiB memory in use."),
)


# --- the driver -------------------------------------------------------------------------

def _blob_second(rng: random.Random, bulk: VllmBulk, t: datetime, tick: int, progress: float) -> str:
    text = bulk.second(t, tick, progress)
    stamp = bulk.px.stamp(t)
    image = base64.b64encode(rng.randbytes(rng.randint(2000, 6000))).decode()
    body = json.dumps({"model": gen_log.MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]}]})
    text += f"{gen_log.API} DEBUG {stamp} [serving_chat.py:214] Request body: {body}\n"
    if tick % 3 == 0:
        tensor = base64.b64encode(rng.randbytes(rng.randint(20000, 60000))).decode()
        text += "".join(tensor[i:i + 76] + "\n" for i in range(0, len(tensor), 76))
    return text


def _long_second(rng: random.Random, bulk: VllmBulk, t: datetime, tick: int, progress: float) -> str:
    text = bulk.second(t, tick, progress)
    if tick % 4 == 0:
        ids = ",".join(str(rng.randint(0, 128255)) for _ in range(rng.randint(10000, 150000)))
        text += (f"{gen_log.ENGINE} DEBUG {bulk.px.stamp(t)} [core.py:330] Scheduler output: "
                 f"SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id={_rid(rng)}, prompt_token_ids=[{ids}])])\n")
    return text


def _rewrap(text: str, shape: str, t: datetime) -> str:
    """Collector envelopes and line ends, applied to every line of `text`."""
    if shape == "crlf":
        return text.replace("\r\n", "\n").replace("\n", "\r\n")
    lines = text.splitlines()
    if shape == "k8s":
        stamp = f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d}123Z stdout F "
        return "".join(stamp + line + "\n" for line in lines)
    if shape == "journal":
        stamp = f"{t:%b %d %H:%M:%S} gpu-node-7 vllm[2231]: "
        return "".join(stamp + line + "\n" for line in lines)
    return text


def _mixed_second(rng: random.Random, parts: tuple, t: datetime, tick: int, progress: float) -> str:
    vllm, sglang, tgi = parts
    lines = (vllm.second(t, tick, progress).splitlines(keepends=True)[::3]
             + sglang.second(t, tick, progress).splitlines(keepends=True)[::2]
             + tgi.second(t, tick, progress).splitlines(keepends=True)[::2])
    if tick % 30 == 0:
        lines.append(f"[{tick + 86400:>6}.{rng.randint(0, 999999):06d}] nvidia-nvswitch: probing device "
                     f"0000:{rng.randint(0, 255):02x}:00.0\n")
    rng.shuffle(lines)
    return "".join(lines)


def pieces(shape: str, seed: int) -> tuple[str, datetime, Callable[[datetime, int, float], str],
                                           Callable[[datetime], str]]:
    """(head, bulk start, one log second of bulk, the crash at a time)."""
    rng = random.Random(seed)
    if shape == "sglang":
        head = "".join(_sg(START + timedelta(seconds=i), m) for i, m in enumerate(SGLANG_HEAD))
        bulk = SglangBulk(rng)
        return head, START + timedelta(seconds=60), bulk.second, \
            lambda t: "".join(_sg(t, m) if i == 0 else m + "\n" for i, m in enumerate(SGLANG_CRASH))
    if shape == "tgi":
        head = "".join(_tgi(START + timedelta(seconds=i), *p) for i, p in enumerate(TGI_HEAD))
        bulk = TgiBulk(rng)
        return head, START + timedelta(seconds=60), bulk.second, \
            lambda t: "".join(_tgi(t, *p) for p in TGI_CRASH)
    head, start, crash = vllm_head_tail(seed)
    vllm = VllmBulk(rng)
    if shape == "blob":
        return head, start, lambda t, k, p: _blob_second(rng, vllm, t, k, p), crash
    if shape == "long-lines":
        return head, start, lambda t, k, p: _long_second(rng, vllm, t, k, p), crash
    if shape == "mixed":
        parts = (vllm, SglangBulk(rng), TgiBulk(rng))
        return head, start, lambda t, k, p: _mixed_second(rng, parts, t, k, p), crash
    if shape in ("crlf", "k8s", "journal"):
        return (_rewrap(head, shape, START), start,
                lambda t, k, p: _rewrap(vllm.second(t, k, p), shape, t), lambda t: _rewrap(crash(t), shape, t))
    return head, start, vllm.second, crash


def chunks(shape: str, size: int, seed: int) -> Iterator[bytes]:
    """The log's bytes, ~4 MiB at a time, about `size` in all."""
    head, t, second, crash = pieces(shape, seed)
    tail = crash(t).encode()
    budget = max(0, size - len(head) - len(tail))
    yield head.encode()
    done, tick, block = 0, 0, []
    while done < budget:
        text = second(t, tick, done / budget).encode()
        block.append(text)
        done += len(text)
        if sum(map(len, block)) >= gen_log.FLUSH_BYTES:
            yield b"".join(block)
            block = []
        tick += 1
        t += timedelta(seconds=1)
    block.append(crash(t).encode())
    yield b"".join(block)


def generate(out: Path, size: int, seed: int, shape: str) -> int:
    """Writes the log to `out` (atomically, via a .part file). Returns bytes written."""
    tmp = out.with_name(out.name + ".part")
    written = 0
    with open(tmp, "wb") as f:
        for data in chunks(shape, size, seed):
            f.write(data)
            written += len(data)
    tmp.replace(out)
    return written
