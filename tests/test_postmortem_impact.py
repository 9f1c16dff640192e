"""A postmortem's impact: counts agree with their nouns, and the requests a dead engine answered
with a server error (5xx access lines, which the reader otherwise passes over) are counted, the
same whether the log is read line by line or in bulk."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage.evidence import logs
from triage.evidence.kinds import Kind
from triage.evidence.load import load_evidence
from triage.postmortem.signals import impact_claims, trigger_claims
from triage.flowchart import decide
from triage.units import count_noun

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

UP = """\
(APIServer pid=7) INFO 11-20 10:00:00 [api_server.py:1] vLLM API server version 0.11.0
(APIServer pid=7) INFO 11-20 10:00:05 [launcher.py:1] Route: /v1/completions, Methods: POST
(APIServer pid=7) INFO:     Application startup complete.
"""
OK = '(APIServer pid=7) INFO:     10.0.0.{i}:4{i:04d} - "POST /v1/completions HTTP/1.1" 200 OK\n'
ERR = '(APIServer pid=7) INFO:     10.0.0.{i}:5{i:04d} - "POST /v1/completions HTTP/1.1" {status} Internal Server Error\n'
STATS = ("(APIServer pid=7) INFO 11-20 10:01:00 [loggers.py:127] Engine 000: Avg prompt throughput: 900.0 tokens/s, "
         "Avg generation throughput: 80.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 99.0%, "
         "Prefix cache hit rate: 0.0%\n")
CRASH = """\
(EngineCore_DP0 pid=9) ERROR 11-20 10:01:02 [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=9) ERROR 11-20 10:01:02 [core.py:710] Traceback (most recent call last):
(EngineCore_DP0 pid=9) ERROR 11-20 10:01:02 [core.py:710]   File "/vllm/v1/engine/core.py", line 701, in run_engine_core
(EngineCore_DP0 pid=9) ERROR 11-20 10:01:02 [core.py:710]     engine_core.run_busy_loop()
(EngineCore_DP0 pid=9) ERROR 11-20 10:01:02 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 2.45 GiB is reserved by PyTorch but unallocated.
(APIServer pid=7) ERROR 11-20 10:01:02 [async_llm.py:480] AsyncLLM output_handler failed.
"""


def _log(tmp_path: Path, before: int, after: int, served: int = 3000) -> Path:
    """Served requests, `before` 500s among them, the crash, then `after` 5xx answers among probes."""
    lines = [UP] + [OK.format(i=i % 250) for i in range(served)]
    lines[len(lines) // 2:len(lines) // 2] = [ERR.format(i=i, status=500) for i in range(before)]
    lines += [STATS, CRASH]
    for i in range(after):
        lines.append(ERR.format(i=i % 250, status=(500, 503)[i % 2]))
        lines.append('(APIServer pid=7) INFO:     10.0.0.5:4242 - "GET /health HTTP/1.1" 200 OK\n')
    path = tmp_path / "logs" / "vllm.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def _errors(path: Path) -> list:
    return [e for e in load_evidence([str(path)]).of(Kind.REQUEST_SERVED) if e.fields.get("status", 0) >= 500]


@pytest.mark.parametrize("bulk", [False, True], ids=["line-by-line", "bulk"])
def test_5xx_answers_after_the_failure_are_one_record_counting_them_all(tmp_path, monkeypatch, bulk):
    monkeypatch.setattr(logs, "PREFILTER_MIN_BYTES", 0 if bulk else 1 << 62)
    path = _log(tmp_path, before=4, after=2000)
    text = path.read_text().splitlines()
    first = next(i for i, line in enumerate(text, 1) if "EngineCore encountered" in line)
    first_5xx = next(i for i, line in enumerate(text, 1) if i > first and '" 50' in line)
    [rec] = _errors(path)
    assert rec.fields["repeats"] == 2000                       # the 500s before the failure are not its impact
    assert rec.line == first_5xx and rec.fields["status"] == 500 and rec.fields["path"] == "/v1/completions"
    claims = [c.text for c in impact_claims(load_evidence([str(path)]))]
    assert "2,000 requests answered with a 5xx status after the failure, in the attached logs' access lines" in claims


def test_a_log_without_a_failure_counts_no_5xx_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "PREFILTER_MIN_BYTES", 0)
    path = _log(tmp_path, before=4, after=0)
    path.write_text(path.read_text().split(STATS)[0])          # served, 4 of them 500s, nothing failed
    assert _errors(path) == []


def test_the_burst_sample_counts_every_500_the_dead_engine_gave():
    log = SAMPLES / "burst-long-prompts-v0" / "logs" / "vllm.log"
    total = sum('HTTP/1.1" 500' in line for line in log.read_text(encoding="utf-8").splitlines())
    claims = [c.text for c in impact_claims(load_evidence([str(log)]))]
    assert f"{total} requests answered with a 5xx status after the failure, in the attached logs' access lines" in claims


def test_one_request_is_a_request():
    evidence = load_evidence([str(SAMPLES / "prefix-cache-block-pool" / "logs" / "vllm.log")])
    texts = [c.text for c in impact_claims(evidence)] + [c.text for c in trigger_claims(evidence, decide(evidence)[0])]
    assert any(t.startswith("1 request was in flight when the engine died, and was dropped") for t in texts)
    assert any(t.startswith("Load just before it: 1 request running, 0 waiting") for t in texts)
    assert not any("1 requests" in t or "(s)" in t for t in texts)


def test_count_noun():
    assert [count_noun(n, "request") for n in (0, 1, 2, 1234)] == ["0 requests", "1 request", "2 requests",
                                                                    "1,234 requests"]
    assert count_noun(1, "GPU process", "GPU processes") == "1 GPU process"
    assert count_noun(3, "GPU process", "GPU processes") == "3 GPU processes"
