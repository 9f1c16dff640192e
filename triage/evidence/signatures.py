"""Named, compiled patterns for the log lines that matter, and the numbers they carry.

Each `Signature` has a cheap substring guard (checked first, so a 1 GB log does not pay for
40 regexes per line), a pattern and an extractor. `match_message` returns every
(kind, fields) pair a message carries, in priority order: a message that says "Out of memory:
Killed process" is the kernel's host OOM killer, not a CUDA OOM.
"""
from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from ..units import gib, size_from
from .kinds import Kind
from .torch_oom import OOM_START, parse_torch_oom

Fields = dict[str, Any]
Extractor = Callable[[re.Match[str], str], "Fields | None"]


@dataclass(frozen=True)
class Signature:
    kind: Kind
    guards: tuple[str, ...]          # at least one must be a substring of the message
    regex: "str | re.Pattern[str]"   # compiled on first use: most runs need a handful of them
    extract: Extractor | None = None
    final: bool = False              # stop matching further signatures after this one

    @property
    def pattern(self) -> re.Pattern[str]:
        return self.regex if isinstance(self.regex, re.Pattern) else _compiled(self.regex)



_COMPILED: dict[str, re.Pattern[str]] = {}


def _compiled(regex: str) -> re.Pattern[str]:
    pat = _COMPILED.get(regex)
    if pat is None:
        pat = _COMPILED[regex] = re.compile(regex)
    return pat


def _num(s: str | None) -> float | None:
    return float(s.replace(",", "")) if s else None


def _int(s: str | None) -> int | None:
    return int(s.replace(",", "")) if s else None


def _gib(s: str | None) -> int | None:
    return gib(float(s)) if s else None


# --- launch configuration --------------------------------------------------------------------

_KV_PAIR = re.compile(r"(\w+)=((?:'[^']*'|\"[^\"]*\"|\{[^{}]*\}|\([^()]*\)|[^,\s)]+))")


def parse_config_pairs(text: str) -> Fields:
    """`model='x', max_seq_len=4096, enforce_eager=False` -> typed dict (best effort)."""
    out: Fields = {}
    for key, raw in _KV_PAIR.findall(text):
        out[key] = literal(raw)
    return out


def literal(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw.strip("'\"")


def _config_line(m: re.Match[str], msg: str) -> Fields:
    gd = m.groupdict()
    args = parse_config_pairs(gd.get("config") or "")
    # V0 config names max_model_len "max_seq_len"; keep one vocabulary for the rules.
    if "max_seq_len" in args and "max_model_len" not in args:
        args["max_model_len"] = args["max_seq_len"]
    return {"engine": "vllm", "version": gd.get("version"), "engine_mode": gd.get("mode"),
            "args": args, "origin": "engine config"}


def _non_default(m: re.Match[str], msg: str) -> Fields | None:
    value = literal(m.group(1))
    if not isinstance(value, dict):
        value = parse_config_pairs(m.group(1))
    return {"engine": "vllm", "args": value, "origin": "non-default args"}


def _namespace(m: re.Match[str], msg: str) -> Fields:
    return {"engine": "vllm", "args": parse_config_pairs(m.group(1)), "origin": "argparse namespace"}


_SERVE_CMD = (
    r"(?:^|\s|\$ )((?:python3?\s+-m\s+vllm\.entrypoints\.openai\.api_server|vllm\s+serve)\b.*)$")


def _command_line(m: re.Match[str], msg: str) -> Fields | None:
    try:
        argv = shlex.split(m.group(1))
    except ValueError:
        return None
    return {"engine": "vllm", "argv": argv, "args": argv_to_args(argv), "origin": "command line"}


def argv_to_args(argv: list[str]) -> Fields:
    """`vllm serve M --max-model-len 8192 --enforce-eager` -> {model: M, max_model_len: 8192, ...}."""
    args: Fields = {}
    i = 0
    if len(argv) >= 3 and argv[0] == "vllm" and argv[1] == "serve" and not argv[2].startswith("-"):
        args["model"] = argv[2]
        i = 3
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            name, eq, val = tok[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                args[key] = literal(val)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                args[key] = literal(argv[i + 1])
                i += 1
            elif key.startswith("no_"):
                args[key[3:]] = False
            else:
                args[key] = True
        i += 1
    return args


def _sglang_args(m: re.Match[str], msg: str) -> Fields:
    return {"engine": "sglang", "args": parse_config_pairs(m.group(1)), "origin": "server_args"}


def _tgi_args(m: re.Match[str], msg: str) -> Fields:
    pairs = dict(re.findall(r"(\w+): (Some\([^)]*\)|\"[^\"]*\"|[\w.]+)", m.group(1)))
    args = {k: literal(v[5:-1] if v.startswith("Some(") else v) for k, v in pairs.items()}
    return {"engine": "tgi", "args": args, "origin": "launcher args"}


# --- start-up sizing -------------------------------------------------------------------------

def _weights(m: re.Match[str], msg: str) -> Fields:
    # vLLM labels GiB values "GB" in several versions (the value is bytes / 2**30).
    return {"weights_bytes": gib(float(m.group(1)))}


def _profile_pairs(m: re.Match[str], msg: str) -> Fields:
    fields: Fields = {}
    # Values may be negative (kv_cache_size=-4.71GiB: nothing left) and the line ends with ".".
    for key, val, unit in re.findall(r"(\w+)=(-?\d+(?:\.\d+)?)(GiB)?", msg):
        fields[key + ("_bytes" if unit else "")] = gib(float(val)) if unit else float(val)
    return fields


def _profile_budget(m: re.Match[str], msg: str) -> Fields:
    return {"total_gpu_memory_bytes": _gib(m.group(1)), "gpu_memory_utilization": _num(m.group(2)),
            "budget_bytes": _gib(m.group(3))}


def _profile_split(m: re.Match[str], msg: str) -> Fields:
    return {"weights_bytes": _gib(m.group(1)), "non_torch_bytes": _gib(m.group(2)),
            "activation_peak_bytes": _gib(m.group(3)), "kv_cache_bytes": _gib(m.group(4))}


def _breakdown(m: re.Match[str], msg: str) -> Fields:
    f: Fields = {"free_bytes": _gib(m.group(1)), "total_gpu_memory_bytes": _gib(m.group(2)),
                 "gpu_memory_utilization": _num(m.group(3)), "budget_bytes": _gib(m.group(4))}
    for label, key in (("for weight", "weights_bytes"), ("for consumed memory", "consumed_bytes"),
                       ("for peak activation", "activation_peak_bytes"),
                       ("for non-torch memory", "non_torch_bytes"), ("for CUDAGraph memory", "cuda_graph_bytes")):
        mm = re.search(r"([\d.]+) GiB " + re.escape(label), msg)
        if mm:
            f[key] = _gib(mm.group(1))
    kv = re.search(r"Current kv cache memory in use is ([\d.]+) GiB", msg)
    if kv:
        f["kv_cache_bytes"] = _gib(kv.group(1))
    return f


# --- serving -----------------------------------------------------------------------------------

# "Label: number" parts of the V0/V1 stats lines, read in one pass.
_STATS_PART = re.compile(r"([A-Za-z][A-Za-z +]*?): (?:GPU: )?([\d.]+)")
_STATS_LABELS = {
    "Avg prompt throughput": "prompt_tps", "Avg generation throughput": "generation_tps", "Running": "running",
    "Swapped": "swapped", "Pending": "waiting", "Waiting": "waiting", "Preemptions": "preemptions",
    "GPU KV cache usage": "kv_usage", "GPU + host KV cache usage": "kv_usage", "XPU KV cache usage": "kv_usage",
    "CPU KV cache usage": "cpu_kv_usage", "Prefix cache hit rate": "prefix_hit_rate",
}


def _stats(m: re.Match[str], msg: str) -> Fields | None:
    out: Fields = {"engine": "vllm"}
    for label, value in _STATS_PART.findall(msg):
        key = _STATS_LABELS.get(label.strip())
        if key and key not in out:
            out[key] = float(value)
    for pct in ("kv_usage", "cpu_kv_usage", "prefix_hit_rate"):
        if pct in out:
            out[pct] = out[pct] / 100.0
    return out if len(out) > 1 else None


def _scheduler_dump(m: re.Match[str], msg: str) -> Fields | None:
    out: Fields = {"engine": "vllm", "crash_dump": True}
    for key, field in (("num_running_reqs", "running"), ("num_waiting_reqs", "waiting"), ("kv_cache_usage", "kv_usage"),
                       ("gpu_cache_usage", "kv_usage")):
        mm = re.search(rf"\b{key}=([\d.]+)", m.group(1))
        if mm and field not in out:
            out[field] = float(mm.group(1))
    return out if len(out) > 2 else None


def _sglang_stats(m: re.Match[str], msg: str) -> Fields:
    out: Fields = {"engine": "sglang", "batch": m.group(1).lower()}
    for key, pat in (("running", r"#running-req: (\d+)"), ("waiting", r"#queue-req: (\d+)"),
                     ("kv_usage", r"token usage: ([\d.]+)"), ("prefix_hit_rate", r"cache hit rate: ([\d.]+)%"),
                     ("new_tokens", r"#new-token: (\d+)"), ("generation_tps", r"gen throughput \(token/s\): ([\d.]+)")):
        mm = re.search(pat, msg)
        if mm:
            out[key] = float(mm.group(1))
    if "prefix_hit_rate" in out:
        out["prefix_hit_rate"] /= 100.0
    return out


def _access(m: re.Match[str], msg: str) -> Fields:
    return {"client": m.group(1), "method": m.group(2), "path": m.group(3), "status": int(m.group(4))}


# --- failures ----------------------------------------------------------------------------------

def _torch_oom(m: re.Match[str], msg: str) -> Fields | None:
    return parse_torch_oom(msg)


def _kv_v0(m: re.Match[str], msg: str) -> Fields:
    return {"max_model_len": int(m.group(1)), "kv_tokens": int(m.group(2)), "estimated_max_model_len": int(m.group(2))}


def _kv_v1(m: re.Match[str], msg: str) -> Fields:
    est = re.search(r"estimated maximum model length is (\d+)", msg)
    return {"max_model_len": int(m.group(1)), "needed_bytes": size_from(m.group(2), m.group(3), gb_is_gib=True),
            "available_bytes": size_from(m.group(4), m.group(5), gb_is_gib=True),
            "estimated_max_model_len": int(est.group(1)) if est else None}


def _free_low(m: re.Match[str], msg: str) -> Fields:
    return {"device": m.group(1), "free_bytes": _gib(m.group(2)), "total_bytes": _gib(m.group(3)),
            "gpu_memory_utilization": _num(m.group(4)), "requested_bytes": _gib(m.group(5))}


def _warmup(m: re.Match[str], msg: str) -> Fields:
    return {"stage": "sampler", "dummy_requests": _int(m.group(1)), "setting": "max_num_seqs"}


def _tgi_warmup(m: re.Match[str], msg: str) -> Fields:
    return {"stage": "prefill", "tokens": _int(m.group(1)), "setting": "max_batch_prefill_tokens", "engine": "tgi"}


def _kv_pool(m: re.Match[str], msg: str) -> Fields:
    f: Fields = {"engine": "sglang", "stage": m.group(1).lower()}
    tokens = re.search(r"[Tt]ry to allocate (\d+) tokens", msg)
    if tokens:
        f["requested_tokens"] = int(tokens.group(1))
    return f



def _host_kill(m: re.Match[str], msg: str) -> Fields:
    gd = m.groupdict()
    f: Fields = {"pid": _int(gd.get("pid")), "process": gd.get("comm")}
    rss = re.search(r"anon-rss:(\d+)kB", msg)
    if rss:
        f["anon_rss_bytes"] = int(rss.group(1)) * 1024
    f["cgroup"] = "Memory cgroup" in msg or "task_memcg" in msg and "constraint=CONSTRAINT_MEMCG" in msg
    return f


def _xid(m: re.Match[str], msg: str) -> Fields:
    return {"pci": m.group(1), "code": int(m.group(2)), "detail": m.group(3)}




def _sleep(m: re.Match[str], msg: str) -> Fields:
    freed = re.search(r"freed ([\d.]+) GiB", msg)
    return {"in_use_bytes": _gib(m.group(1)), "freed_bytes": _gib(freed.group(1)) if freed else None}


def _cuda_error(m: re.Match[str], msg: str) -> Fields:
    return {"error": m.group(1).strip()}


_S = Signature


def _R(regex: str) -> str:
    """Marks a signature's pattern; Signature.pattern compiles it on first use."""
    return regex
_OOM_WORDS = ("out of memory", "Out of memory", "OUT_OF_MEMORY", "ALLOC_FAILED", "OutOfMemory", "with OOM",
              "ErrorMemoryAllocation", "cudaMalloc")

SIGNATURES: tuple[Signature, ...] = (
    # Kernel / cgroup OOM killer first: its text says "Out of memory" too.
    _S(Kind.HOST_OOM_KILL, ("Killed process", "oom-killer", "oom-kill:", "Memory cgroup out of memory", "System OOM", "oom_reaper"),
       _R(r"(?:Out of memory(?: \(oom_kill_allocating_task\))?: Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
          r"|Memory cgroup out of memory: Killed process (?P<pid2>\d+)|(?P<comm2>\S+) invoked oom-killer"
          r"|oom-kill:constraint=\w+.*?task=(?P<task>[^,]+),pid=(?P<tpid>\d+)|System OOM encountered|oom_reaper: reaped process)"),
       lambda m, msg: {**_host_kill(m, msg), "pid": _int(m.group("pid") or m.group("pid2") or m.group("tpid")),
                       "process": m.group("comm") or m.group("comm2") or m.group("task")}, final=True),
    # Host (CPU) memory exhaustion that is not a kill: ENOMEM, bad_alloc, Ray's node-memory monitor.
    _S(Kind.HOST_MEMORY_EXHAUSTED, ("Cannot allocate memory", "can't allocate memory", "bad_alloc", "MemoryError",
                                    "low on memory", "low on resource: memory", "Too large swap space"),
       _R(r"Cannot allocate memory|DefaultCPUAllocator: can't allocate memory|std::bad_alloc|ray\.exceptions\.OutOfMemoryError"
          r"|running low on memory|low on resource: memory|^(?:[\w.]+\.)?MemoryError\b|Too large swap space"), final=True),
    _S(Kind.OOM_KILLED, ("OOMKilled", "137"),
       _R(r"\bOOMKilled\b|Exited \(137\)|exit(?:ed with)? code:? 137\b|exitCode\"?:\s*137\b|Exit Code:\s*137\b"),
       lambda m, msg: {"reason": "OOMKilled" if "OOMKilled" in msg else "exit 137 (SIGKILL)"}),
    _S(Kind.XID, ("Xid",), _R(r"S?Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\): (\d+),\s*(.*)"), _xid),
    _S(Kind.GPU_LOST, ("fallen off the bus",), _R(r"fallen off the bus")),
    _S(Kind.ECC_ERROR, ("ECC", "double bit error"),
       _R(r"uncorrectable ECC error|[Uu]ncorrectable.*ECC|ECC.*[Uu]ncorrectable|double bit error|\bDBE\b")),
    _S(Kind.ILLEGAL_MEMORY_ACCESS, ("illegal memory access", "illegal instruction", "misaligned address"),
       _R(r"an illegal memory access was encountered|illegal memory access|an illegal instruction was encountered|misaligned address")),
    # An NCCL failure that reports a CUDA OOM is a GPU OOM (matched below), not an NCCL fault.
    _S(Kind.NCCL_ERROR, ("NCCL", "nccl"),
       _R(r"^(?!.*out of memory).*(?:NCCL error|nccl\w*Error|Watchdog caught collective operation timeout|ProcessGroupNCCL.*(?:[Tt]imeout|failed)|NCCL communicator was aborted)")),
    # A broken install or environment: the server fails, but not for memory.
    _S(Kind.SETUP_ERROR, ("ImportError", "ModuleNotFoundError", "Cannot re-initialize CUDA",
                          "Failed to infer device type", "Failed to load the tokenizer", "No CUDA GPUs are available",
                          "driver version is insufficient"),
       _R(r"^(?:[\w.]+\.)?(?:ImportError|ModuleNotFoundError)\b|Cannot re-initialize CUDA in forked subprocess"
          r"|Failed to infer device type|Failed to load the tokenizer|No CUDA GPUs are available"
          r"|CUDA driver version is insufficient"), lambda m, msg: {"error": m.group(0)}),
    _S(Kind.PROCESS_CRASH, ("Segmentation fault", "SIGSEGV", "stack overflow", "Bus error", "SIGBUS"),
       _R(r"Segmentation fault|SIGSEGV|[Ss]tack overflow|Bus error|SIGBUS"), lambda m, msg: {"signal": m.group(0)}),
    # A process died without saying why: a failure, but not evidence of what failed.
    _S(Kind.PROCESS_DIED, ("Received sigquit", "Killed", "died unexpectedly", "died with exit code", "Kernel crashed",
                           "kernel appears to have died"),
       _R(r"Received sigquit from a child process|^Killed$|(?:Engine core|Worker) proc(?:ess)? \S+ died unexpectedly"
          r"|The Kernel crashed while executing code|The kernel appears to have died"
          r"|Process \S+ \(PID: \d+\) died with exit code"), lambda m, msg: {"signal": m.group(0)}),
    _S(Kind.CHILD_KILLED, ("-9",),
       _R(r"(?P<name>[\w:-]+(?: proc)?\s*\S*) died (?:unexpectedly )?(?:\(exit code: -9\)|with exit code -9)|exitcode=-9|(?P<name2>'[\w]+')\s*:\s*-9\b"),
       lambda m, msg: {"process": m.group("name") or m.group("name2"), "exit_code": -9}),
    # vLLM's own start-up memory checks.
    _S(Kind.KV_CACHE_INSUFFICIENT, ("max seq len",),
       _R(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)"), _kv_v0),
    _S(Kind.KV_CACHE_INSUFFICIENT, ("max seq len",),
       _R(r"max seq len \((\d+)\),?\s*\(?([\d.]+)\s*(GiB|GB) KV cache is needed, which is larger than the available KV cache memory \(([\d.]+)\s*(GiB|GB)\)"), _kv_v1),
    # A negative or zero KV block count: nothing was left for the cache after weights and activations.
    _S(Kind.NO_CACHE_BLOCKS, ("num_gpu_blocks=-", "GPU blocks: 0,", "GPU blocks: -", "cuda blocks: 0,", "CUDA blocks: 0,"),
       _R(r"num_gpu_blocks=-\d+|# (?:GPU|cuda|CUDA) blocks: (?:0|-\d+),"), lambda m, msg: {"blocks": m.group(0)}),
    _S(Kind.NO_CACHE_BLOCKS, ("No available memory for the cache blocks", "Not enough memory. Please try to increase --mem-fraction-static"),
       _R(r"No available memory for the cache blocks|Not enough memory\. Please try to increase --mem-fraction-static")),
    _S(Kind.FREE_MEMORY_LOW, ("on startup is less than desired GPU memory utilization",),
       _R(r"Free memory on device ?(\S*)? \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"),
       _free_low),
    _S(Kind.FREE_MEMORY_LOW, ("exceed the desired GPU memory utilization", "engine's budget after excluding"),
       _R(r"exceed the desired GPU memory utilization|less than the engine's budget after excluding"),
       lambda m, msg: {"variant": "external weights"}),
    _S(Kind.WARMUP_OOM, ("warming up sampler",), _R(r"out of memory occurred when warming up sampler(?: with (\d+) dummy requests)?"), _warmup),
    _S(Kind.WARMUP_OOM, ("Not enough memory to handle",), _R(r"Not enough memory to handle (\d+) prefill tokens"), _tgi_warmup),
    _S(Kind.LOAD_MODEL_OOM, ("Failed to load model - not enough GPU memory",), _R(r"Failed to load model - not enough GPU memory")),
    _S(Kind.PROFILING_ERROR, ("Error in memory profiling",), _R(r"Error in memory profiling")),
    # SGLang: "Decode out of memory happened" retracts requests (a preemption); "Prefill out of
    # memory" raises and kills the scheduler.
    _S(Kind.PREEMPTION, ("out of memory happened", "Retract requests"),
       _R(r"(?:Decode|Prefill) out of memory happened|KV cache pool is full\. Retract requests"),
       lambda m, msg: {"engine": "sglang", "mode": "retract"}),
    _S(Kind.KV_POOL_OOM, ("out of memory",), _R(r"\b(Prefill|Decode) out of memory(?!\s+happened)"), _kv_pool),
    _S(Kind.KV_POOL_OOM, ("No usable cache memory left", "No free blocks are available"),
       _R(r"No usable cache memory left|Out of memory! No free blocks are available"),
       lambda m, msg: {"engine": "vllm", "stage": "block allocation"}),
    # The allocator's message with its numbers.
    _S(Kind.TORCH_OOM, ("out of memory", "Out of memory"), OOM_START, _torch_oom),
    # Raw CUDA/driver OOMs (no allocator breakdown).
    _S(Kind.CUDA_OOM, _OOM_WORDS,
       _R(r"CUDA (?:error|driver error|runtime error|Error)[:\s]+out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED"
          r"|CUDA_ERROR_OUT_OF_MEMORY|memory mapping failed with OOM|Cuda failure \d* ?'out of memory'|OutOfMemoryError|CUDA out of memory\.?\s*$"
          r"|HIP out of memory|hipErrorOutOfMemory|out of memory\s+\S+\.(?:h|cc|cu|cpp):\d+|cudaMalloc failed: out of memory"
          r"|cudaMalloc(?:Async)? (?:retry )?failed|CUDA_ERROR_OUT_OF_MEMORY")),
    _S(Kind.CUDA_ERROR, ("CUDA error", "CUBLAS_STATUS", "CUDNN_STATUS", "device-side assert"),
       _R(r"(CUDA error: (?!out of memory)[^.\n]+|CUBLAS_STATUS_(?!ALLOC_FAILED)\w+|CUDNN_STATUS_\w+|device-side assert triggered)"), _cuda_error),
    _S(Kind.HOST_MEMORY_GROWTH, ("RSS", "anon growth"),
       _R(r"\+\s*([\d.]+)\s*([KMGT]i?B)\s+RSS|net anon growth:\s*\+?([\d.]+)\s*([KMGT]i?B)"),
       lambda m, msg: {"delta_bytes": size_from(m.group(1) or m.group(3), m.group(2) or m.group(4))}),
    # Engine failure wrappers.
    _S(Kind.ENGINE_START_FAILED, ("failed to start", "initialization failed"),
       _R(r"EngineCore failed to start|Engine core initialization failed|Engine process failed to start|Shard \d+ failed to start|Failed core proc")),
    _S(Kind.ENGINE_DEAD, ("EngineCore encountered", "DeadError", "Engine loop is not running", "Background loop has errored",
                          "output_handler failed", "Engine background task failed", "Task finished unexpectedly"),
       _R(r"EngineCore encountered a fatal error|EngineCore encountered an issue|(?:MQ|Async)?EngineDeadError|Engine loop is not running"
          r"|Background loop has errored|AsyncLLM output_handler failed|Engine background task failed|Task finished unexpectedly")),
    # Configuration and sizing.
    _S(Kind.LAUNCH_CONFIG, ("LLM engine",),
       _R(r"Initializing an? (?:(?P<mode>V[01]) )?LLM engine(?: \(v(?P<version>[\w.+-]+)\))? with config: (?P<config>.*)"), _config_line),
    _S(Kind.LAUNCH_CONFIG, ("non-default args",), _R(r"non-default args: (\{.*\})"), _non_default),
    _S(Kind.LAUNCH_CONFIG, ("Namespace(",), _R(r"args: Namespace\((.*)\)"), _namespace),
    _S(Kind.LAUNCH_CONFIG, ("vllm serve", "vllm.entrypoints.openai.api_server"), _SERVE_CMD, _command_line),
    _S(Kind.LAUNCH_CONFIG, ("server_args=ServerArgs(",), _R(r"server_args=ServerArgs\((.*)\)"), _sglang_args),
    _S(Kind.LAUNCH_CONFIG, ("Args {",), _R(r"Args \{(.*)\}"), _tgi_args),
    _S(Kind.ENGINE_VERSION, ("server version",),
       _R(r"vLLM (?:API )?server version:? v?(?P<version>[\w.+-]+)"), lambda m, msg: {"engine": "vllm", "version": m.group("version")}),
    _S(Kind.WEIGHTS_LOADED, ("weights took", "Model loading took"),
       _R(r"(?:Loading model weights took|Model loading took) ([\d.]+) ?(?:GiB|GB)"), _weights),
    _S(Kind.MEMORY_PROFILE, ("Memory profiling results",), _R(r"Memory profiling results"), _profile_pairs),
    _S(Kind.MEMORY_PROFILE, ("x gpu_memory_utilization",),
       _R(r"total_gpu_memory \(([\d.]+)GiB\) x gpu_memory_utilization \(([\d.]+)\) = ([\d.]+)GiB"), _profile_budget),
    _S(Kind.MEMORY_PROFILE, ("the rest of the memory reserved for KV Cache",),
       _R(r"model weights take ([\d.]+)GiB; non_torch_memory takes ([\d.]+)GiB; PyTorch activation peak memory takes ([\d.]+)GiB; the rest of the memory reserved for KV Cache is ([\d.]+)GiB"),
       _profile_split),
    _S(Kind.MEMORY_PROFILE, ("on startup. Desired GPU memory utilization",),
       _R(r"Free memory on device \S* ?\(([\d.]+)/([\d.]+) GiB\) on startup\. Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)"),
       _breakdown),
    _S(Kind.KV_CAPACITY, ("blocks:",), _R(r"# (?:GPU|gpu|cuda|CUDA|\w+) blocks: (\d+), # CPU blocks: (\d+)"),
       lambda m, msg: {"blocks": int(m.group(1)), "cpu_blocks": int(m.group(2))}),
    _S(Kind.KV_CAPACITY, ("KV cache size:",), _R(r"KV cache size: ([\d,]+) tokens"), lambda m, msg: {"kv_tokens": _int(m.group(1))}),
    _S(Kind.KV_CAPACITY, ("max_total_num_tokens=",), _R(r"max_total_num_tokens=(\d+)"), lambda m, msg: {"kv_tokens": int(m.group(1)), "engine": "sglang"}),
    _S(Kind.MAX_CONCURRENCY, ("Maximum concurrency for",), _R(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
       lambda m, msg: {"tokens_per_request": _int(m.group(1)), "concurrency": float(m.group(2))}),
    _S(Kind.AVAILABLE_KV_MEMORY, ("Available KV cache memory",), _R(r"Available KV cache memory: ([\d.]+) GiB"),
       lambda m, msg: {"kv_cache_bytes": _gib(m.group(1))}),
    _S(Kind.GRAPH_CAPTURE, ("Graph capturing finished",), _R(r"Graph capturing finished in (\d+) secs(?:, took ([\d.]+) GiB)?"),
       lambda m, msg: {"seconds": int(m.group(1)), "graph_bytes": _gib(m.group(2))}),
    _S(Kind.STARTUP_BEGIN, ("Starting to load model", "Loading safetensors checkpoint shards:   0%", "Load weight begin"),
       _R(r"Starting to load model|Loading safetensors checkpoint shards:\s+0%|Load weight begin")),
    _S(Kind.STARTUP_STEP, ("Capturing", "Capture cuda graph", "Memory profiling takes", "Compile and warming up",
                           "torch.compile takes", "Dynamo bytecode transform", "Loading weights took",
                           "Using model weights format", "checkpoint shards", "Warming up", "warmup"),
       _R(r"Capturing the model for CUDA graphs|Capturing CUDA graph|Capture cuda graph|Memory profiling takes"
          r"|Compile and warming up model|torch\.compile takes|Dynamo bytecode transform time|Loading weights took"
          r"|Using model weights format|Loading (?:safetensors|pt) checkpoint shards|Warming up model|[Ww]armup (?:started|begin)"),
       lambda m, msg: {"step": m.group(0)}),
    _S(Kind.STARTUP_STEP, ("llm_load_tensors", "llama_new_context_with_model", "llama_kv_cache_init", "llama_model_load",
                           "waiting for llama runner", "starting llama server"),
       _R(r"^(?:llm_load_tensors|llama_new_context_with_model|llama_kv_cache_init|llama_model_load)\b|waiting for llama runner|starting llama server"),
       lambda m, msg: {"step": m.group(0), "engine": "llama.cpp"}),
    _S(Kind.ENGINE_START_FAILED, ("error loading", "failed to load model", "llama runner process has terminated"),
       _R(r"error loading (?:llama server|model)|failed to load model|llama runner process has terminated"),
       lambda m, msg: {"engine": "llama.cpp"}),
    _S(Kind.WEIGHTS_LOADED, ("Load weight end",), _R(r"Load weight end\..*?mem usage=([\d.]+) GB"),
       lambda m, msg: {"weights_bytes": gib(float(m.group(1))), "engine": "sglang"}),
    _S(Kind.KV_CAPACITY, ("KV Cache is allocated",), _R(r"KV Cache is allocated\. #tokens: (\d+)"),
       lambda m, msg: {"kv_tokens": int(m.group(1)), "engine": "sglang"}),
    _S(Kind.STARTUP_COMPLETE, ("init engine", "Starting vLLM server on", "Starting vLLM API server", "Application startup complete", "Uvicorn running on",
                               "Available routes are", "fired up and ready", "Connected",
                               "llama runner started"),
       _R(r"init engine \(profile, create kv cache, warmup model\) took|Starting vLLM (?:API )?server (?:\d+ )?on|Application startup complete"
          r"|Uvicorn running on|Available routes are|The server is fired up and ready to roll|^Connected$"
          r"|llama runner started in")),
    _S(Kind.STATS, ("Avg prompt throughput", "Prefix cache hit rate: GPU"),
       _R(r"Avg prompt throughput|Prefix cache hit rate: GPU"), _stats),
    _S(Kind.STATS, ("batch.",), _R(r"\b(Prefill|Decode) batch\.?"), _sglang_stats),
    # V1 crash dump: "Dumping scheduler stats: SchedulerStats(num_running_reqs=.., kv_cache_usage=0.97, ...)"
    _S(Kind.STATS, ("SchedulerStats(",), _R(r"SchedulerStats\((.*)"), _scheduler_dump),
    _S(Kind.PREEMPTION, ("is preempted by",),
       _R(r"is preempted by PreemptionMode\.(\w+) mode because there is not enough KV cache space.*?total_num_cumulative_preemption=(\d+)"),
       lambda m, msg: {"mode": m.group(1), "cumulative": int(m.group(2))}),
    _S(Kind.SLEEP_MEMORY, ("memory is still in use",), _R(r"([\d.]+) GiB memory is still in use"), _sleep),
    _S(Kind.REQUEST_SERVED, ("[GIN]",), _R(r"\[GIN\][^|]*\|\s*(\d{3})\s*\|.*\|\s*(GET|POST|PUT|DELETE)\s+\"([^\"]+)\""),
       lambda m, msg: {"client": None, "method": m.group(2), "path": m.group(3), "status": int(m.group(1))}),
    _S(Kind.REQUEST_SERVED, ("text_generation_router::server",), _R(r"text_generation_router::server: \S+: Success$"),
       lambda m, msg: {"client": None, "method": "POST", "path": "/generate", "status": 200}),
    _S(Kind.REQUEST_FAILED, ("Request failed during generation", "batch{"),
       _R(r"Request failed during generation|batch\{[^}]*\}:(?:prefill|decode)"), lambda m, msg: {"engine": "tgi"}),
    _S(Kind.REQUEST_SERVED, ('HTTP/',),
       _R(r"([\w.:\[\]]+):\d+ - \"(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) (\S+) HTTP/[\d.]+\" (\d{3})"), _access),
)

#: Continuation lines of a multi-line SGLang pool OOM ("Available full tokens: ...").
# SGLang prints the pool state after a prefill OOM, in several wordings over versions:
#   "Available full tokens: 320512 (full_available_size=192 + full_evictable_size_=320320)"
#   "Available tokens: 201344" / "self.token_to_kv_pool_allocator.available_size()=1152" /
#   "self.tree_cache.evictable_size()=200192"
POOL_FIELDS = (
    ("available_tokens", re.compile(r"Available (?:full )?tokens: (\d+)")),
    ("free_tokens", re.compile(r"available_size(?:\(\))?=(\d+)")),
    ("evictable_tokens", re.compile(r"evictable_size_?(?:\(\))?=(\d+)")),
)


def pool_detail(text: str) -> Fields:
    out: Fields = {}
    for key, rx in POOL_FIELDS:
        m = rx.search(text)
        if m:
            out[key] = int(m.group(1))
    return out

# The guards present in a message select the signatures worth trying. Plain substring tests
# (C-speed) beat one big regex alternation, which Python's engine scans slowly.
_BY_GUARD: dict[str, list[int]] = {}
for _i, _sig in enumerate(SIGNATURES):
    for _g in _sig.guards:
        _BY_GUARD.setdefault(_g, []).append(_i)
_GUARDS = tuple(_BY_GUARD.items())


def _candidates(msg: str) -> list[int]:
    found: set[int] = set()
    for guard, indexes in _GUARDS:
        if guard in msg:
            found.update(indexes)
    return sorted(found)


def match_message(msg: str) -> list[tuple[Kind, Fields]]:
    """Every signature the message matches, most specific first."""
    candidates = _candidates(msg)
    if not candidates:
        return []
    out: list[tuple[Kind, Fields]] = []
    seen: set[Kind] = set()
    for i in candidates:
        sig = SIGNATURES[i]
        if sig.kind in seen:
            continue
        m = sig.pattern.search(msg)
        if not m:
            continue
        fields = sig.extract(m, msg) if sig.extract is not None else {}
        if fields is None:
            continue
        out.append((sig.kind, fields))
        seen.add(sig.kind)
        if sig.final:
            break
    # One failure line is one failure: the specific start-up checks and the allocator message
    # already say "GPU OOM"; a raw CUDA_OOM on the same line adds nothing.
    kinds = {k for k, _ in out}
    if Kind.CUDA_OOM in kinds and kinds & {Kind.TORCH_OOM, Kind.WARMUP_OOM, Kind.KV_POOL_OOM, Kind.LOAD_MODEL_OOM}:
        out = [(k, f) for k, f in out if k != Kind.CUDA_OOM]
    return out
