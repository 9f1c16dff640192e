"""The log reader's bulk prefilter: reading only the lines it picks gives the records a look at
every line gives, on every log of the corpus and the samples and on re-wrapped copies of them."""
from __future__ import annotations

import json
import random
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from triage.evidence import logs, prefilter
from triage.evidence.base import InputFile, ParseContext
from triage.evidence.logline import parse_line
from triage.evidence.prefilter import anchors
from triage.evidence.prefilter_anchors import derive, necessary_literals, safe_core
from triage.timeref import TimeReference

ROOT = Path(__file__).resolve().parent.parent
REF = TimeReference(datetime(2026, 3, 20, tzinfo=timezone.utc), "test")


def corpus_logs() -> Iterator[tuple[str, str]]:
    """(name, text) of every log of the labelled corpora and the sample bundles."""
    for folder in ("tests/corpus", "tests/corpus_synthetic"):
        for path in sorted((ROOT / folder).glob("*.yaml")):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(doc, dict) and isinstance(doc.get("log"), str):
                yield path.name, doc["log"]
    for path in sorted((ROOT / "samples").rglob("*")):
        if path.is_file() and path.suffix in (".log", ".txt") and path.stat().st_size < 4 << 20:
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8", errors="replace")


def rewrapped(text: str) -> Iterator[tuple[str, str]]:
    """The same log as other collectors write it."""
    lines = text.splitlines()
    yield "plain", text
    yield "crlf", "\r\n".join(lines) + "\r\n"
    yield "cri", "".join(f"2026-03-12T14:17:{i % 60:02d}.000000000Z stdout F {line}\n" for i, line in enumerate(lines))
    yield "docker-json", "".join(json.dumps({"log": line + "\n", "stream": "stderr",
                                             "time": "2026-03-12T14:17:03.5Z"}) + "\n" for line in lines)
    rng = random.Random(len(text))
    noisy = []
    for line in lines:                     # DEBUG chatter and blobs between the real lines
        noisy.append(line)
        if rng.random() < 0.5:
            noisy.append("DEBUG 03-12 14:17:03 [core.py:1] EngineCore loop active.")
        if rng.random() < 0.1:
            noisy.append("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk" * 20)
    yield "noisy", "\n".join(noisy) + "\n"


def records(text: str, bulk: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    monkeypatch.setattr(logs, "PREFILTER_MIN_BYTES", 0 if bulk else 1 << 62)
    src = InputFile(display="server.log", path=None, data=text.encode("utf-8", errors="replace"))
    out = []
    for e in logs.parse(src, ParseContext(times=REF)):
        out.append((e.line, e.kind, e.text, e.time, json.dumps(dict(e.fields), sort_keys=True, default=str)))
    return sorted(out, key=repr)


CASES = [(f"{name}:{shape}", text) for name, base in corpus_logs() for shape, text in rewrapped(base)]


@pytest.mark.parametrize("name, text", CASES, ids=[c[0] for c in CASES])
def test_prefilter_reads_what_every_line_gives(name: str, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert records(text, True, monkeypatch) == records(text, False, monkeypatch)


def test_every_signature_example_is_picked() -> None:
    """Each example line of the signature data is a line the prefilter hands to the reader."""
    from triage.evidence import sigdata

    every = prefilter.matcher("every")
    for entry in sigdata.load_raw():
        for example in entry["examples"]:
            line = example if isinstance(example, str) else example.get("line", example.get("text", ""))
            for form in (line, json.dumps({"log": line})):
                buf = bytearray(form.encode()) + b"\n"
                assert every.starts(buf, 0, len(buf)) == [0], (entry["id"], form)


def test_a_timed_line_has_a_clock() -> None:
    """prefilter.may_be_timed says yes for every line that parse_line gives a time (lines it says
    no for are passed over when the last time is looked for)."""
    for _name, text in corpus_logs():
        for _shape, wrapped in rewrapped(text):
            for line in wrapped.splitlines():
                if parse_line(line, REF).time is not None:
                    assert prefilter.may_be_timed(line.encode("utf-8", errors="replace")), line


def test_the_matchers_agree() -> None:
    """Hyperscan (when installed) and the pure-Python trie find the same lines."""
    literals = anchors().every
    trie = prefilter._TrieRegex(literals)
    rng = random.Random(7)
    words = [lit.removesuffix("\\b") for lit in literals] + ["INFO", "DEBUG 11-20", "noise", "Err", "-9f", "pid=1)"]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(0, 4))) for _ in range(3000)) + "\n"
    buf = bytearray(text.encode())
    flat = re.compile(b"|".join(prefilter._expression(lit) for lit in literals))
    expected = [i for i, pos in enumerate(_line_starts(buf)) if flat.search(_line(buf, pos).encode())]
    starts = _line_starts(buf)
    assert trie.starts(buf, 0, len(buf)) == [starts[i] for i in expected]
    try:
        hs = prefilter._Hyperscan(literals)
    except ImportError:
        pytest.skip("hyperscan is not installed")
    assert hs.starts(buf, 0, len(buf)) == [starts[i] for i in expected]
    # The lines holding only literals of the tail (the serving matcher's stats anchors) are told apart.
    first = len(literals) // 2
    head = re.compile(b"|".join(prefilter._expression(lit) for lit in literals[:first]))
    found, late = hs.split_starts(buf, 0, len(buf), first)
    assert found == [starts[i] for i in expected]
    assert late == {starts[i] for i in expected if not head.search(_line(buf, starts[i]).encode())}


def _line_starts(buf: bytearray) -> list[int]:
    out, pos = [], 0
    while pos < len(buf):
        out.append(pos)
        pos = buf.index(b"\n", pos) + 1
    return out


def _line(buf: bytearray, pos: int) -> str:
    return buf[pos:buf.index(b"\n", pos)].decode()


@pytest.mark.parametrize("pattern, expected", [
    (r"exit status 137\b", {"exit status 137\\b"}),
    (r"(?:Engine core|Worker) proc \S+ died", {"Engine core proc ", "Worker proc "}),
    (r"foo(?:bar|bazz)", {"foobar", "foobazz"}),      # a stretch matched exactly: its strings
    (r"batch\{[^}]*\}:(?:prefill|decode)", {"}:prefill", "}:decode"}),
    (r"exit(?:ed with)? code:? 137\b", {"exit code 137\\b", "exit code: 137\\b", "exited with code 137\\b",
                                         "exited with code: 137\\b"}),
    (r"(?i)out of memory", None),
    (r'File "x"', {"File "}),
])
def test_necessary_literals(pattern: str, expected: set[str] | None) -> None:
    found = necessary_literals(pattern)
    assert (set(found) if found is not None else None) == expected


def test_safe_core_drops_what_escaping_rewrites() -> None:
    assert safe_core('File "/x/y.py"') == "/x/y.py"
    assert safe_core("a<b>c&&d") == "a"


def test_the_stored_anchors_are_those_derived_now() -> None:
    """`python -m triage.evidence.sigdata build` stored the anchors this code derives from the
    data (a run reads them instead of parsing every pattern)."""
    from triage.evidence import sigdata
    from triage.evidence.prefilter_anchors import Anchors, code_stamp

    stored = sigdata.compiled_anchors()
    assert isinstance(stored, dict) and stored.get("stamp") == code_stamp(), "rebuild: python -m triage.evidence.sigdata build"
    assert Anchors.from_json(stored) == derive(sigdata.entries())
    assert anchors() == derive(sigdata.entries())


def test_anchors_stored_by_other_code_are_derived_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    from triage.evidence import sigdata

    monkeypatch.setattr(sigdata, "compiled_anchors", lambda: {"stamp": "older code", "feed": ["x"], "served": [],
                                                              "stats": []})
    prefilter.anchors.cache_clear()
    try:
        assert prefilter.anchors() == derive(sigdata.entries())
    finally:
        prefilter.anchors.cache_clear()


def test_a_busy_healthy_servers_chatter_reaches_few_of_the_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk prefilter hands Python only lines that can matter: on a generated V1 server at DEBUG
    level and an SGLang server's batch lines (the benchmarks' own shapes), the literals every line is
    read for pick under 2% of them (with the start-up lines and the failure at the end). An anchor as
    common as a logger's file name (`kv_cache_utils.py`) or a per-batch flag (`cuda graph: True`)
    would send every line to the readers again."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))     # gen_shapes imports gen_log beside it
    import gen_shapes

    feed = anchors().feed
    for shape in ("vllm-debug", "sglang"):
        out = tmp_path / f"{shape}.log"
        gen_shapes.generate(out, 4_000_000, 0, shape)
        lines = out.read_text(encoding="utf-8", errors="replace").splitlines()
        picked = sum(1 for line in lines if any(a in line for a in feed))
        assert len(lines) > 5_000
        assert picked / len(lines) < 0.02, (shape, picked, len(lines))


def test_a_pid_token_that_is_never_a_process_prefix_is_given_up_but_a_new_process_is_still_found():
    # Behind a journal prefix the reader does not take "(APIServer pid=1)" for a process prefix:
    # after a few chunks in which it never was one, that token is searched past in C, not tried
    # line by line in every chunk; a process that appears later is still seen.
    from triage.evidence.prefilter import GIVE_UP, MAX_TRIES, new_pid_lines

    line = b"Nov 20 12:00:45 node vllm[2231]: (APIServer pid=1) DEBUG 11-20 12:00:45 [loggers.py:1] tick\n"
    fresh = b"(EngineCore_DP0 pid=412) INFO 11-20 12:00:46 [core.py:1] started\n"
    tried: list[bytes] = []

    def pid_of(raw: bytes):
        tried.append(raw)
        return 412 if raw.startswith(b"(EngineCore_DP0 pid=412)") else None

    known: set[int] = set()
    counted: dict[bytes, int] = {}
    refused: dict[bytes, int] = {}
    chunk = bytearray(line * 50)
    for _ in range(20):
        assert new_pid_lines(chunk, 0, len(chunk), known, counted, pid_of, refused) == []
    assert len(tried) == GIVE_UP * MAX_TRIES and counted == {b"1": -1}
    later = bytearray(line * 10 + fresh + line * 10)
    assert new_pid_lines(later, 0, len(later), known, counted, pid_of, refused) == [10 * len(line)]
