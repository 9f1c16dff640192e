"""Seeds of every input kind, mutations of them, and the library entry points they go through.

Shared by the property-based test (tests/test_fuzz_inputs.py, hypothesis picks the mutations)
and the long standalone run (benchmarks/fuzz_inputs.py, a seeded random generator picks them).
A mutation is data: (operation, a, b) with small non-negative integers, so both drivers describe
the same space and a failure prints as a list that can be replayed with `apply`.

The only exception an entry point may raise is `TriageError` (one clear line at the CLI).
"""
from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
TESTS = ROOT / "tests"

SEED_BYTES = 12 * 1024      # long sample logs are cut to their head and tail: mutations land near lines that matter


@dataclass(frozen=True)
class Seed:
    kind: str          # "log_v0", "metrics", "incident_yaml", ...
    name: str          # file name it is written under (some kinds are recognised by name)
    data: bytes
    where: str         # "file": classified alone; "bundle": a bundle member (incident.yaml, notes.jsonl...)


def _cut(data: bytes, limit: int = SEED_BYTES) -> bytes:
    if len(data) <= limit:
        return data
    head, tail = data[: limit // 3], data[-(2 * limit) // 3:]
    return head[: head.rfind(b"\n") + 1] + tail[tail.find(b"\n") + 1:]


def _read(rel: str) -> bytes:
    path = ROOT / rel
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _corpus_logs() -> list[bytes]:
    """The `log:` excerpts of the labelled corpora: vLLM V0/V1, SGLang, TGI, llama.cpp, Ollama..."""
    out = []
    for folder in ("corpus", "corpus_synthetic"):
        for path in sorted((TESTS / folder).glob("*.yaml")):
            case = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(case, dict) and isinstance(case.get("log"), str):
                out.append(case["log"].encode("utf-8"))
    return out


def _memory_stats_jsonl() -> bytes:
    doc = json.loads(_read("tests/real_gpu/h100/oom-simple/memory_stats.json"))
    stats = doc if isinstance(doc, dict) else doc[0]
    return b"".join(json.dumps({"time": f"2026-03-12T14:1{i}:00Z", "device": 0, "memory_stats": stats}).encode() + b"\n"
                    for i in range(3))


def _json_log() -> bytes:
    lines = [{"asctime": "2026-03-12 14:17:03,120", "levelname": "INFO", "name": "vllm.engine", "process": 412,
              "message": "Avg prompt throughput: 1523.4 tokens/s, Running: 28 reqs, GPU KV cache usage: 97.5%"},
             {"time": "2026-03-12T14:17:05Z", "level": "error", "msg": "CUDA out of memory. Tried to allocate 2.00 GiB. "
              "GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free."},
             {"log": "ERROR 03-12 14:17:06 [core.py:343] EngineCore encountered a fatal error.\n",
              "stream": "stderr", "time": "2026-03-12T14:17:06.1Z"}]
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def seeds() -> list[Seed]:
    from tests.evidence.test_alertmanager import WEBHOOK
    from tests.evidence.test_kubernetes import EVENTS
    from tests.evidence.test_nvidia_smi import APPS
    from tests.evidence.test_prometheus import DCGM, V1

    out = [
        Seed("log_v0", "vllm.log", _cut(_read("samples/burst-long-prompts-v0/logs/vllm.log")), "file"),
        Seed("log_v1", "vllm.log", _cut(_read("samples/startup-kv-blowout-v1/logs/vllm.log")), "file"),
        Seed("log_fleet", "gpu-node-07.log", _cut(_read("samples/incident-a-multimodal-fleet/logs/gpu-node-07.log")), "file"),
        Seed("log_gz", "vllm.log.gz", gzip.compress(_cut(_read("samples/prefix-cache-oom-b/logs/vllm.log.gz"))), "file"),
        Seed("log_json", "server.jsonl", _json_log(), "file"),
        Seed("metrics", "2024-10-17T14-40-00Z.prom", _read("samples/prefix-cache-oom-b/metrics/2024-10-17T14-40-00Z.prom"), "file"),
        Seed("metrics_v1", "scrape.prom", V1, "file"),
        Seed("metrics_dcgm", "dcgm.prom", DCGM, "file"),
        Seed("memory_stats", "memory_stats.json", _read("samples/chronic-fragmentation/torch/memory_stats.json"), "file"),
        Seed("memory_stats_jsonl", "memory_stats.jsonl", _memory_stats_jsonl(), "file"),
        Seed("memory_summary", "memory_summary.txt", _read("tests/real_gpu/h100/oom-simple/memory_summary.txt"), "file"),
        Seed("nvidia_smi_csv", "nvidia-smi.csv", _read("samples/prefix-cache-oom-b/gpu/nvidia-smi.csv"), "file"),
        Seed("nvidia_smi_apps", "apps.csv", APPS, "file"),
        Seed("nvidia_smi_table", "nvidia-smi.txt", _read("tests/real_gpu/h100/nvidia-smi.txt"), "file"),
        Seed("dmesg", "dmesg.txt", _read("samples/not-gpu-xid-fault/gpu/dmesg.txt"), "file"),
        Seed("pod", "pod.json", _read("samples/not-gpu-host-oom/k8s/pod.json"), "file"),
        Seed("events", "events.json", EVENTS.encode(), "file"),
        Seed("alerts", "2024-10-17T14-48-06Z.json", WEBHOOK.encode(), "file"),
        Seed("incident_yaml", "incident.yaml", _read("samples/prefix-cache-oom-b/incident.yaml"), "bundle"),
        Seed("notes", "notes.jsonl", _read("samples/prefix-cache-oom-b/notes.jsonl"), "bundle"),
        Seed("actions", "actions.jsonl", _read("samples/prefix-cache-oom-b/actions.jsonl"), "bundle"),
    ]
    out += [Seed("log_other", "server.log", _cut(log), "file") for log in _corpus_logs()]
    return out


# --- mutations ---------------------------------------------------------------------------------

# What a hostile or damaged input puts where a number was.
NUMBERS = (b"NaN", b"nan", b"Inf", b"+Inf", b"-Inf", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"1e-999",
           b"9" * 4301, b"9" * 400, b"18446744073709551616", b"-5", b"0", b"-0", b"5135..4", b"1.2.3", b"0x1F",
           b"1_000", b"\xd9\xa3", b"1e308", b"9" * 40)
DATES = (b"9999-12-31T23:59:59Z", b"9999-12-31T23", b"0000-01-01T00:00:00Z", b"0001-01-01T00:00:00-05:00",
         b"99999-01-01T00:00:00Z", b"9999-12-31T23:59:59-14:00", b"2026-02-30T25:61:61Z", b"1969-12-31T23:59:59Z")
NEST_SIZES = (40, 1000, 100_000)
LONG_LINES = (b"A", b"[rank0]: ", b"ERROR 03-12 14:17:03 [core.py:1] ", b"vllm:kv_cache_usage_perc ",
              b'  File "x.py", line ', b"\t", b"\xff", b"a=")
BAD_BYTES = (b"\xff\xfe", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\x1b[31m", b"\r", b"\xef\xbb\xbf",
             b"\x85", "\u2028".encode("utf-8"))
_NUMBER = re.compile(rb"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_DATE = re.compile(rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?")
OPS = ("flip", "truncate", "duplicate", "number", "date", "nest", "long_line", "bad_bytes", "delete", "swap_lines")

Mutation = tuple[str, int, int]


def _at(data: bytes, a: int) -> int:
    return a % (len(data) + 1)


def mutate(data: bytes, op: str, a: int, b: int, *, long_cap: int = 20_000) -> bytes:
    """One mutation; `a` and `b` pick positions, lengths and replacement values (taken modulo)."""
    if op == "flip":
        if not data:
            return b"\x80"
        i = a % len(data)
        return data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1:]
    if op == "truncate":
        return data[: _at(data, a)]
    if op == "duplicate":
        i = _at(data, a)
        span = data[i: i + 1 + b % 4096]
        return data[:i] + span * (2 + b % 3) + data[i:]
    if op == "delete":
        i = _at(data, a)
        return data[:i] + data[i + 1 + b % 256:]
    if op == "number":
        found = list(_NUMBER.finditer(data))
        value = NUMBERS[b % len(NUMBERS)]
        if not found:
            return data + b" " + value
        m = found[a % len(found)]
        return data[: m.start()] + value + data[m.end():]
    if op == "date":
        found = list(_DATE.finditer(data))
        value = DATES[b % len(DATES)]
        if not found:
            return value + b" " + data
        m = found[a % len(found)]
        return data[: m.start()] + value + data[m.end():]
    if op == "nest":
        n = NEST_SIZES[b % len(NEST_SIZES)]
        opener = (b"[", b'{"a":', b"- ", b"(")[(b // len(NEST_SIZES)) % 4]
        i = _at(data, a)
        return data[:i] + opener * n + data[i:]
    if op == "long_line":
        prefix = LONG_LINES[b % len(LONG_LINES)]
        i = _at(data, a)
        length = min(long_cap, 1000 * (1 + (b // len(LONG_LINES)) % 20))
        body = (b"9" if prefix.endswith(b"line ") else b"a") * length
        return data[:i] + b"\n" + prefix + body + b"\n" + data[i:]
    if op == "bad_bytes":
        i = _at(data, a)
        return data[:i] + BAD_BYTES[b % len(BAD_BYTES)] * (1 + b % 5) + data[i:]
    if op == "swap_lines":
        lines = data.split(b"\n")
        if len(lines) < 2:
            return data
        i, j = a % len(lines), b % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    raise ValueError(op)


def apply(seed: Seed, mutations: list[Mutation], *, long_cap: int = 20_000) -> bytes:
    """The seed's bytes after the mutations. Gzip seeds are mutated either inside (then
    recompressed) or as compressed bytes (a corrupt stream), by the first mutation's `b` parity."""
    data = seed.data
    if seed.name.endswith(".gz") and mutations and mutations[0][2] % 2 == 0:
        inner = gzip.decompress(data)
        for op, a, b in mutations:
            inner = mutate(inner, op, a, b, long_cap=long_cap)
        return gzip.compress(inner, compresslevel=1)
    for op, a, b in mutations:
        data = mutate(data, op, a, b, long_cap=long_cap)
    return data


# --- entry points ------------------------------------------------------------------------------

def classify_file(path: Path) -> str:
    """What `triage classify FILE --json` and `--explain` do; returns the parser names used."""
    from triage.api import classify_paths
    from triage.console import Console, render_verdict
    from triage.report import to_json

    verdict, evidence = classify_paths([str(path)])
    json.dumps(to_json(verdict), allow_nan=False)          # --json never prints NaN or Infinity
    render_verdict(verdict, evidence, explain=True, console=Console(file=io.StringIO(), width=100))
    return ",".join(sorted({s.kind for s in evidence.sources})) or "-"


def bundle_commands(root: Path) -> str:
    """What `triage classify BUNDLE`, `triage timeline BUNDLE --json` and `triage postmortem` do."""
    from triage.errors import TriageError
    from triage.postmortem import render_postmortem
    from triage.timeline import build_timeline
    from triage.timeline.render import to_csv, to_json as timeline_json

    try:
        classify_file(root)
    except TriageError:
        pass          # a bundle whose evidence is refused may still have a timeline
    timeline = build_timeline(root)
    json.dumps(timeline_json(timeline), allow_nan=False)
    to_csv(timeline)
    render_postmortem(root)
    return "bundle"


def make_bundle(parent: Path, member: Seed, data: bytes) -> Path:
    """A small bundle (incident.yaml, a log, notes, an audit log) with `member` replaced by `data`."""
    root = parent / "bundle"
    if root.exists():
        shutil.rmtree(root)
    (root / "logs").mkdir(parents=True)
    src = SAMPLES / "prefix-cache-oom-b"
    for name in ("incident.yaml", "notes.jsonl", "actions.jsonl"):
        shutil.copy(src / name, root / name)
    (root / "logs" / "vllm.log").write_bytes(_cut(_read("samples/prefix-cache-oom-b/logs/vllm.log.gz"), 6000))
    (root / member.name).write_bytes(data)
    return root


def run_one(seed: Seed, data: bytes, workdir: Path) -> str:
    """Feed one mutated input through its entry points; returns the parsers (or "bundle") used."""
    if seed.where == "bundle":
        return bundle_commands(make_bundle(workdir, seed, data))
    path = workdir / seed.name
    path.write_bytes(data)
    try:
        return classify_file(path)
    finally:
        path.unlink()


def by_kind() -> dict[str, list[Seed]]:
    """Seeds grouped by kind: a driver picks the kind first, so the many corpus logs do not
    crowd out the kinds that have one sample."""
    out: dict[str, list[Seed]] = {}
    for seed in seeds():
        out.setdefault(seed.kind, []).append(seed)
    return out


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="triage-fuzz-"))

