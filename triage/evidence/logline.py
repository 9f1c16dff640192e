"""Peel the wrappers off one raw log line: collectors, process prefixes, the logger's own prefix.

Real lines arrive wrapped several times over: a CRI or cloud-logging envelope, a CI gutter,
a docker-compose service name, a quoted paste ("> "), ANSI colour, vLLM's stream-level process
prefix (`(EngineCore_DP0 pid=412)`), and finally the logger format itself
(`ERROR 03-12 14:17:03 [core.py:343]`, `INFO 10-17 12:00:00 metrics.py:349]`). What remains is
the message. Full timestamps found on the way (which carry a year and a zone) win over vLLM's
year-less stamp.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from ..lazyre import lazy
from ..timeref import TimeReference, parse_iso
from ..units import whole

# Real ESC sequences, the caret notation ("^[[0;36m") that survives copy-paste, and the escaped
# spellings other log paths leave: rsyslog writes control characters as "#NNN" in octal ("#033[0;36m",
# "#011" for a tab, "#015" for a carriage return), and JSON or Python reprs keep "\x1b[", "\u001b[",
# "\033[" or "\e[" as text.
ANSI_RE = lazy(r"(?:\x1b|\^\[|#033|\\x1b|\\u001b|\\033|\\e)\[[0-9;]*[A-Za-z]")
_SYSLOG_CONTROL_RE = re.compile(r"#0(?:11|15)(?!\d)")
_ANSI_HINTS = ("\x1b", "^[", "#033[", "\\x1b[", "\\u001b[", "\\033[", "\\e[")

_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"

# Envelopes, tried repeatedly at the start of the line (order matters little; each is anchored).
_ENVELOPES: tuple[re.Pattern[str], ...] = (
    re.compile(r"^\s*>\s?"),                                                   # quoted paste
    re.compile(r"^\s*-\s(?=\S)"),                                              # bulleted paste
    re.compile(r"^\s*(?:\*\*|__)(?=\S)"),                                       # markdown bold opened on a pasted line
    # CI gutter; never a table row (an ASCII or markdown table's line ends with "|" too: Triton's
    # model status table, a benchmark's results)
    re.compile(r"^\s*\|\s(?![^\n]*\|\s*$)"),
    re.compile(rf"^(?P<iso>{_ISO})\s+(?:stdout|stderr)\s+[FP]\s"),             # CRI (containerd)
    re.compile(rf"^(?:INFO|WARNING|ERROR|DEFAULT|DEBUG|NOTICE|CRITICAL)\s+(?P<iso>{_ISO})\s+\[[^\]]*\]\s*"),  # cloud logging export
    re.compile(rf"^\[(?P<iso>{_ISO})\]\s*"),                                   # [2025-03-10T15:07:20Z]
    # Python logging as "asctime | LEVEL | logger | message" (FastChat's workers and controller,
    # loguru-style sinks): the message keeps its own indentation (traceback frames).
    re.compile(rf"^(?P<iso>{_ISO})\s+\|\s+(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\|\s+[\w.:<>-]+\s+\|\s?"),
    re.compile(rf"^(?P<iso>{_ISO})\s+(?=\S)(?!(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL)\b)"),  # bare ISO prefix
    # docker compose "vllm-1  | " (v2 names end in the replica number) or "vllm-service  | " (v1, or a
    # container_name): the service name padded to the others' width; never a level word ("ERROR | msg").
    re.compile(r"^(?!(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\s)(?![^\n]*\|\s*$)[\w.-]{1,64}\s+\|\s"),
    re.compile(r"^\((?P<proc>[A-Za-z][\w:]*?)(?:\s+rank=(?P<rank>\d+))?\s+pid=(?P<pid>\d+)(?:,\s?ip=[\w.:-]{1,64})?\)\s?"),  # vLLM process prefix (Ray adds ", ip=")
    re.compile(r"^\[rank(?P<rank2>\d+)\]:"),                                   # torch.distributed
    re.compile(r"^\[pod/[\w.-]{1,253}/[\w.-]{1,63}\]\s"),                          # kubectl logs --prefix
)

# vLLM logger: "LEVEL MM-DD HH:MM:SS [file.py:123] msg" (>=0.8) or "... file.py:123] msg" (<=0.7)
_VLLM_PREFIX = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?P<mo>\d{2})-(?P<d>\d{2})\s+"
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:[.,](?P<frac>\d+))?\s+\[?(?P<file>[\w./<>-]+\.py):(?P<lineno>\d+)\]\s?"
)
# Python logging default-ish: "2024-12-19 21:40:35 ERROR 56542 [async_llm_engine.py:64] msg"; a collector's
# date before vLLM's own prefix reads the same way, the logger's year-less stamp left over:
# "2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] msg".
_DATED_PREFIX = re.compile(
    rf"^(?P<iso>{_ISO})\s+(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:\d+\s+)?"
    r"(?:\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+(?=\[?[\w./<>-]+\.py:\d+\]))?"
    r"(?:\[(?P<file>[\w./<>-]+\.py):(?P<lineno>\d+)\]\s?)?"
)
# Python logging's "asctime - name - LEVEL - [file.py:123 - ]msg" as lmdeploy writes it, left once the
# time is peeled: "lmdeploy - INFO - base.py:177 - msg". Peeled only for lmdeploy's logger or with the
# file and line: any other program's "name - LEVEL - msg" keeps its words (an anchored entry written
# for one engine's bare line must not read another program's message).
_NAMED_PREFIX = re.compile(
    r"^(?:lmdeploy - (?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) - (?:(?P<file>[\w./<>-]+\.py):\d+ - )?"
    r"|[\w.-]{1,40} - (?P<level2>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) - (?P<file2>[\w./<>-]+\.py):\d+ - "
    # Xinference's "%(asctime)s %(name)-12s %(process)d %(levelname)-8s %(message)s": a dotted logger
    # name, the pid and the level, after the time (xinference/constants.py, XINFERENCE_LOG_FORMAT in 0.10-1.x)
    r"|(?P<file3>[A-Za-z_][\w]*(?:\.[\w]+)*) +\d{1,8} (?P<level3>DEBUG|INFO|WARNING|ERROR|CRITICAL) +"
    # a wrapper's logging config giving an engine's own logger the "name - LEVEL - " layout: the
    # logger's name says whose message follows
    r"|(?P<file4>(?:vllm|sglang|lmdeploy|tensorrt_llm|text_generation_server|xinference|llama_cpp|exllamav2|fastchat|"
    r"transformers|torch|accelerate|deepspeed|mii|lightllm|mlc_llm)(?:\.\w+)*) - "
    r"(?P<level4>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) - )"
)
# Python logging's "name - LEVEL - " of a wrapper, peeled only when an engine's own prefix follows.
_RELAY_PREFIX = re.compile(r"[\w.-]{1,60} - (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) - ")
# TGI (Rust tracing): "2024-02-21T10:28:11.366563Z ERROR text_generation_launcher: msg"
_TRACING_PREFIX = re.compile(
    rf"^(?P<iso>{_ISO})\s+(?P<level>TRACE|DEBUG|INFO|WARN|ERROR)\s+(?P<target>[\w:]+):\s?"
)
# SGLang: "[2026-03-12 14:17:03 TP0] msg" or "[16:43:29 TP0] msg" or "[2026-03-12 14:17:03] msg"
_SGLANG_PREFIX = re.compile(
    r"^\[(?:(?P<date>\d{4}-\d{2}-\d{2})\s)?(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\s(?P<rank>(?:DP\d+\s)?TP\d+(?:\s\w+)?))?\]\s?"
)
# Kernel log: "[ 2448.628961] msg", "[Thu Aug 27 00:39:44 2026] msg", "Feb 01 14:25:31 host kernel: msg"
_KERNEL_PREFIX = re.compile(
    r"^\[\s*(?:(?P<uptime>\d+\.\d+)|(?P<ctime>\w{3} \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}))\]\s*(?:\[\s*[TC]\d+\]\s*)?"
)
_VLLM_AT = re.compile(_VLLM_PREFIX.pattern.lstrip("^"))   # the same, matched at an offset
# Fast path: an optional vLLM process prefix directly followed by the logger prefix.
_COMMON = re.compile(
    r"(?:\((?P<proc>[A-Za-z][\w:]*?)(?:\s+rank=(?P<rank>\d+))?\s+pid=(?P<pid>\d+)(?:,\s?ip=[\w.:-]{1,64})?\)\s?)?"
    r"(?=(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+\[?[\w./<>-]+\.py:\d+\]\s?)"
)
_SYSLOG_PREFIX = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<d>\d{1,2})\s(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\s\S+\s(?P<prog>[\w.\-/\[\]]+):\s"
)
_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1)}


@dataclass(frozen=True, slots=True)
class LogLine:
    """One log line with its prefixes read: the message, level, time, process and the rest."""
    message: str                 # the text after every prefix
    level: str | None            # logger level when the line carried one
    time: datetime | None        # UTC
    process: str | None          # "EngineCore_DP0", "VllmWorker", "APIServer", ...
    pid: int | None
    rank: int | None
    file: str | None             # logger file:line origin ("core.py")
    origin: str                  # "vllm", "sglang", "tgi", "kernel", "syslog", "python", "plain"
    indented: bool               # message kept leading whitespace (traceback frames, code)


def strip_ansi(text: str) -> str:
    if any(h in text for h in _ANSI_HINTS):
        text = ANSI_RE.sub("", text)
    if "#01" in text:
        # rsyslog's escaped tab / carriage return: a tab becomes a space, a carriage return goes.
        text = _SYSLOG_CONTROL_RE.sub(lambda m: " " if m.group(0) == "#011" else "", text)
    return text


_JSON_MESSAGE_KEYS = ("message", "msg", "log", "MESSAGE")
_JSON_TIME_KEYS = ("asctime", "time", "timestamp", "ts", "@timestamp")


def json_line(raw: str) -> dict | None:
    """A structured log record (one JSON object per line), or None."""
    if not raw.lstrip().startswith("{"):
        return None
    from ..safejson import loads

    try:
        obj = loads(raw)
    except ValueError:      # not JSON, nested too deep, a 4,300-digit number: read as plain text
        return None
    if isinstance(obj, dict) and obj.get("object") == "error":
        # An OpenAI-style error answer pasted from a client ({"object": "error", "message": ...}), not
        # a log record: read whole, so the readers see it was an API answer to a request.
        return None
    if isinstance(obj, dict) and any(isinstance(obj.get(k), str) for k in _JSON_MESSAGE_KEYS):
        return obj
    return None


# A structured record's own bookkeeping, never what it reports (the logging library's keys).
_JSON_META_KEYS = frozenset({*_JSON_MESSAGE_KEYS, *_JSON_TIME_KEYS, "level", "levelname", "levelno", "name", "process",
                             "processName", "thread", "threadName", "taskName", "tid", "function", "funcName", "line",
                             "lineno", "filename", "module", "pathname", "msecs", "created", "relativeCreated",
                             "caller", "logger", "source"})
_JSON_FIELDS_MAX = 1000


def _json_fields(obj: dict, message: str) -> str:
    """The record's other scalar fields as `key=value` after its message, the way a logfmt line
    carries them: what a structured record reports beside its message (an access record's path
    and status, an error field) is then read as in a text log."""
    parts: list[str] = []
    for key, value in obj.items():
        if key in _JSON_META_KEYS or value is message or not isinstance(value, (str, int, float, bool)):
            continue
        if isinstance(value, str):
            value = value if value and not any(c in value for c in ' "=\n') else json.dumps(value)
        parts.append(f" {key}={value}")
    return "".join(parts)[:_JSON_FIELDS_MAX]


def _from_json(obj: dict, times: TimeReference) -> LogLine:
    message = next(obj[k] for k in _JSON_MESSAGE_KEYS if isinstance(obj.get(k), str))
    if obj.get("log") is message:
        # docker's json-file driver wraps the raw line (with vLLM's own prefix) in {"log": ...}
        inner = parse_line(message, times)
        stamp = obj.get("time")
        t = _iso(str(stamp), times) if stamp else None
        return LogLine(inner.message, inner.level, inner.time or t, inner.process, inner.pid, inner.rank,
                       inner.file, inner.origin, inner.indented)
    stamp = next((obj[k] for k in _JSON_TIME_KEYS if obj.get(k)), None)
    level = obj.get("levelname") or obj.get("level")
    pid = obj.get("process")
    return _line(str(message) + _json_fields(obj, message), str(level).upper() if level else None,
                 _iso(str(stamp).replace(",", "."), times) if stamp else None, obj.get("processName"),
                 pid if isinstance(pid, int) else None, None, obj.get("name"), "json")


def parse_line(raw: str, times: TimeReference) -> LogLine:
    """Split one raw line into its message and metadata. Never raises."""
    if raw[:1] == "\ufeff":   # a UTF-8 byte-order mark on the first line
        raw = raw[1:]
    if raw[:1] == "{" or raw.lstrip()[:1] == "{":
        obj = json_line(raw)
        if obj is not None:
            return _from_json(obj, times)
    text = strip_ansi(raw.rstrip("\r\n").replace("\r", ""))
    if text.endswith("^M"):  # a carriage return that survived a copy-paste as caret notation
        text = text[:-2]
    fast = _COMMON.match(text)
    if fast:
        # The usual shape, "(EngineCore_DP0 pid=9) INFO 03-12 14:17:03 [core.py:1] msg", in one match.
        m = _VLLM_AT.match(text, fast.end())
        t = times.resolve(int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
        pid = whole(fast["pid"]) if fast["pid"] else None
        rank = whole(fast["rank"]) if fast["rank"] else None
        return _line(text[m.end():], m["level"], t, fast["proc"], pid, rank, m["file"], "vllm")
    outer_time: datetime | None = None
    process = None
    pid = rank = None
    syslog_prog: str | None = None
    # Peel envelopes until none applies (bounded: each pass must consume something).
    for _ in range(8):
        if syslog_prog is None:
            # syslog / journalctl's "Jun 01 10:00:00 host prog[pid]: " is an envelope too: the program's
            # own line (vLLM's logger prefix, a CRI line) follows it and is read as it would be bare.
            m = _SYSLOG_PREFIX.match(text)
            if m and m["mon"] in _MONTHS:
                syslog_prog = m["prog"]
                outer_time = outer_time or times.resolve(_MONTHS[m["mon"]], int(m["d"]), int(m["h"]),
                                                         int(m["mi"]), int(m["s"]))
                text = text[m.end():]
                continue
        for env in _ENVELOPES:
            m = env.match(text)
            if not m or m.end() == 0:
                continue
            gd = m.groupdict()
            if gd.get("iso"):
                outer_time = outer_time or _iso(gd["iso"], times)
            if gd.get("proc"):
                process, pid = gd["proc"], whole(gd["pid"])
                if gd.get("rank"):
                    rank = whole(gd["rank"])
            if gd.get("rank2"):
                rank = whole(gd["rank2"])
            text = text[m.end():]
            break
        else:
            break

    if outer_time is not None:
        # A wrapper's own logger relaying the engine's lines ("app - INFO - INFO 05-01 ... [core.py:1] msg"):
        # its prefix goes when the engine's own prefix follows it, and the engine's is read as on a bare line.
        m = _RELAY_PREFIX.match(text)
        relayed = _COMMON.match(text, m.end()) if m else None    # matches only where vLLM's prefix follows
        if relayed:
            if relayed["pid"]:
                process, pid = relayed["proc"], whole(relayed["pid"])
                rank = whole(relayed["rank"]) if relayed["rank"] else rank
            text = text[relayed.end():]
    m = _VLLM_PREFIX.match(text)
    if m:
        t = times.resolve(int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]))
        return _line(text[m.end():], m["level"], outer_time or t, process, pid, rank, m["file"], "vllm")
    if outer_time is not None:
        m = _NAMED_PREFIX.match(text)
        if m:
            return _line(text[m.end():], m["level"] or m["level2"] or m["level3"] or m["level4"], outer_time, process,
                         pid, rank, m["file"] or m["file2"] or m["file3"] or m["file4"], "python")
    m = _TRACING_PREFIX.match(text)
    if m:
        return _line(text[m.end():], m["level"], _iso(m["iso"], times), process, pid, rank, m["target"], "tgi")
    m = _DATED_PREFIX.match(text)
    if m:
        return _line(text[m.end():], m["level"], _iso(m["iso"], times), process, pid, rank, m["file"], "python")
    m = _SGLANG_PREFIX.match(text)
    if m:
        # A clock without a date ("[16:43:29 TP0]") cannot be placed in time honestly.
        t = outer_time
        if m["date"]:
            t = _iso(f"{m['date']} {m['h']}:{m['mi']}:{m['s']}", times)
        return _line(text[m.end():], None, t, process, pid, rank, None, "sglang")
    m = _KERNEL_PREFIX.match(text)
    if m:
        t = outer_time
        if m["ctime"]:
            try:
                t = times.localize(datetime.strptime(m["ctime"], "%a %b %d %H:%M:%S %Y"))
            except ValueError:
                t = outer_time
        return _line(text[m.end():], None, t, process, pid, rank, None, "kernel")
    if syslog_prog is not None:
        return _line(text, _sniff_level(text), outer_time, process, pid, rank, syslog_prog, "syslog")
    return _line(text, _sniff_level(text), outer_time, process, pid, rank, None, "plain")


# The level of a line in a logger format no prefix above reads, where the level sits in a place
# every such format agrees on: Python's "asctime - name - LEVEL - msg" (lmdeploy and many
# wrappers), "LEVEL: msg" (uvicorn, Python's basicConfig), logfmt's level=LEVEL (Go's slog, Ollama),
# glog's leading letter ("E0510 07:57:30.770724 21661 file.cc:840]": Triton, TensorRT), llama.cpp's
# common log ("3.45.098.561 E srv ...", after a "[pid] " when the server logs it), TensorRT-LLM's "[TensorRT-LLM][ERROR]" and "[TRT-LLM] [E]",
# and "DATE TIME [pid] [name] LEVEL [file:func():line] msg" (KServe's and other Python servers' format;
# the date may already be peeled, the pid then leads).
_LEVEL_SNIFF = re.compile(
    r"^(?:[^\n]{0,80}? - (?P<py>DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
    r"|(?P<colon>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL):\s"
    r"|[^\n]{0,80}?\blevel=(?P<logfmt>DEBUG|INFO|WARN|WARNING|ERROR|FATAL|PANIC)\b"
    r"|(?P<glog>[DIWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+[\w.-]+:\d+\]"
    r"|(?:\[\d{1,10}\] )?\d+\.\d{2}\.\d{3}\.\d{3} (?P<ggml>[DIWE]) "
    r"|\[(?:TensorRT-LLM|TRT-LLM)\]\s?\[(?P<trt>ERROR|WARNING|INFO|DEBUG|E|W|I|D)\]"
    r"|(?:\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?\s{1,4}(?:\d{1,10}\s{1,4})?|\d{1,10}\s{1,4})"
    r"(?:[\w.-]{1,40}\s{1,4})?"
    r"(?P<bracket>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s{1,8}\[[^\]\n]{1,200}\]\s)")
_LETTER_LEVELS = {"D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL", "PANIC": "FATAL"}


def _sniff_level(text: str) -> str | None:
    m = _LEVEL_SNIFF.match(text)
    if m is None:
        return None
    level = next(v for v in m.groups() if v)
    return _LETTER_LEVELS.get(level, level)


# IPython / Jupyter tracebacks spell a frame "File /path/mod.py:214, in Class.method(args)", and a
# notebook copied as rendered text links the path: "File [/path/mod.py:214](http://host/...), in f(...)".
# Rewritten into the interpreter's own form, `File "/path/mod.py", line 214, in method`, so every
# reader sees one frame shape (the qualified name keeps its last part, as the interpreter prints it).
_IPYTHON_FRAME = lazy(
    r"^(?P<indent>\s*)File \[?(?P<path>[^\s\[\](),\"]+?\.py):(?P<line>\d+)(?:\]\([^)\s]{0,500}\))?,\s+in\s+"
    r"(?P<func>[\w.<>]+)")


# IPython 7 (and notebooks rendered from it, Colab's with the path as a link) heads each frame with
# "PATH in FUNC(ARGS)" and marks the failing source line below it ("--> 444"); the header holds no
# line number, so the frame gets line 0.
_IPYTHON7_FRAME = lazy(
    r"^(?P<indent>\s*)\[?(?P<path>(?:/|[A-Za-z]:\\)[^\s\[\](),\"]{1,400}?\.py)\]?(?:\([^)\s]{0,500}\))? in "
    r"(?P<func>[\w.<>]+)\(")


def ipython_frame(message: str) -> str:
    """The interpreter's frame line for an IPython-style one; any other message unchanged."""
    if '", line ' in message:
        return message
    m = (_IPYTHON_FRAME.match(message) if "File " in message and ", in " in message else None) or \
        (_IPYTHON7_FRAME.match(message) if ".py" in message and " in " in message else None)
    if m is None:
        return message
    func = m["func"].rsplit(".", 1)[-1] or m["func"]      # the interpreter prints a method's own name
    line = m.groupdict().get("line") or 0
    return f'{m["indent"]}File "{m["path"]}", line {line}, in {func}'


def _line(message: str, level, time, process, pid, rank, file, origin) -> LogLine:
    message = ipython_frame(message)
    indented = message[:1] in (" ", "\t")
    if message.endswith("**") and not message.endswith("***"):
        message = message[:-2]      # markdown bold closed at the end of a pasted line
    if level == "WARN":
        level = "WARNING"
    return LogLine(message.rstrip(), level, time, process, pid, rank, file, origin, indented)


def _iso(text: str, times: TimeReference) -> datetime | None:
    t = parse_iso(text.replace(",", "."))
    if t is None:
        return None
    # A zone-less full stamp is local time of the writer; parse_iso assumed UTC.
    if not re.search(r"(?:Z|[+-]\d{2}:?\d{2})$", text.strip()):
        return times.localize(t.replace(tzinfo=None))
    return t

