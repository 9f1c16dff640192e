"""Record-dense logs read in bounded memory: a preemption storm's warnings are counted per minute
(exactly, citing real lines), stats lines are held raw until kept, and every access-line shape —
probes and scrapes before the first request, HTTP/1.0, a proxy's format — takes the fast path."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from triage.api import classify_paths
from triage.evidence import load_evidence
from triage.evidence.kinds import Kind
from triage.report import to_json

from tests.conftest import sample

START = (sample("burst-long-prompts-v0") / "logs" / "vllm.log").read_text().splitlines()
HEAD = [line for line in START[:60] if "HTTP/1.1" not in line][:40]
CRASH = START[1040:]
PREEMPT = ("WARNING 11-06 {t} scheduler.py:1484] Sequence group chat-{i:032x} is preempted by PreemptionMode."
           "RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. "
           "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
           "total_num_cumulative_preemption={n}")
STATS = ("INFO 11-06 {t} metrics.py:349] Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 301.2 "
         "tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: {w} reqs, GPU KV cache usage: {kv:.1f}%, CPU KV "
         "cache usage: 0.0%.")
ACCESS = 'INFO:     10.42.{a}.{b}:{p} - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def storm(path: Path, lines: int, per_second: int, seed: int = 7) -> dict:
    """A V0 storm: ~89% access lines, ~5% preemption warnings, ~1% stats, admission lines, then
    the sample's crash. Returns the truth: preemption lines (numbers) and stats lines."""
    rnd = random.Random(seed)
    out = list(HEAD)
    preempt_lines, stats_lines, n = [], [], 0
    for i in range(lines):
        sec = 300 + i // per_second                          # from 10:05:00, `per_second` lines a second
        t = f"{10 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        r = rnd.random()
        if r < 0.05:
            n += 1
            out.append(PREEMPT.format(t=t, i=rnd.getrandbits(64), n=n))
            preempt_lines.append(len(out))
        elif r < 0.06:
            out.append(STATS.format(t=t, r=rnd.randrange(20, 40), w=rnd.randrange(50, 90), kv=95 + rnd.random() * 4))
            stats_lines.append(len(out))
        elif r < 0.08:
            out.append(f"INFO 11-06 {t} engine.py:288] Added request chat-{rnd.getrandbits(64):016x}.")
        else:
            out.append(ACCESS.format(a=rnd.randrange(250), b=rnd.randrange(250), p=rnd.randrange(30000, 60000)))
    out += CRASH
    path.write_text("\n".join(out) + "\n")
    # The sample's own start-up and crash lines count too.
    preempt_lines = [i for i, line in enumerate(out, 1) if "is preempted by" in line]
    stats_lines = [i for i, line in enumerate(out, 1) if "Avg prompt throughput" in line]
    return {"preempt": preempt_lines, "stats": stats_lines, "lines": out}


def test_a_storm_is_counted_exactly_per_minute_and_cites_real_lines(tmp_path):
    truth = storm(tmp_path / "vllm.log", 60_000, 200)
    ev = load_evidence([str(tmp_path / "vllm.log")])
    heads = ev.of(Kind.PREEMPTION)
    # Every warning is counted once: the heads plus what each stands for.
    assert sum(int(h.fields.get("repeats", 1)) for h in heads) == len(truth["preempt"])
    # One record a minute (the storm spans five), not one a warning.
    assert len(heads) <= 8 < len(truth["preempt"])
    for h in heads:
        assert h.line in truth["preempt"] and "is preempted by" in truth["lines"][h.line - 1]
        if "last_line" in h.fields:
            assert h.fields["last_line"] in truth["preempt"] and h.fields["last_line"] >= h.line
            assert h.fields["until"] >= h.time
    verdict, _ = classify_paths([str(tmp_path / "vllm.log")])
    assert verdict.oom_class.value == "burst"
    assert any("preempted" in n for n in [verdict.summary])


def test_records_do_not_grow_with_the_number_of_warnings(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    storm(tmp_path / "a" / "vllm.log", 20_000, 100)
    storm(tmp_path / "b" / "vllm.log", 80_000, 400)          # four times the lines over the same minutes
    small = load_evidence([str(tmp_path / "a" / "vllm.log")])
    big = load_evidence([str(tmp_path / "b" / "vllm.log")])
    assert len(big.of(Kind.PREEMPTION)) == len(small.of(Kind.PREEMPTION))
    # Stats lines: the window keeps at most its recent and history lines, whatever the count.
    assert len(big.of(Kind.STATS)) <= 256 + 1024 + 2


def test_stats_lines_held_raw_are_the_real_lines_in_order(tmp_path):
    truth = storm(tmp_path / "vllm.log", 30_000, 100)
    ev = load_evidence([str(tmp_path / "vllm.log")])
    stats = ev.of(Kind.STATS)
    assert stats and all(s.line in truth["stats"] for s in stats)
    # The last 256 before the failure are kept whole, in file order and sequence order alike.
    recent = [s for s in stats if s.line >= truth["stats"][-256]]
    assert [s.line for s in recent] == truth["stats"][-256:]
    assert [s.seq for s in sorted(stats, key=lambda s: s.line)] == sorted(s.seq for s in stats)


def test_the_timeline_counts_every_warning_of_the_storm(tmp_path):
    from triage.timeline.build import build_timeline

    (tmp_path / "logs").mkdir()
    truth = storm(tmp_path / "logs" / "vllm.log", 40_000, 200)
    (tmp_path / "incident.yaml").write_text('id: s\ncreated: "2026-11-06T12:00:00Z"\ntimezone: UTC\n')
    timeline = build_timeline(tmp_path)
    rows = [e for e in timeline.events if e.kind == "preemption"]
    assert sum(e.count for e in rows) == len(truth["preempt"])


IDLE = ("INFO 11-06 {t} metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 "
        "tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: "
        "0.0%.")
PROBES = ['INFO:     10.0.0.5:4242 - "GET /health HTTP/1.1" 200 OK',
          'INFO:     10.0.0.9:5151 - "GET /metrics HTTP/1.1" 200 OK',
          '10.0.0.7 - - [06/Nov/2026:10:05:00 +0000] "GET /health HTTP/1.0" 200 2 "-" "kube-probe/1.29"',
          'INFO:     10.0.0.5:4243 - "HEAD / HTTP/1.1" 200 OK']


@pytest.mark.parametrize("serving", [False, True], ids=["probes-only", "then-a-request"])
def test_probe_and_scrape_lines_before_the_first_request_are_skipped_not_lost(tmp_path, serving):
    up = [line for line in HEAD if "throughput" not in line]     # started, nothing served yet
    lines = list(up)
    for i in range(20_000):
        lines.append(PROBES[i % len(PROBES)])
        if i % 500 == 0:
            lines.append(IDLE.format(t=f"10:{5 + i // 5000:02d}:00"))
    if serving:
        lines.append(ACCESS.format(a=1, b=2, p=3))
        lines += CRASH
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    ev = load_evidence([str(tmp_path / "vllm.log")])
    served = [e for e in ev.of(Kind.REQUEST_SERVED) if e.fields.get("status", 0) < 500]
    if serving:
        # The first POST is the one access line kept: it shows the server serving. The crash's
        # 500s are one more record, the first of them, counting them all.
        assert len(served) == 1 and served[0].line == len(up) + 20_000 + 40 + 1
        errors = [e for e in ev.of(Kind.REQUEST_SERVED) if e.fields.get("status", 0) >= 500]
        assert [e.fields["repeats"] for e in errors] == [sum('" 500 ' in line for line in CRASH)]
        verdict, _ = classify_paths([str(tmp_path / "vllm.log")])
        assert verdict.oom_class.value in ("burst", "unknown", "prefix_cache")
        assert int(verdict.facts["failure"]["at"].rsplit(":", 1)[1]) > served[0].line
    else:
        assert served == []
        verdict, _ = classify_paths([str(tmp_path / "vllm.log")])
        assert verdict.oom_class.value == "no_oom"


def test_repeated_warnings_are_learned_as_noise_but_a_failure_among_them_is_read(tmp_path):
    """A warning that made no record is counted away at C speed afterwards; an error line between
    thousands of them is still read (it never matches a learned marker)."""
    lines = list(HEAD)
    for i in range(30_000):
        lines.append(ACCESS.format(a=i % 250, b=7, p=40000 + i % 9000))
        if i % 10 == 0:
            lines.append(f"WARNING 11-06 10:{10 + i // 6000:02d}:00 protocol.py:58] The following fields were "
                         "present in the request but ignored: {'user'}")
        if i % 17 == 0:
            lines.append(f"WARNING 11-06 10:{10 + i // 6000:02d}:00 scheduler.py:1147] Input prompt ({32769 + i} "
                         "tokens) is too long and exceeds limit of 32768")
        if i == 20_000:
            lines.append("ERROR 11-06 10:13:20 engine.py:135] RuntimeError: CUDA error: an illegal memory access "
                         "was encountered")
            marker = len(lines)
    (tmp_path / "vllm.log").write_text("\n".join(lines) + "\n")
    ev = load_evidence([str(tmp_path / "vllm.log")])
    assert any(e.line == marker and e.kind == Kind.ILLEGAL_MEMORY_ACCESS.value for e in ev.items)
    verdict, _ = classify_paths([str(tmp_path / "vllm.log")])
    assert verdict.oom_class.value == "not_gpu_oom"


# --- SGLang's retractions and a dead engine's per-request errors --------------------------------
DECODE = ("[2025-01-12 {t} TP0] Decode batch. #running-req: {r}, #token: {tok}, token usage: {u:.2f}, "
          "gen throughput (token/s): 2410.18, #queue-req: {q}")
RETRACT = "[2025-01-12 {t} TP{rank}] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.9446"
SGL_ACCESS = '[2025-01-12 {t}] INFO:     127.0.0.1:{p} - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def sglang_retractions(path: Path, minutes: int, recovered: bool) -> list[int]:
    """An SGLang server under KV pressure: decode batches, access lines and retractions on every TP
    rank, all through the storm's last minute. With `recovered`, a decode batch follows the last
    retraction (back-pressure the scheduler absorbed); without, the retraction is the end."""
    lines = ["[2025-01-12 11:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=8)"]
    for i in range(minutes * 60 * 10):
        sec = i // 10
        t = f"{11 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        r = i % 10
        if r == 0:
            lines.append(DECODE.format(t=t, r=118, tok=178_000 + i, u=0.98, q=37))
        elif r < 4:
            lines.append(RETRACT.format(t=t, rank=r))
        else:
            lines.append(SGL_ACCESS.format(t=t, p=40_000 + i % 9000))
    t = f"{11 + minutes // 60:02d}:{minutes % 60:02d}:59"
    lines.append(RETRACT.format(t=t.replace(":59", ":58"), rank=0))
    if recovered:
        lines.append(DECODE.format(t=t, r=100, tok=150_000, u=0.90, q=20))
    path.write_text("\n".join(lines) + "\n")
    return [i for i, line in enumerate(lines, 1) if "#retracted_reqs" in line]


@pytest.mark.parametrize("recovered", [False, True], ids=["last-thing-logged", "absorbed"])
def test_a_retraction_storm_is_counted_and_its_last_line_decides(tmp_path, recovered):
    truth = sglang_retractions(tmp_path / "sglang.log", 6, recovered)
    ev = load_evidence([str(tmp_path / "sglang.log")])
    heads = [e for e in ev.of(Kind.PREEMPTION) if e.fields.get("mode") == "retract"]
    assert sum(int(h.fields.get("repeats", 1)) for h in heads) == len(truth)
    assert len(heads) <= 8 < len(truth)
    assert all(h.line in truth and h.fields.get("last_line", h.line) in truth for h in heads)
    # The decision reads the bucket's last line: decode batches inside the last minute, before
    # its final retraction, are not "served after it".
    verdict, _ = classify_paths([str(tmp_path / "sglang.log")])
    if recovered:
        assert verdict.oom_class.value == "no_oom"
    else:
        assert verdict.oom_class.value != "no_oom"
        assert "retracted requests" in json.dumps(to_json(verdict))


ASGI_TRACEBACK = """ERROR:    Exception in ASGI application
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 401, in run_asgi
    result = await app(  # type: ignore[func-returns-value]
  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/api_server.py", line 285, in create_chat_completion
    generator = await openai_serving_chat.create_chat_completion(request, raw_request)
  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/async_llm_engine.py", line 1064, in add_request
    raise AsyncEngineDeadError(
vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.""".splitlines()


def dead_engine(path: Path, requests: int) -> dict:
    """The V0 sample's crash, then every later request failing with a traceback of its own (a dead
    V0 engine keeps its HTTP server up), one access line each."""
    lines = START[:1040] + CRASH
    for i in range(requests):
        lines.append(f'INFO:     10.0.0.{i % 200}:{40000 + i} - "POST /v1/chat/completions HTTP/1.1" 500 '
                     "Internal Server Error")
        lines += ASGI_TRACEBACK
    path.write_text("\n".join(lines) + "\n")
    return {"tracebacks": [i for i, line in enumerate(lines, 1) if line.startswith("Traceback")],
            "dead": [i for i, line in enumerate(lines, 1) if "Background loop has errored already" in line]}


def test_a_dead_engines_per_request_errors_are_counted_not_kept(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    dead_engine(tmp_path / "a" / "vllm.log", 50)
    truth = dead_engine(tmp_path / "b" / "vllm.log", 5_000)
    few, many = load_evidence([str(tmp_path / "a" / "vllm.log")]), load_evidence([str(tmp_path / "b" / "vllm.log")])
    assert len(many.items) == len(few.items)                 # records do not grow with the requests
    dead = [e for e in many.of(Kind.ENGINE_DEAD) if "errored already" in e.text]
    tbs = [e for e in many.of(Kind.TRACEBACK) if e.fields.get("exception") == "AsyncEngineDeadError"
           and "errored already" in (e.fields.get("message") or "")]
    # Exact counts, first and last lines real.
    assert sum(int(e.fields.get("repeats", 1)) for e in dead) == len(truth["dead"])
    assert sum(int(e.fields.get("repeats", 1)) for e in tbs) == len(truth["dead"])     # one traceback each
    assert dead[0].line == truth["dead"][0] and dead[-1].fields["last_line"] == truth["dead"][-1]
    assert tbs[-1].fields["last_line"] == truth["tracebacks"][-1]
    # The verdict is the one the crash decides, with or without the storm after it.
    a, _ = classify_paths([str(tmp_path / "a" / "vllm.log")])
    b, _ = classify_paths([str(tmp_path / "b" / "vllm.log")])
    assert (a.oom_class, a.summary) == (b.oom_class, b.summary)
    assert a.facts["failure"]["at"].rsplit(":", 1)[1] == b.facts["failure"]["at"].rsplit(":", 1)[1]


def test_an_error_that_differs_inside_a_repeated_block_is_read(tmp_path):
    """Skipping a repeated traceback needs its exact bytes: one that ends differently (here a real
    CUDA OOM among the dead-engine ones) is read in full and becomes its own record."""
    path = tmp_path / "vllm.log"
    dead_engine(path, 300)
    lines = path.read_text().splitlines()
    oom = ASGI_TRACEBACK[:-1] + ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                                 "total capacity of 79.15 GiB of which 1.31 GiB is free."]
    at = len(lines) - 9 * 100
    lines[at:at] = oom
    path.write_text("\n".join(lines) + "\n")
    ev = load_evidence([str(path)])
    marker = at + len(oom)
    assert any(e.kind == Kind.TORCH_OOM.value and e.line == marker for e in ev.items)


# --- stats lines of engines other than vLLM, once their leading words are learned ----------------
PREFILL = ("[2025-01-12 {t} TP0] Prefill batch. #new-seq: 1, #new-token: {n}, #cached-token: 512, token usage: "
           "{u:.2f}, #running-req: {r}, #queue-req: 0")
CACHE_HIT = "[2025-01-12 {t} TP0] Cache hit for rid={rid:032x}: {n} tokens reused"


def sglang_serving(path: Path, n: int, odd: dict[int, str] | None = None) -> list[str]:
    """An SGLang server serving: access lines, prefill and decode batches, cache-hit chatter; the
    `odd` lines are put at their indexes."""
    lines = ["[2025-01-12 11:00:00 TP0] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=1)",
             "[2025-01-12 11:00:30 TP0] The server is fired up and ready to roll!"]
    for i in range(n):
        sec = 60 + i // 40
        t = f"{11 + sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"
        if odd and i in odd:
            lines.append(odd[i].format(t=t))
        elif i % 9 == 0:
            lines.append(DECODE.format(t=t, r=40 + i % 7, tok=90_000 + i, u=0.20 + (i % 50) / 100, q=i % 3))
        elif i % 9 == 4:
            lines.append(PREFILL.format(t=t, n=1000 + i % 4000, u=0.20 + (i % 50) / 100, r=40 + i % 7))
        elif i % 9 == 7:
            lines.append(CACHE_HIT.format(t=t, rid=i * 7919, n=100 + i % 900))
        else:
            lines.append(SGL_ACCESS.format(t=t, p=40_000 + i % 9000))
    path.write_text("\n".join(lines) + "\n")
    return lines


def test_another_engines_stats_lines_are_held_whole_and_in_order(tmp_path):
    # The first SGLang stats lines are read one by one and their leading words learned; the
    # following chunks' stats lines are then found by those words and held raw all the same.
    lines = sglang_serving(tmp_path / "sglang.log", 60_000)
    truth = [i for i, line in enumerate(lines, 1) if "batch. #" in line]
    ev = load_evidence([str(tmp_path / "sglang.log")])
    stats = ev.of(Kind.STATS)
    assert stats and all(s.line in truth for s in stats)
    assert [s.line for s in stats if s.line >= truth[-256]] == truth[-256:]
    assert [s.seq for s in sorted(stats, key=lambda s: s.line)] == sorted(s.seq for s in stats)
    last = lines[truth[-1] - 1]
    assert stats[-1].line == truth[-1] and str(stats[-1].fields.get("running_requests", "")) in last


def test_a_failure_on_a_line_with_a_learned_stats_mark_is_read(tmp_path):
    # A learned mark counts a line as stats only where no line of the chunk could make a record:
    # a CUDA OOM printed on a decode-batch line deep into the log is still the failure.
    oom = ("[2025-01-12 {t} TP0] Decode batch. #running-req: 44, #token: 91234, token usage: 0.98, "
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    lines = sglang_serving(tmp_path / "sglang.log", 60_000, odd={45_001: oom})
    at = next(i for i, line in enumerate(lines, 1) if "OutOfMemoryError" in line)
    ev = load_evidence([str(tmp_path / "sglang.log")])
    assert any(e.line == at and e.kind in {Kind.CUDA_OOM.value, Kind.TORCH_OOM.value} for e in ev.items), \
        [(e.line, e.kind) for e in ev.items if e.kind not in {Kind.STATS.value}][:10]
