"""What the log reader recognises in a line before the signatures do: traceback frames and
exception lines, requests the server refused, exceptions that are no failure, request-log lines
that carry user text; and the byte markers and chunk sizes the serving fast path counts by."""
from __future__ import annotations

import re

from .repeats import ADMISSION_MARK, PREEMPT_MARK, RETRACT_MARK, STATS_MARK

FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
# Frames of a traceback whose line breaks were flattened into spaces (a paste through a web form,
# a log shipper that joins a record's lines): several `File "...", line N, in f` on one line.
INLINE_FRAME = re.compile(r'File "([^"\n]{1,400})", line (\d{1,7}), in ([\w.<>]{1,100})')
# A frame line cut by a terminal or log viewer wrapping at a fixed width: the path's closing quote
# and the rest of the frame went to the next physical line, which carries no log prefix.
CUT_FRAME = re.compile(r'^\s*File "[^"]{1,400}$')
FRAME_TAIL = re.compile(r'^[^"\s]{0,400}", line \d{1,7}, in \S')
CARET = re.compile(r"^\s*[\^~]+\s*$")
EXCEPTION = re.compile(
    r"^(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Failed|Aborted))(?::\s?(?P<msg>.*))?$")
# The source line Python prints under a traceback's innermost frame, when it is the statement that
# raised: `raise SomeError("message ...")` raised that class with that message, and `assert cond[, "msg"]`
# raised an AssertionError. When an excerpt lost the exception line itself, this line still says
# what was raised (the message only as far as its string literal goes on that line).
_EXC_NAME = r"(?:[\w.]{1,120}\.)?(?P<type>[A-Z]\w{0,80}?(?:Error|Exception|Exit|Interrupt|Failure|Failed|Aborted))"
RAISE_LINE = re.compile(r"^raise " + _EXC_NAME + r"(?:\(\s{0,4}(?:[rfbuRFBU]{0,2}(?P<q>[\"'])(?P<msg>[^\"'\n]{0,300}))?|\s*$)")
ASSERT_LINE = re.compile(r"^assert\b\s{0,4}(?P<cond>[^\n]{1,300}?)(?:,\s{0,4}[rfbuRFBU]{0,2}[\"'](?P<msg>[^\"'\n]{1,300})[\"']?)?\s*$")


def raised_by_source_line(code: str) -> tuple[str, str] | None:
    """(exception type, message) a traceback's innermost source line raised, when it says so."""
    m = RAISE_LINE.match(code)
    if m:
        return m.group("type"), (m.group("msg") or "").strip()
    m = ASSERT_LINE.match(code)
    if m:
        return "AssertionError", (m.group("msg") or m.group("cond")).strip()
    return None


# A request the API server refused (too long, malformed): the client gets a 4xx, the server serves on.
REQUEST_REJECTED = re.compile(
    r"maximum context length is \d+|Please reduce the length|is longer than the maximum model length"
    r"|Error in preprocessing prompt inputs|exceeds the maximum (?:allowed|number of)|Input validation error"
    r"|chat_template is not set|Cannot use chat template functions|is too long and exceeds limit")
# Exceptions a healthy server logs on shutdown or when a client goes away: not failures.
BENIGN_EXCEPTIONS = frozenset({
    "CancelledError", "KeyboardInterrupt", "SystemExit", "GeneratorExit", "ConnectionResetError",
    "BrokenPipeError", "ConnectionAbortedError", "ClientDisconnect", "ClientDisconnected", "StopAsyncIteration",
    # raised in a client (openai / httpx) pasted beside the server's log: the client's problem
    "APITimeoutError", "APIConnectionError", "ReadTimeout", "ConnectTimeout",
})
# The lines between two chained tracebacks.
CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
# vLLM's request logging (--enable-log-requests): prompts and outputs, i.e. user text.
_REQUEST_LOG_MARKERS = (b"Received request", b"Added request", b"Finished request", b"Generated response",
                        b"Aborted request", b"prompt: '", b"prompt_token_ids")
# vLLM's admission line ("Added request <id>.") names a request id and nothing the user wrote:
# kept, because it shows the engine taking a request (serving) right before a failure.
_ADMISSION = b"Added request "
_USER_TEXT = (b"prompt", b"params", b"'", b'"')


def is_request_log(raw: bytes) -> bool:
    if _ADMISSION in raw and not any(m in raw for m in _USER_TEXT):
        return False
    return any(marker in raw for marker in _REQUEST_LOG_MARKERS)


def short_path(path: str) -> str:
    """The last two parts of a source path, for one-line summaries."""
    return "/".join(path.replace("\\", "/").split("/")[-2:])


# An HTTP access line: uvicorn's `"GET /health HTTP/1.1" 200 OK`, a proxy's `"GET / HTTP/2.0" 200 612`,
# any method, path and HTTP version. The request line is the only place a log writes " HTTP/".
ACCESS_MARK = b' HTTP/'
# A request that shows the server serving: a POST (completions, chat, embeddings). Probes and
# scrapes (GET /health, GET /metrics, HEAD /) before it change nothing.
SERVING_REQUEST = b'"POST '
CHUNK = 64 * 1024
# After a chunk that ended the fast path early (a traceback began: every line counts until it
# ends), the next one starts this small and doubles: a storm of per-request tracebacks would
# otherwise count a whole chunk for each one.
MIN_CHUNK = 2 * 1024
# The markers a serving chunk is counted by: a repeated block holding one cannot be counted apart.
CHUNK_MARKS = (ACCESS_MARK, PREEMPT_MARK, STATS_MARK, ADMISSION_MARK, RETRACT_MARK)
