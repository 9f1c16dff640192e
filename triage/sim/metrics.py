"""GET /metrics: the V1 0.11 metric names and labels, rendered by prometheus_client.

A private registry (no process/python collectors from the test runner's globals). Counters
are declared without `_total` as 0.11 declares them, so the exposition carries the `_total`
samples and the `_created` gauges a real V1 server in single-process mode emits.
"""
from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from .args import SimArgs
from .engine import Snapshot
from .memory import BLOCK_SIZE, Sizing

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABELS = ["model_name", "engine"]


class SimMetrics:
    def __init__(self, args: SimArgs, sizing: Sizing) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._labels = {"model_name": args.model, "engine": "0"}
        r = self.registry
        self._running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                              _LABELS, registry=r)
        self._waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                              _LABELS, registry=r)
        self._kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", _LABELS, registry=r)
        self._counters = {
            "prefix_queries": Counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.", _LABELS, registry=r),
            "prefix_hits": Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                                   _LABELS, registry=r),
            "preemptions": Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   _LABELS, registry=r),
            "prompt_tokens": Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS, registry=r),
            "generation_tokens": Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         _LABELS, registry=r),
        }
        self._success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                _LABELS + ["finished_reason"], registry=r)
        self._seen: dict[str, int] = {name: 0 for name in [*self._counters, "finished"]}
        info = {"block_size": str(BLOCK_SIZE), "cache_dtype": "auto", "enable_prefix_caching": str(args.prefix_caching),
                "engine": "0", "gpu_memory_utilization": str(args.gpu_memory_utilization),
                "num_gpu_blocks": str(sizing.num_gpu_blocks), "num_cpu_blocks": "None",
                "kv_cache_memory_bytes": "None", "prefix_caching_hash_algo": "sha256", "sliding_window": "None"}
        cache_info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", sorted(info), registry=r)
        cache_info.labels(**info).set(1)
        for name in self._counters:
            self._counters[name].labels(**self._labels)
        self._success.labels(**self._labels, finished_reason="length")

    def render(self, snap: Snapshot) -> bytes:
        with self._lock:
            self._running.labels(**self._labels).set(snap.running)
            self._waiting.labels(**self._labels).set(snap.waiting)
            self._kv.labels(**self._labels).set(round(snap.kv_usage, 4))
            # Counters only go up: add what the engine counted since the last scrape.
            current = {"prefix_queries": snap.prefix_queries, "prefix_hits": snap.prefix_hits,
                       "preemptions": snap.preemptions, "prompt_tokens": snap.prompt_tokens,
                       "generation_tokens": snap.generation_tokens}
            for name, value in current.items():
                self._counters[name].labels(**self._labels).inc(max(0, value - self._seen[name]))
                self._seen[name] = max(value, self._seen[name])
            finished = max(0, snap.finished - self._seen["finished"])
            self._success.labels(**self._labels, finished_reason="length").inc(finished)
            self._seen["finished"] = max(snap.finished, self._seen["finished"])
            return generate_latest(self.registry)
