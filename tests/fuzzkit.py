"""Seeds of every input kind, mutations of them, and what they are run through: the library's
entry points, and whole cases (a file, a bundle directory, a .tar.gz or .zip bundle with hostile
member names) through the CLI's commands.

Shared by the tests (tests/test_fuzz_inputs.py: hypothesis picks the mutations for the library
entry points; fixed cases go through the CLI) and the long standalone run
(benchmarks/fuzz_inputs.py, cases drawn from a run seed). A mutation is data: (operation, a, b)
with small non-negative integers, so every driver describes the same space and a failure prints
as a list that can be replayed with `apply`; a CLI case is fully determined by (run seed, index).

The only exception a library entry point may raise is `TriageError` (one clear line at the CLI);
the CLI never prints "internal error", its --json output always parses, and nothing it reads is
written anywhere.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import shutil
import stat
import tarfile
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
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
# A JSON value of another type where a field's value was: `"step": "drain"` -> `"step": {"x": 1}`.
RETYPED = (b'{"x": 1}', b"[1, 2]", b"true", b"false", b"null", b"3", b"-2.5", b'"s"', b"{}", b"[]", b'""')
_VALUE = re.compile(rb'(?<=":)\s*(?:"(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)')
_YAML_VALUE = re.compile(rb"(?m)(?<=:)[ \t]+[^\s#{\[][^\n]*$")           # `key: value` in incident.yaml
_NUMBER = re.compile(rb"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_DATE = re.compile(rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?")
OPS = ("flip", "truncate", "duplicate", "number", "date", "nest", "long_line", "bad_bytes", "delete", "swap_lines",
       "retype")

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
    if op == "retype":
        found = sorted([*_VALUE.finditer(data), *_YAML_VALUE.finditer(data)], key=lambda m: m.start())
        value = RETYPED[b % len(RETYPED)]
        if not found:
            return data
        m = found[a % len(found)]
        return data[: m.start()] + b" " + value + data[m.end():]
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
    (root / member.name).parent.mkdir(parents=True, exist_ok=True)
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



# --- whole inputs through the CLI ----------------------------------------------------------------
#
# The long run and the suite's CLI test feed each mutated input to the commands a user runs, in
# process through click's CliRunner, and judge what came out: the one-line "internal error" the
# CLI prints for an exception it did not expect, stdout of --json that is not JSON, a file
# created outside the case's own folder. A case is fully determined by (run seed, index), so any
# finding replays alone.

#: name -> the arguments after `triage`; {path} is the input, {out} the case's output folder.
COMMANDS: dict[str, tuple[str, ...]] = {
    "classify": ("classify", "{path}"),
    "classify --json": ("classify", "--json", "{path}"),
    "classify --json -": ("classify", "--json", "-"),
    "timeline": ("timeline", "{path}"),
    "timeline --json": ("timeline", "--json", "{path}"),
    "timeline --csv": ("timeline", "--csv", "{path}"),
    "postmortem": ("postmortem", "{path}", "-o", "{out}/postmortem.md"),
    "recover": ("recover", "{path}"),
    "recover --json": ("recover", "--json", "{path}"),
}
FILE_COMMANDS = ("classify", "classify --json", "classify --json -")
BUNDLE_COMMANDS = ("classify", "classify --json", "timeline", "timeline --json", "timeline --csv", "postmortem",
                   "recover", "recover --json")
#: Exit codes after which a --json command has printed its document: classify's verdict (3 is the
#: class `unknown`), the others' result. Other exits are one line on stderr; stdout, if any, is JSON.
JSON_EXITS = {"classify": (0, 3), "timeline": (0,), "recover": (0,)}

BUNDLE_KINDS = ("incident_yaml", "notes", "actions")          # the seeds that are bundle members
ARCHIVE_KINDS = ("archive_tar", "archive_zip")
MEMBER_KIND = "bundle_member"                                  # any evidence file, inside a bundle
# Where `triage collect` puts each evidence kind in a bundle.
FOLDERS = (("log", "logs"), ("metrics", "metrics"), ("memory", "torch"), ("nvidia_smi", "gpu"), ("dmesg", "gpu"),
           ("pod", "k8s"), ("events", "k8s"), ("alerts", "alerts"))

ESCAPE_PREFIX = "triage-fuzz-escape-"
VICTIM = "victim"               # a file in the sentinel folder that links in an archive point at


@dataclass(frozen=True)
class Hostile:
    """An archive member a careful reader refuses: {s} is the sentinel folder's absolute path."""
    name: str
    type: str = "file"          # file, dir, symlink, hardlink, fifo, chardev, dup
    target: str = ""            # a link's target


HOSTILE = (
    Hostile("INC/{s}/ESCAPED"),                        # INC//tmp/...: absolute once INC/ is cut off
    Hostile("{s}/ESCAPED"),
    Hostile("INC/../x"),
    Hostile("INC/" + "../" * 12 + "{r}/ESCAPED"),
    Hostile("INC\\..\\..\\x"),
    Hostile("INC\\logs\\vllm.log"),
    Hostile("INC\\" + "..\\" * 12 + "{rb}\\ESCAPED"),
    Hostile("C:foo"),
    Hostile("INC/C:foo"),
    Hostile("INC/C:\\{rb}\\ESCAPED"),
    Hostile("INC/logs/a\x00b.log"),
    Hostile("INC/notes.jsonl\x00/../../{r}/ESCAPED"),
    Hostile(""),
    Hostile("."),
    Hostile("INC/."),
    Hostile("./INC/./logs/extra.log"),
    Hostile("INC/logs/../../../{r}/ESCAPED"),
    Hostile("INC/", "dir"),
    Hostile("INC/../", "dir"),
    Hostile("INC/logs/link", "symlink", "{s}"),
    Hostile("INC/logs/link/ESCAPED"),                  # written through the link above, if it was made
    Hostile("INC/notes.jsonl", "symlink", "{s}/" + VICTIM),
    Hostile("INC/logs/hard.log", "hardlink", "{s}/" + VICTIM),
    Hostile("INC/logs/fifo.log", "fifo"),
    Hostile("INC/logs/tty.log", "chardev"),
    Hostile("INC/incident.yaml", "dup"),               # named twice, the later one different
    Hostile("INC/" + "a" * 300 + ".log"),
    Hostile("INC/~/ESCAPED"),
)
HOSTILE_BODY = b"ERROR 10-17 14:47:06 x.py:1] torch.OutOfMemoryError: CUDA out of memory. ESCAPED\n"


@dataclass(frozen=True)
class Case:
    """One input and the commands it goes through."""
    index: int
    kind: str                          # a seed kind, "bundle_member", "archive_tar" or "archive_zip"
    seed: Seed                         # what is mutated; in a bundle or archive, the member it replaces
    mutations: tuple[Mutation, ...]
    commands: tuple[str, ...]
    hostile: tuple[int, ...] = ()      # indices into HOSTILE (archives)
    raw: tuple[Mutation, ...] = ()     # mutations of the archive's own bytes
    top: bool = True                   # the archive holds INC/...; else its members are at the top

    def describe(self) -> str:
        extra = f" hostile={[HOSTILE[i].name for i in self.hostile]!r} raw={list(self.raw)}" if self.kind in \
            ARCHIVE_KINDS else ""
        return f"#{self.index} {self.kind} seed={self.seed.kind}/{self.seed.name} mutations={list(self.mutations)}{extra}"


@dataclass
class Run:
    """What one command did with one input."""
    command: str
    exit_code: int
    seconds: float
    internal_error: str | None = None     # the CLI's "internal error" line, or an exception click let through
    bad_json: str | None = None           # why stdout of a --json command is not JSON
    timed_out: bool = False


@dataclass
class Outcome:
    case: Case
    runs: list[Run] = field(default_factory=list)
    escaped: list[str] = field(default_factory=list)    # created or changed outside the case's folder
    stray: list[str] = field(default_factory=list)      # created in the case's folder beside the input
    left: list[str] = field(default_factory=list)       # temporary files not removed when the command ended


def case_kinds(kinds: dict[str, list[Seed]]) -> list[str]:
    """Every kind a case can be: each file kind, each bundle member, any file in a bundle, archives."""
    files = sorted(k for k, s in kinds.items() if s[0].where == "file")
    return files + list(BUNDLE_KINDS) + [MEMBER_KIND] + list(ARCHIVE_KINDS)


def _mutations(rng: random.Random) -> tuple[Mutation, ...]:
    return tuple((rng.choice(OPS), rng.randrange(1 << 20), rng.randrange(1 << 12)) for _ in range(rng.randint(1, 3)))


def make_case(run_seed: int, index: int, kinds: dict[str, list[Seed]], *, commands_per_bundle: int = 3) -> Case:
    """Case `index` of the run `run_seed`: the same pair always gives the same case. Inputs that
    are bundles go through `commands_per_bundle` of the bundle commands (a postmortem costs ten
    classifications); files through every file command."""
    rng = random.Random(run_seed * 1_000_003 + index)
    names = case_kinds(kinds)
    kind = rng.choice(names)
    files = [s for k in names if k in kinds and kinds[k][0].where == "file" for s in kinds[k]]
    if kind in kinds:
        seed = rng.choice(kinds[kind])
    elif kind == MEMBER_KIND:
        seed = rng.choice(files)
    else:                                              # an archive: of a bundle with one member mutated, or none
        seed = rng.choice(files + [s for k in BUNDLE_KINDS for s in kinds[k]])
    if seed.where == "file" and kind not in (MEMBER_KIND, *ARCHIVE_KINDS):
        commands = FILE_COMMANDS[:2] + (FILE_COMMANDS[2:] if rng.random() < 0.1 else ())
    else:
        commands = tuple(sorted(rng.sample(BUNDLE_COMMANDS, commands_per_bundle), key=BUNDLE_COMMANDS.index))
    if kind not in ARCHIVE_KINDS:
        return Case(index, kind, seed, _mutations(rng), commands)
    muts = _mutations(rng) if rng.random() < 0.5 else ()
    hostile = tuple(sorted(rng.sample(range(len(HOSTILE)), rng.randint(0, 3))))
    raw = _mutations(rng) if rng.random() < 0.15 else ()
    return Case(index, kind, seed, muts, commands, hostile, raw, top=rng.random() < 0.85)


# -- building the input --------------------------------------------------------------------------

def folder_for(seed: Seed) -> str:
    return next((folder for prefix, folder in FOLDERS if seed.kind.startswith(prefix)), "logs")


def build_input(case: Case, casedir: Path, sentinel: Path, *, long_cap: int = 20_000) -> Path:
    """Write the case's input into `casedir` and return the path the commands are given."""
    data = apply(case.seed, list(case.mutations), long_cap=long_cap) if case.mutations else case.seed.data
    if case.kind not in (MEMBER_KIND, *ARCHIVE_KINDS, *BUNDLE_KINDS):
        path = casedir / case.seed.name
        path.write_bytes(data)
        return path
    member = case.seed
    if member.where == "file":
        member = Seed(member.kind, f"{folder_for(member)}/{member.name}", member.data, "bundle")
    bundle = make_bundle(casedir, member, data)
    if case.kind not in ARCHIVE_KINDS:
        return bundle
    suffix = "tar.gz" if case.kind == "archive_tar" else "zip"
    out = casedir / f"INC.{suffix}"
    hostile = [HOSTILE[i] for i in case.hostile]
    (pack_tar if suffix == "tar.gz" else pack_zip)(bundle, out, hostile, sentinel, top=case.top)
    shutil.rmtree(bundle)
    if case.raw:
        raw = out.read_bytes()
        for op, a, b in case.raw:
            raw = mutate(raw, op, a, b, long_cap=long_cap)
        out.write_bytes(raw)
    return out


def _fill(text: str, sentinel: Path) -> str:
    rel = str(sentinel).lstrip("/")
    return text.replace("{s}", str(sentinel)).replace("{rb}", rel.replace("/", "\\")).replace("{r}", rel)


def _members(bundle: Path, top: bool) -> Iterator[tuple[str, Path]]:
    for path in sorted(bundle.rglob("*")):
        if path.is_file():
            rel = path.relative_to(bundle).as_posix()
            yield (f"INC/{rel}" if top else rel), path


def _hostile_name(h: Hostile, sentinel: Path, top: bool) -> str:
    name = _fill(h.name, sentinel)
    return name if top or not name.startswith("INC/") else name[4:]


def pack_tar(bundle: Path, out: Path, hostile: list[Hostile], sentinel: Path, *, top: bool) -> None:
    """The bundle as .tar.gz, the hostile members first (a reader that extracts in order has then
    made a link before the member written through it)."""
    with tarfile.open(out, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for h in hostile:
            name = _hostile_name(h, sentinel, top)
            info = tarfile.TarInfo("placeholder")
            info.pax_headers = {"path": name}             # the pax header keeps a NUL, a long name
            info.mtime = 1729176426
            body = b""
            if h.type in ("file", "dup"):
                body = HOSTILE_BODY
            elif h.type == "dir":
                info.type = tarfile.DIRTYPE
            elif h.type in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if h.type == "symlink" else tarfile.LNKTYPE
                info.pax_headers["linkpath"] = _fill(h.target, sentinel)
            elif h.type == "fifo":
                info.type = tarfile.FIFOTYPE
            elif h.type == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 5, 0
            info.size = len(body)
            if h.type != "dup":
                tar.addfile(info, io.BytesIO(body))
        for name, path in _members(bundle, top):
            tar.add(path, arcname=name, recursive=False)
        for h in hostile:
            if h.type == "dup":
                info = tarfile.TarInfo(_hostile_name(h, sentinel, top))
                info.size = len(HOSTILE_BODY)
                tar.addfile(info, io.BytesIO(HOSTILE_BODY))


def pack_zip(bundle: Path, out: Path, hostile: list[Hostile], sentinel: Path, *, top: bool) -> None:
    """The bundle as .zip; a symlink member is a Unix mode in the external attributes."""
    modes = {"symlink": stat.S_IFLNK | 0o777, "dir": stat.S_IFDIR | 0o755, "fifo": stat.S_IFIFO | 0o644,
             "chardev": stat.S_IFCHR | 0o644}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, path in _members(bundle, top):
            zf.write(path, name)
        for h in hostile:
            info = zipfile.ZipInfo("placeholder", (2024, 10, 17, 14, 47, 6))
            info.filename = _hostile_name(h, sentinel, top)   # set after: the constructor cuts at a NUL
            info.create_system = 3                             # Unix: external_attr holds the mode
            info.external_attr = (modes.get(h.type, stat.S_IFREG | 0o644)) << 16
            body = _fill(h.target, sentinel).encode() if h.type in ("symlink", "hardlink") else HOSTILE_BODY
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")        # "Duplicate name": on purpose
                zf.writestr(info, b"" if h.type == "dir" else body)


# -- running and judging -------------------------------------------------------------------------

def _walk(root: Path) -> dict[str, tuple[int, int, int]]:
    """relative path -> (mode, size, mtime) of everything beneath `root`, links not followed."""
    out: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def make_sentinel(parent: str | None = None) -> Path:
    """The folder hostile member names point at, holding one file links point at."""
    path = Path(tempfile.mkdtemp(prefix=ESCAPE_PREFIX, dir=parent or "/tmp"))
    (path / VICTIM).write_text("nothing should ever read or change this\n")
    return path


def reset_sentinel(sentinel: Path) -> None:
    for entry in sentinel.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name != VICTIM:
            entry.unlink()
    (sentinel / VICTIM).write_text("nothing should ever read or change this\n")


_OWN_FRAME = re.compile(r'File "[^"]*/triage/[^"]+\.py", line \d+')


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _strict(text: str) -> object:
    return json.loads(text, parse_constant=_no_constant)


def json_problem(stdout: str) -> str | None:
    """Why `stdout` is not one JSON document or JSON Lines, or None. NaN and Infinity are not JSON."""
    text = stdout.strip()
    if not text:
        return "nothing on stdout"
    try:
        _strict(text)
        return None
    except ValueError as whole:
        try:
            for line in text.splitlines():
                if line.strip():
                    _strict(line)
            return None
        except ValueError:
            return f"{whole}"[:200]


def run_command(name: str, target: Path, out: Path, stdin: bytes | None,
                guard: Callable[[str], AbstractContextManager] | None = None) -> Run:
    """One command through CliRunner, judged."""
    from click.testing import CliRunner

    from triage.cli import main

    args = [a.replace("{path}", str(target)).replace("{out}", str(out)) for a in COMMANDS[name]]
    started = time.monotonic()
    with (guard(name) if guard else nullcontext()):        # e.g. a time limit, in the long run
        result = CliRunner().invoke(main, args, input=stdin if args[-1] == "-" else None)
    run = Run(name, result.exit_code, time.monotonic() - started)
    err = result.stderr
    marker = err.find("internal error:")
    if marker >= 0:
        run.internal_error = err[marker:].splitlines()[0][:300]
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        run.internal_error = f"escaped click: {type(result.exception).__name__}: {result.exception}"[:300]
    elif _OWN_FRAME.search(err):          # a log's own tracebacks may be quoted: only ours count
        run.internal_error = "a traceback on stderr: " + _OWN_FRAME.search(err).group(0)
    if "--json" in name and (result.exit_code in JSON_EXITS[args[0]] or result.stdout.strip()):
        run.bad_json = json_problem(result.stdout)
    return run


def run_case(case: Case, workdir: Path, sentinel: Path, *, long_cap: int = 20_000,
             guard: Callable[[str], AbstractContextManager] | None = None) -> Outcome:
    """Build the case's input in a fresh folder, run its commands, and look for files created
    outside that folder (the sentinel, the working directory), beside the input, or left behind
    in the folder the commands' temporary files go to."""
    casedir = workdir / f"case-{case.index}"
    if casedir.exists():
        shutil.rmtree(casedir)
    out, tmp = casedir / "out", casedir / "tmp"
    out.mkdir(parents=True)
    tmp.mkdir()
    target = build_input(case, casedir, sentinel, long_cap=long_cap)
    stdin = target.read_bytes() if target.is_file() else None
    before, sentinel_before, cwd_before = _walk(casedir), _walk(sentinel), _walk(Path.cwd())
    outcome = Outcome(case)
    saved = tempfile.tempdir
    tempfile.tempdir = str(tmp)                    # an unpacked archive lands in the case's folder
    try:
        for name in case.commands:
            outcome.runs.append(run_command(name, target, out, stdin, guard))
            outcome.left += [f"{name}: {p}" for p in _walk(tmp)]
            _empty(tmp)
    finally:
        tempfile.tempdir = saved
    outcome.escaped = _changed(sentinel_before, _walk(sentinel), sentinel) + \
        _changed(cwd_before, _walk(Path.cwd()), Path.cwd())
    outcome.stray = [p for p in _changed(before, _walk(casedir), casedir)
                     if not p.startswith((str(out), str(tmp)))]
    if outcome.escaped:
        reset_sentinel(sentinel)
    shutil.rmtree(casedir, ignore_errors=True)
    return outcome


def _empty(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink()


def _changed(before: dict, after: dict, root: Path) -> list[str]:
    return [str(root / p) for p in sorted(after) if before.get(p) != after[p]]
