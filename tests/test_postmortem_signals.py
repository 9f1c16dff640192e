"""A postmortem's "would have fired" claims apply the shipped rule's threshold and its `for:` to
the evidence's own readings, and an alert is suggested only where it precedes the verdict's OOM."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from triage.advice import advise
from triage.evidence.load import load_evidence
from triage.flowchart import decide
from triage.postmortem import signals
from triage.thresholds import DISCREPANCY, KV_HIGH, LOW_HIT_RATE

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "triage-alerts.yaml"
T0 = datetime(2026, 11, 20, 10, 0, 0, tzinfo=timezone.utc)


def _rules() -> dict[str, dict]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def _for(rule: dict) -> timedelta:
    text = rule["for"]
    return timedelta(minutes=int(text[:-1])) if text.endswith("m") else timedelta(seconds=int(text[:-1]))


def test_the_claims_use_the_shipped_rules_durations_and_thresholds():
    rules = _rules()
    assert _for(rules["TriageKvCacheHigh"]) == signals.KV_HOLD and f"> {KV_HIGH:.2f}" in rules["TriageKvCacheHigh"]["expr"]
    assert _for(rules["TriageNvmlEngineDiscrepancy"]) == signals.DISCREPANCY_HOLD
    assert f"> {100 * DISCREPANCY:g}" in rules["TriageNvmlEngineDiscrepancy"]["expr"]
    assert _for(rules["TriagePrefixCacheLowHitRate"]) == signals.PREFIX_LOW_HOLD
    assert f"< {LOW_HIT_RATE:.2f}" in rules["TriagePrefixCacheLowHitRate"]["expr"]


def test_saturation_warns_and_memory_outside_the_budget_pages():
    rules = _rules()
    assert rules["TriageKvCacheCritical"]["labels"]["severity"] == "warning"
    assert rules["TriageKvCacheHigh"]["labels"]["severity"] == "warning"
    assert rules["TriageNvmlEngineDiscrepancy"]["labels"]["severity"] == "critical"


def test_a_condition_fires_only_after_holding_for_the_rules_duration():
    hold = timedelta(minutes=15)
    assert signals.held_for([(T0, True, "a:1")], hold) is None                   # one reading never does
    short = [(T0 + timedelta(minutes=m), True, f"a:{m}") for m in range(0, 14)]
    assert signals.held_for(short, hold) is None                                 # 13 minutes of it
    broken = short + [(T0 + timedelta(minutes=14), False, "a:14"), (T0 + timedelta(minutes=20), True, "a:20")]
    assert signals.held_for(broken, hold) is None                                # the run starts again
    long = [(T0 + timedelta(minutes=m), True, f"a:{m}") for m in range(0, 20)]
    assert signals.held_for(long, hold) == (T0, "a:0", T0 + timedelta(minutes=15), "a:15")


def _stats_line(minute: int, hit: float) -> str:
    return (f"(APIServer pid=1) INFO 11-20 10:{minute:02d}:00 [loggers.py:127] Engine 000: Avg prompt throughput: "
            f"21000.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Running: 48 reqs, Waiting: 30 reqs, GPU KV "
            f"cache usage: 97.0%, Prefix cache hit rate: {hit:.1f}%\n")


def _verdict(tmp_path: Path, minutes: range):
    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=1) INFO 11-20 09:59:00 [api_server.py:1839] vLLM API server version 0.11.0\n"
        "(APIServer pid=1) INFO 11-20 09:59:00 [utils.py:233] non-default args: {'model': 'm', "
        "'enable_prefix_caching': True, 'max_num_batched_tokens': 16384}\n"
        + "".join(_stats_line(m, 4.0) for m in minutes)
        + f"(EngineCore_DP0 pid=2) ERROR 11-20 10:{minutes[-1] + 1:02d}:00 [core.py:710] torch.OutOfMemoryError: CUDA "
          "out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB is "
          "free. Including non-PyTorch memory, this process has 78.18 GiB memory in use. Of the allocated memory "
          "77.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.\n")
    ev = load_evidence([str(log)])
    verdict, incident = decide(ev)
    advise(verdict, incident)
    return ev, verdict


def test_a_burst_gets_no_hit_rate_alert_however_long_the_rate_was_low(tmp_path):
    ev, verdict = _verdict(tmp_path, range(0, 30))
    assert verdict.oom_class.value == "burst"
    found = signals.earlier_signals(ev, verdict, T0 + timedelta(hours=1))
    assert not [s for s in found if "prefix cache" in s.alert]
    # the KV cache held above 90% for the rule's 5 minutes: that warning would have fired, at 10:05
    kv = [s for s in found if s.alert.startswith("KV cache")]
    assert kv and kv[0].time == "10:05:00"


def test_one_reading_above_the_kv_threshold_is_not_an_alert_that_would_have_fired(tmp_path):
    ev, verdict = _verdict(tmp_path, range(0, 1))
    found = signals.earlier_signals(ev, verdict, T0 + timedelta(hours=1))
    assert not [s for s in found if s.alert.startswith("KV cache")]
