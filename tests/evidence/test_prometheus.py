"""/metrics scrapes through prometheus-client's parser: V0/V1 names, DCGM framebuffer, dating."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from triage.errors import BadInput
from triage.evidence import prometheus
from triage.evidence.base import InputFile, ParseContext
from triage.timeref import default_reference

V1 = b'''# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9913
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7953237247894502e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="27910"} 1.0
'''
V0 = b'''# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.42
# HELP vllm:gpu_prefix_cache_hit_rate GPU prefix cache block hit rate.
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} -1.0
'''
DCGM = b'''# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-604a",pci_bus_id="00000000:04:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-node-07"} 81270
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-604a",pci_bus_id="00000000:04:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-node-07"} 650
'''


def parse(data: bytes, name: str = "2026-03-12T14-16-00Z.prom"):
    src = InputFile(display=f"metrics/{name}", path=None, data=data)
    return list(prometheus.parse(src, ParseContext(times=default_reference())))


def test_sniff_claims_expositions_and_not_logs():
    assert prometheus.sniff(V1, "x") > 50 and prometheus.sniff(DCGM, "x") > 50
    assert prometheus.sniff(b"INFO 03-28 05:51:33 [loader.py:447] Loading weights took 1.83 seconds\n" * 5, "x") == 0


def test_v1_names_map_to_concepts_and_the_scrape_is_dated_by_its_name():
    recs = {r.fields["name"]: r for r in parse(V1)}
    kv = recs["kv_cache_usage"]
    assert kv.fields["value"] == pytest.approx(0.9913)
    assert kv.time == datetime(2026, 3, 12, 14, 16, tzinfo=timezone.utc)
    assert kv.line == 3 and kv.source == "metrics/2026-03-12T14-16-00Z.prom"
    assert recs["preemptions_total"].fields["value"] == 3.0
    assert recs["cache_config"].fields["labels"]["enable_prefix_caching"] == "True"


def test_v0_prefix_hit_rate_minus_one_means_disabled():
    recs = {r.fields["name"]: r for r in parse(V0)}
    assert recs["kv_cache_usage"].fields["value"] == 0.42
    assert recs["prefix_cache_hit_rate"].fields["disabled"] is True


def test_dcgm_framebuffer_becomes_one_gpu_reading_with_its_total():
    [gpu] = [r for r in parse(DCGM) if r.kind == "gpu_memory"]
    assert gpu.fields["used_bytes"] == 81270 << 20
    assert gpu.fields["total_bytes"] == (81270 + 650) << 20
    assert gpu.fields["host"] == "gpu-node-07"


def test_stray_lines_are_skipped_but_garbage_is_refused():
    recs = parse(V0 + b"this line is not exposition\n")
    assert {r.fields["name"] for r in recs} == {"kv_cache_usage", "prefix_cache_hit_rate"}
    with pytest.raises(BadInput):
        parse(b"# TYPE x gauge\nx{a=\"1\" 12\n")
