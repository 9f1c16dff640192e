"""alertmanager parser: webhook payloads (version "4") and /api/v2/alerts lists."""
from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import pytest

from triage.errors import BadInput
from triage.evidence import alertmanager, kubernetes, memory_stats, nvidia_smi
from triage.evidence.base import InputFile, ParseContext
from triage.evidence.kinds import Kind
from triage.timeref import default_reference

# The body Alertmanager POSTs to a webhook receiver: compact Go JSON (`&` escaped as \u0026),
# group status "firing" while one of its alerts has resolved.
WEBHOOK = r'''{"receiver":"vllm-oncall","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"VLLMKVCacheHigh","instance":"gpu-node-07:8000","job":"vllm","model_name":"meta-llama/Llama-3.1-70B-Instruct","namespace":"inference","pod":"vllm-llama-70b-6d9f7c8b5-x2kqp","severity":"critical"},"annotations":{"description":"KV cache usage has been above 98% for 5 minutes on gpu-node-07:8000.","runbook_url":"https://runbooks.example.com/vllm/kv-cache","summary":"vLLM KV cache nearly full (99.2%)"},"startsAt":"2025-03-11T13:57:31.412Z","endsAt":"0001-01-01T00:00:00Z","generatorURL":"http://prometheus-k8s-0:9090/graph?g0.expr=vllm%3Akv_cache_usage_perc+%3E+0.98\u0026g0.tab=1","fingerprint":"4a7b1c2d3e4f5061"},{"status":"resolved","labels":{"alertname":"VLLMPreemptionsRising","instance":"gpu-node-07:8000","job":"vllm","namespace":"inference","pod":"vllm-llama-70b-6d9f7c8b5-x2kqp","severity":"warning"},"annotations":{"summary":"vLLM is preempting requests"},"startsAt":"2025-03-11T13:40:01.9Z","endsAt":"2025-03-11T14:01:46.205Z","generatorURL":"http://prometheus-k8s-0:9090/graph?g0.expr=rate%28vllm%3Anum_preemptions_total%5B5m%5D%29+%3E+0\u0026g0.tab=1","fingerprint":"9f8e7d6c5b4a3921"}],"groupLabels":{"namespace":"inference"},"commonLabels":{"instance":"gpu-node-07:8000","job":"vllm","namespace":"inference","pod":"vllm-llama-70b-6d9f7c8b5-x2kqp"},"commonAnnotations":{},"externalURL":"http://alertmanager-main-0:9093","version":"4","groupKey":"{}/{severity=~\"warning|critical\"}:{namespace=\"inference\"}","truncatedAlerts":0}
'''

# A later, all-resolved notification for the same group (v0.32+ adds notification_reason).
RESOLVED = {
    "receiver": "vllm-oncall", "status": "resolved",
    "alerts": [{"status": "resolved",
                "labels": {"alertname": "VLLMKVCacheHigh", "instance": "gpu-node-07:8000",
                           "severity": "critical"},
                "annotations": {"summary": "vLLM KV cache nearly full (99.2%)"},
                "startsAt": "2025-03-11T13:57:31.412Z", "endsAt": "2025-03-11T14:12:31.412Z",
                "generatorURL": "", "fingerprint": "4a7b1c2d3e4f5061"}],
    "groupLabels": {"namespace": "inference"}, "commonLabels": {}, "commonAnnotations": {},
    "externalURL": "http://alertmanager-main-0:9093", "notification_reason": "resolved", "version": "4",
    "groupKey": "{}/{severity=~\"warning|critical\"}:{namespace=\"inference\"}", "truncatedAlerts": 0,
}

# `curl alertmanager:9093/api/v2/alerts`
API_V2 = r'''[{"annotations":{"summary":"GPU 0 framebuffer above 97%"},"endsAt":"2025-03-11T14:06:31.412Z","fingerprint":"0c1d2e3f4a5b6c7d","receivers":[{"name":"vllm-oncall"}],"startsAt":"2025-03-11T13:55:01.000Z","status":{"inhibitedBy":[],"silencedBy":[],"state":"active"},"updatedAt":"2025-03-11T14:02:31.412Z","generatorURL":"http://prometheus-k8s-0:9090/graph","labels":{"Hostname":"gpu-node-07","alertname":"GPUFramebufferHigh","gpu":"0","severity":"warning"}}]
'''

OTHER_FORMATS = {
    "nvidia_smi_csv": b"pid, process_name, used_gpu_memory [MiB]\n3858903, VLLM::EngineCore, 6265 MiB\n",
    "memory_stats": b'{"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2048, "num_ooms": 0}',
    "pod": b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-0"}, "status": {"containerStatuses": []}}',
    "vllm_log": b"INFO 03-11 14:02:31 [api_server.py:1090] vLLM API server version 0.8.5.post1\n",
    "prometheus_alerts": b'{"status":"success","data":{"alerts":[{"labels":{"alertname":"X"},'
                         b'"state":"firing","activeAt":"2025-03-11T13:57:31.412Z","value":"1e+00"}]}}',
    "prometheus_query": b'{"status":"success","data":{"resultType":"vector","result":[]}}',
}


def _parse(data: str | bytes, display: str = "alerts/webhook.json") -> list:
    raw = data.encode() if isinstance(data, str) else data
    ctx = ParseContext(times=default_reference())
    return list(alertmanager.parse(InputFile(display=display, path=None, data=raw), ctx))


# ---------------------------------------------------------------------------------- sniff


@pytest.mark.parametrize("data", [WEBHOOK, json.dumps(RESOLVED, indent=2),
                                  json.dumps([json.loads(WEBHOOK), RESOLVED], indent=2), API_V2])
def test_sniff_claims_alertmanager_json(data: str) -> None:
    assert alertmanager.sniff(data.encode(), "x") >= 50


@pytest.mark.parametrize("name", sorted(OTHER_FORMATS))
def test_sniff_rejects_other_formats(name: str) -> None:
    assert alertmanager.sniff(OTHER_FORMATS[name], "x") == 0


@pytest.mark.parametrize("data", [WEBHOOK, API_V2])
def test_other_parsers_do_not_claim_alertmanager_json(data: str) -> None:
    for mod in (nvidia_smi, memory_stats, kubernetes):
        assert mod.sniff(data.encode(), "x") == 0, mod.NAME


def test_sniff_never_raises_on_random_bytes() -> None:
    rng = random.Random(4)
    for size in (0, 1, 9, 256, 4096):
        for _ in range(20):
            blob = bytes(rng.randrange(256) for _ in range(size))
            assert alertmanager.sniff(blob, "x") == 0
    assert alertmanager.sniff(b"alerts: receiver: groupKey:\n", "x") == 0


# ---------------------------------------------------------------------------------- parse


def test_webhook_alerts() -> None:
    ev = _parse(WEBHOOK)
    assert [e.kind for e in ev] == [Kind.ALERT.value] * 2
    firing, resolved = ev
    f = firing.fields
    assert f["alertname"] == "VLLMKVCacheHigh"
    assert f["status"] == "firing" and f["severity"] == "critical"
    assert f["starts_at"] == "2025-03-11T13:57:31.412Z"
    assert f["ends_at"] is None                                   # the zero time 0001-01-01
    assert f["labels"]["pod"] == "vllm-llama-70b-6d9f7c8b5-x2kqp"
    assert f["annotations"]["summary"] == "vLLM KV cache nearly full (99.2%)"
    assert f["fingerprint"] == "4a7b1c2d3e4f5061"
    assert f["receiver"] == "vllm-oncall"
    assert f["group_key"] == '{}/{severity=~"warning|critical"}:{namespace="inference"}'
    assert f["generator_url"].endswith("0.98&g0.tab=1")
    assert firing.time == datetime(2025, 3, 11, 13, 57, 31, 412000, tzinfo=timezone.utc)
    assert firing.text == ("ALERT VLLMKVCacheHigh firing (severity=critical) instance=gpu-node-07:8000 "
                           "namespace=inference pod=vllm-llama-70b-6d9f7c8b5-x2kqp: "
                           "vLLM KV cache nearly full (99.2%)")
    assert firing.line == 1 and firing.source == "alerts/webhook.json"


def test_resolved_alert_is_timed_at_its_end() -> None:
    resolved = _parse(WEBHOOK)[1]
    assert resolved.fields["status"] == "resolved"
    assert resolved.fields["ends_at"] == "2025-03-11T14:01:46.205Z"
    assert resolved.fields["starts_at"] == "2025-03-11T13:40:01.9Z"
    assert resolved.time == datetime(2025, 3, 11, 14, 1, 46, 205000, tzinfo=timezone.utc)
    assert resolved.text.startswith("ALERT VLLMPreemptionsRising resolved (severity=warning)")


def test_list_of_payloads_with_lines() -> None:
    text = json.dumps([json.loads(WEBHOOK), RESOLVED], indent=2)
    ev = _parse(text)
    assert [(e.fields["alertname"], e.fields["status"]) for e in ev] == [
        ("VLLMKVCacheHigh", "firing"), ("VLLMPreemptionsRising", "resolved"), ("VLLMKVCacheHigh", "resolved")]
    assert ev[2].time == datetime(2025, 3, 11, 14, 12, 31, 412000, tzinfo=timezone.utc)
    assert ev[2].fields["generator_url"] is None
    lines = text.splitlines()
    assert all('"startsAt"' in lines[e.line - 1] for e in ev)


def test_alert_status_falls_back_to_the_group_status() -> None:
    payload = json.loads(WEBHOOK)
    for alert in payload["alerts"]:
        del alert["status"]
    assert [e.fields["status"] for e in _parse(json.dumps(payload))] == ["firing", "firing"]


def test_times_with_offsets_and_nanoseconds_are_utc() -> None:
    payload = json.loads(WEBHOOK)
    payload["alerts"][0]["startsAt"] = "2025-03-11T14:57:31.412345678+01:00"
    e = _parse(json.dumps(payload))[0]
    assert e.time == datetime(2025, 3, 11, 13, 57, 31, 412345, tzinfo=timezone.utc)
    assert e.fields["starts_at"] == "2025-03-11T14:57:31.412345678+01:00"


def test_api_v2_alert_list() -> None:
    (e,) = _parse(API_V2, display="alerts/api-v2.json")
    f = e.fields
    assert (f["alertname"], f["status"], f["state"], f["severity"]) == (
        "GPUFramebufferHigh", "firing", "active", "warning")
    assert f["receiver"] == "vllm-oncall" and f["group_key"] is None
    assert f["ends_at"] == "2025-03-11T14:06:31.412Z"             # API v2: the current expiry
    assert e.time == datetime(2025, 3, 11, 13, 55, 1, tzinfo=timezone.utc)
    assert e.text == "ALERT GPUFramebufferHigh firing (severity=warning) Hostname=gpu-node-07 gpu=0: " \
                     "GPU 0 framebuffer above 97%"


def test_render_without_severity_or_summary() -> None:
    payload = {"version": "4", "receiver": "r", "status": "firing", "groupKey": "{}:{}",
               "alerts": [{"labels": {"alertname": "Watchdog"}, "annotations": {},
                           "startsAt": "2025-03-11T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z"}]}
    (e,) = _parse(json.dumps(payload))
    assert e.text == "ALERT Watchdog firing"
    assert e.fields["fingerprint"] is None and e.fields["severity"] is None


def test_empty_alert_list_is_valid() -> None:
    assert _parse('{"version":"4","receiver":"r","status":"resolved","groupKey":"{}:{}","alerts":[]}') == []


def test_truncated_json_is_bad_input() -> None:
    with pytest.raises(BadInput) as err:
        _parse(WEBHOOK[:700])
    assert str(err.value).startswith("alerts/webhook.json: ")


def test_other_json_is_bad_input() -> None:
    with pytest.raises(BadInput):
        _parse(OTHER_FORMATS["prometheus_query"])
