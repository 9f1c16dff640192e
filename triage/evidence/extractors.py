"""The Python extractors that signature entries name with `extract:` (triage/data/signatures.yaml).

Only what a field table cannot say lives here: the torch OOM message, launch configurations
(config lines, argv, argument dumps), the stats lines with their label vocabulary, and a few
messages whose fields come from alternative groups. Each extractor takes the pattern's match and
the whole message and returns the fields (or None: "this line is not the message after all").
"""
from __future__ import annotations

import ast
import math
import re
import shlex
from typing import Any, Callable

from ..units import MAX_DIGITS, finite_float, gib, note_dropped, size_from, whole
from .torch_oom import parse_torch_oom

Fields = dict[str, Any]
Extractor = Callable[[re.Match[str], str], "Fields | None"]


# Numbers in log lines go through units' helpers: `5135..4`, `1e999` or 5,000 digits become None
# (noted as dropped), never an exception or an infinity.
def _num(s: str | None) -> float | None:
    return finite_float(s) if s else None


def _int(s: str | None) -> int | None:
    return whole(s) if s else None


def _gib(s: str | None) -> int | None:
    return gib(s) if s else None


def _need(fields: Fields, *keys: str) -> Fields | None:
    """The fields, or None (no match) when a number the record exists for could not be read."""
    return None if any(fields.get(k) is None for k in keys) else fields


# --- launch configuration --------------------------------------------------------------------

# `(?<!\w)`: a key is read from the start of its word only, so a long word costs linear time.
_KV_PAIR = re.compile(r"(?<!\w)(\w+)=((?:'[^']*'|\"[^\"]*\"|\{[^{}]*\}|\([^()]*\)|[^,\s)]+))")


def parse_config_pairs(text: str) -> Fields:
    """`model='x', max_seq_len=4096, enforce_eager=False` -> typed dict (best effort)."""
    out: Fields = {}
    for key, raw in _KV_PAIR.findall(text):
        out[key] = literal(raw)
    return out


def literal(raw: str) -> Any:
    """A Python literal as logged (`0.9`, `'m'`, `(1, 2)`); the text itself when it is none.
    None when it holds a number no setting can have (`1e999`, `nan`, 40 digits): dropped, noted."""
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return raw.strip("'\"")
    if not _usable(value):
        note_dropped(raw)
        return None
    return value


def _usable(value: Any) -> bool:
    """No non-finite float and no integer past MAX_DIGITS anywhere in a literal."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, complex):
            return False
        elif isinstance(item, float) and not math.isfinite(item):
            return False
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10 ** MAX_DIGITS:
            return False
    return True


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
    pairs = dict(re.findall(r"(?<!\w)(\w+): (Some\((?:(?!Some\()[^)])*\)|\"[^\"]*\"|[\w.]+)", m.group(1)))
    args = {k: literal(v[5:-1] if v.startswith("Some(") else v) for k, v in pairs.items()}
    return {"engine": "tgi", "args": args, "origin": "launcher args"}


# --- start-up sizing -------------------------------------------------------------------------

def _weights(m: re.Match[str], msg: str) -> Fields:
    # vLLM labels GiB values "GB" in several versions (the value is bytes / 2**30).
    return _need({"weights_bytes": _gib(m.group(1))}, "weights_bytes")


def _profile_pairs(m: re.Match[str], msg: str) -> Fields:
    fields: Fields = {}
    # Values may be negative (kv_cache_size=-4.71GiB: nothing left) and the line ends with ".".
    for key, val, unit in re.findall(r"(?<!\w)(\w+)=(-?\d+(?:\.\d+)?)(GiB)?", msg):
        number = _gib(val) if unit else _num(val)
        if number is not None:
            fields[key + ("_bytes" if unit else "")] = number
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
        mm = re.search(r"(?<![\d.])([\d.]+) GiB " + re.escape(label), msg)
        if mm:
            f[key] = _gib(mm.group(1))
    kv = re.search(r"Current kv cache memory in use is ([\d.]+) GiB", msg)
    if kv:
        f["kv_cache_bytes"] = _gib(kv.group(1))
    return f


# --- serving -----------------------------------------------------------------------------------

# "Label: number" parts of the V0/V1 stats lines, read in one pass.
_STATS_PART = re.compile(r"(?<![A-Za-z +])[ +]*([A-Za-z][A-Za-z +]*?): (?:GPU: )?([\d.]+)")
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
        number = _num(value) if key and key not in out else None
        if key and number is not None:
            out[key] = number
    for pct in ("kv_usage", "cpu_kv_usage", "prefix_hit_rate"):
        if pct in out:
            out[pct] = out[pct] / 100.0
    return out if len(out) > 1 else None


def _scheduler_dump(m: re.Match[str], msg: str) -> Fields | None:
    out: Fields = {"engine": "vllm", "crash_dump": True}
    for key, field in (("num_running_reqs", "running"), ("num_waiting_reqs", "waiting"), ("kv_cache_usage", "kv_usage"),
                       ("gpu_cache_usage", "kv_usage")):
        mm = re.search(rf"\b{key}=([\d.]+)", m.group(1))
        if mm and field not in out and _num(mm.group(1)) is not None:
            out[field] = _num(mm.group(1))
    return out if len(out) > 2 else None


def _sglang_stats(m: re.Match[str], msg: str) -> Fields:
    out: Fields = {"engine": "sglang", "batch": m.group(1).lower()}
    for key, pat in (("running", r"#running-req: (\d+)"), ("waiting", r"#queue-req: (\d+)"),
                     ("kv_usage", r"token usage: ([\d.]+)"), ("prefix_hit_rate", r"cache hit rate: ([\d.]+)%"),
                     ("new_tokens", r"#new-token: (\d+)"), ("generation_tps", r"gen throughput \(token/s\): ([\d.]+)")):
        mm = re.search(pat, msg)
        if mm and _num(mm.group(1)) is not None:
            out[key] = _num(mm.group(1))
    if "prefix_hit_rate" in out:
        out["prefix_hit_rate"] /= 100.0
    return out


def _access(m: re.Match[str], msg: str) -> Fields:
    return {"client": m.group(1), "method": m.group(2), "path": m.group(3), "status": int(m.group(4))}


# --- failures ----------------------------------------------------------------------------------

def _torch_oom(m: re.Match[str], msg: str) -> Fields | None:
    return parse_torch_oom(msg)


def _kv_v0(m: re.Match[str], msg: str) -> Fields:
    return {"max_model_len": _int(m.group(1)), "kv_tokens": _int(m.group(2)), "estimated_max_model_len": _int(m.group(2))}


def _kv_v1(m: re.Match[str], msg: str) -> Fields:
    est = re.search(r"estimated maximum model length is (\d+)", msg)
    return {"max_model_len": _int(m.group(1)), "needed_bytes": size_from(m.group(2), m.group(3), gb_is_gib=True),
            "available_bytes": size_from(m.group(4), m.group(5), gb_is_gib=True),
            "estimated_max_model_len": _int(est.group(1)) if est else None}


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
        f["requested_tokens"] = _int(tokens.group(1))
    return f



def _host_kill(m: re.Match[str], msg: str) -> Fields:
    gd = m.groupdict()
    f: Fields = {"pid": _int(gd.get("pid")), "process": gd.get("comm")}
    rss = re.search(r"anon-rss:(\d+)kB", msg)
    if rss:
        kib = _int(rss.group(1))
        f["anon_rss_bytes"] = kib * 1024 if kib is not None else None
    f["cgroup"] = "Memory cgroup" in msg or "task_memcg" in msg and "constraint=CONSTRAINT_MEMCG" in msg
    return f


def _xid(m: re.Match[str], msg: str) -> Fields:
    return {"pci": m.group(1), "code": _int(m.group(2)), "detail": m.group(3)}




def _sleep(m: re.Match[str], msg: str) -> Fields:
    freed = re.search(r"freed ([\d.]+) GiB", msg)
    return {"in_use_bytes": _gib(m.group(1)), "freed_bytes": _gib(freed.group(1)) if freed else None}


def _cuda_error(m: re.Match[str], msg: str) -> Fields:
    return {"error": m.group(1).strip()}


# --- extractors named by data entries that have no older Python twin ---------------------------

def _host_kill_entry(m: re.Match[str], msg: str) -> Fields:
    gd = m.groupdict()
    return {**_host_kill(m, msg), "pid": _int(gd.get("pid") or gd.get("pid2") or gd.get("tpid")),
            "process": gd.get("comm") or gd.get("comm2") or gd.get("task")}


def _oom_killed(m: re.Match[str], msg: str) -> Fields:
    return {"reason": "OOMKilled" if "OOMKilled" in msg else "exit 137 (SIGKILL)"}


def _child_killed(m: re.Match[str], msg: str) -> Fields:
    gd = m.groupdict()
    # each wording of the kill names the process in its own group: name, name2, name3, ...
    process = next((value for key, value in gd.items() if key.startswith("name") and value), None)
    return {"process": process, "exit_code": -9}


def _rss_growth(m: re.Match[str], msg: str) -> Fields:
    return {"delta_bytes": size_from(m.group(1) or m.group(3), m.group(2) or m.group(4))}


def _tgi_capacity(m: re.Match[str], msg: str) -> Fields | None:
    gd = m.groupdict()
    if gd.get("blocks"):
        return {"blocks": int(gd["blocks"]), "block_size": int(gd["bs"]),
                "kv_tokens": int(gd["blocks"]) * int(gd["bs"])}
    tokens = gd.get("tokens") or gd.get("tokens2")
    return {"kv_tokens": int(tokens)} if tokens else None


def _launcher_decision(m: re.Match[str], msg: str) -> Fields:
    """A launcher line that states one resolved setting (TGI's "Using prefix caching = true")."""
    on = m.group("on").lower() in ("true", "1")
    return {"args": {"enable_prefix_caching": on}, "origin": "launcher decision"}


def _slot_prompt(m: re.Match[str], msg: str) -> Fields | None:
    """llama-server's new-prompt line: the request's size against its slot's context."""
    ctx, tokens = whole(m.group("ctx")), whole(m.group("tokens"))
    if not ctx or tokens is None:
        return None
    return {"engine": "llama.cpp", "request_tokens": tokens, "context_tokens": ctx, "request_share": tokens / ctx}


EXTRACTORS: dict[str, Extractor] = {
    "host_kill": _host_kill_entry, "oom_killed": _oom_killed, "child_killed": _child_killed,
    "rss_growth": _rss_growth, "kv_v1": _kv_v1, "kv_pool": _kv_pool, "torch_oom": _torch_oom,
    "config_line": _config_line, "non_default": _non_default, "namespace": _namespace,
    "command_line": _command_line, "sglang_args": _sglang_args, "tgi_args": _tgi_args,
    "profile_pairs": _profile_pairs, "breakdown": _breakdown, "stats": _stats, "sglang_stats": _sglang_stats,
    "scheduler_dump": _scheduler_dump, "sleep": _sleep, "access": _access, "tgi_capacity": _tgi_capacity,
    "launcher_decision": _launcher_decision, "slot_prompt": _slot_prompt,
}
