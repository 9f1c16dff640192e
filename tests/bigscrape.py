"""A deterministic /metrics scrape of any size: vLLM V1 series with many label values
(model_name, engine, finished_reason, le), DCGM framebuffer readings and many series of other
exporters, written as prometheus_client and the exporters write them.

    python -m tests.bigscrape OUT.prom 2000000     # a 2-million-series scrape to time by hand

Half the series are vLLM's, about a third of them histogram buckets; the first model
(`incident-model`, engine 0) is a saturated server, every other one is at ease.
"""
from __future__ import annotations

import sys
from typing import Iterator, TextIO

REASONS = ("stop", "length", "abort", "error")
LE = ("0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0",
      "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0", "+Inf")
ENGINES = 4
GPUS = 64
# Series per (model, engine): 3 gauges, 3 counters, 4 request_success, the histogram
# (buckets + _count + _sum) and cache_config_info.
PER_ENGINE = 3 + 3 + len(REASONS) + len(LE) + 2 + 1
MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
CODES = ("200", "400", "404", "500")
HTTP_LE = ("0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf")


def shape(series: int) -> dict[str, int]:
    """How many models (x ENGINES engines) and other-exporter series make about `series` series."""
    models = max(1, series // 2 // (ENGINES * PER_ENGINE))
    vllm = models * ENGINES * PER_ENGINE
    dcgm = GPUS * 3
    return {"models": models, "vllm": vllm, "dcgm": dcgm, "other": max(0, series - vllm - dcgm)}


def model(m: int) -> str:
    return "incident-model" if m == 0 else f"tenant-{m:06d}/Llama-3.1-8B-Instruct"


def _family(name: str, typ: str, help_: str) -> Iterator[str]:
    yield f"# HELP {name} {help_}\n"
    yield f"# TYPE {name} {typ}\n"


def lines(series: int) -> Iterator[str]:
    """The scrape, line by line (about `series` sample lines)."""
    s = shape(series)
    models = s["models"]
    units = [(m, e) for m in range(models) for e in range(ENGINES)]

    def lab(m: int, e: int) -> str:
        return f'engine="{e}",model_name="{model(m)}"'

    # other exporters first (a federated scrape), then vLLM, then DCGM, then more others
    other = s["other"]
    first = other // 2
    yield from other_lines(0, first)
    gauges = (("vllm:num_requests_running", "Number of requests in model execution batches.",
               lambda m, e: 212.0 if (m, e) == (0, 0) else float((m * 7 + e) % 40)),
              ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
               lambda m, e: 57.0 if (m, e) == (0, 0) else 0.0),
              ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
               lambda m, e: 0.9987 if (m, e) == (0, 0) else round(((m * 13 + e * 5) % 60) / 100, 4)))
    for name, help_, value in gauges:
        yield from _family(name, "gauge", help_)
        for m, e in units:
            yield f"{name}{{{lab(m, e)}}} {value(m, e)}\n"
    counters = (("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                 lambda m, e: 41.0 if (m, e) == (0, 0) else 0.0),
                ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                 lambda m, e: float(1000 + m * 3 + e)),
                ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                 lambda m, e: float(500 + m + e)))
    for name, help_, value in counters:
        yield from _family(f"{name}_total", "counter", help_)
        for m, e in units:
            yield f"{name}_total{{{lab(m, e)}}} {value(m, e)}\n"
    yield from _family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for m, e in units:
        for i, reason in enumerate(REASONS):
            yield f'vllm:request_success_total{{engine="{e}",finished_reason="{reason}",model_name="{model(m)}"}} {float((m + i) % 97)}\n'
    yield from _family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.")
    for m, e in units:
        for i, le in enumerate(LE):
            yield f'vllm:e2e_request_latency_seconds_bucket{{engine="{e}",le="{le}",model_name="{model(m)}"}} {float(i * 3 + m % 5)}\n'
        yield f"vllm:e2e_request_latency_seconds_count{{{lab(m, e)}}} {float(len(LE) * 3)}\n"
        yield f"vllm:e2e_request_latency_seconds_sum{{{lab(m, e)}}} {m * 1.5 + e}\n"
    yield from _family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    for m, e in units:
        yield (f'vllm:cache_config_info{{block_size="16",enable_prefix_caching="True",{lab(m, e)},'
               f'gpu_memory_utilization="0.9",num_gpu_blocks="{27910 + m % 7}"}} 1.0\n')
    for field, help_, value in (("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: 81270 if g == 0 else 40000 + g),
                                ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda g: 650 if g == 0 else 41920 - g),
                                ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", lambda g: 0)):
        yield from _family(field, "gauge", help_)
        for g in range(GPUS):
            yield (f'{field}{{gpu="{g % 8}",UUID="GPU-{g:04x}-5e1c",pci_bus_id="00000000:{g % 8:02X}:00.0",device="nvidia{g % 8}",'
                   f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-{g // 8:02d}"}} {value(g)}\n')
    yield from other_lines(first, other - first)


def other_lines(start: int, count: int) -> Iterator[str]:
    """`count` series of node-exporter CPU counters and an HTTP latency histogram (other exporters)."""
    cpu = count // 3
    yield from _family("node_cpu_seconds_total", "counter", "Seconds the CPUs spent in each mode.")
    for i in range(start, start + cpu):
        yield f'node_cpu_seconds_total{{cpu="{i // len(MODES)}",instance="10.0.{i // 65536 % 256}.{i // 256 % 256}:9100",mode="{MODES[i % len(MODES)]}"}} {i * 0.37:.2f}\n'
    yield from _family("http_request_duration_seconds", "histogram", "Duration of HTTP requests in seconds.")
    for i in range(start, start + count - cpu):
        handler, rest = divmod(i, len(CODES) * len(HTTP_LE))
        code, le = divmod(rest, len(HTTP_LE))
        name = "http_request_duration_seconds_bucket"
        yield f'{name}{{code="{CODES[code]}",handler="/api/v1/items/{handler}",le="{HTTP_LE[le]}",method="GET"}} {i % 1000}\n'


def write(out: TextIO, series: int) -> dict[str, int]:
    out.writelines(lines(series))
    return shape(series)


if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        print(write(fh, int(sys.argv[2])), file=sys.stderr)
