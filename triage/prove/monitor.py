"""What the server and the card do while the load runs: /metrics (KV usage, running, waiting,
preemptions) and NVML (memory in use, the card's total), sampled every interval, peaks kept.

NVML is read in a worker thread with its own bound (`read_gpus`): a wedged driver must not stall
the load. Without a driver the GPU part says why it is empty; the proof still runs.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..evidence.prometheus import concept_samples
from ..live.nvml import NoNvml, read_gpus

NVML_BOUND_S = 2.0
METRICS_MAX_BYTES = 8 << 20


@dataclass
class Peaks:
    samples: int = 0
    metrics_failures: int = 0
    metrics_problem: str | None = None
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    preemptions_first: float | None = None
    preemptions_last: float | None = None
    budget_share: float | None = None        # the engine's gpu_memory_utilization, from cache_config_info
    last_kv: float | None = None
    last_waiting: int | None = None
    gpu_note: str | None = None
    gpu_index: int | None = None
    gpu_name: str | None = None
    gpu_used_bytes: int | None = None        # the most any one card had in use
    gpu_total_bytes: int | None = None
    gpu_used_series: list[tuple[float, int]] = field(default_factory=list)

    @property
    def preemptions(self) -> int | None:
        if self.preemptions_first is None or self.preemptions_last is None:
            return None
        return int(max(0.0, self.preemptions_last - self.preemptions_first))

    def take_metrics(self, values: dict[str, float], labels: dict[str, str]) -> None:
        self.samples += 1
        kv = values.get("kv_cache_usage")
        if kv is not None:
            self.kv_usage = max(self.kv_usage or 0.0, kv)
            self.last_kv = kv
        for name, attr in (("requests_running", "running"), ("requests_waiting", "waiting")):
            if name in values:
                setattr(self, attr, max(getattr(self, attr) or 0, int(values[name])))
        if "requests_waiting" in values:
            self.last_waiting = int(values["requests_waiting"])
        pre = values.get("preemptions_total")
        if pre is not None:
            self.preemptions_first = pre if self.preemptions_first is None else self.preemptions_first
            self.preemptions_last = pre
        util = labels.get("gpu_memory_utilization")
        try:
            self.budget_share = float(util) if util not in (None, "None") else self.budget_share
        except ValueError:
            pass

    def take_gpus(self, t: float, gpus: Any) -> None:
        if isinstance(gpus, NoNvml):
            self.gpu_note = str(gpus)
            return
        if not gpus:
            self.gpu_note = "NVML lists no GPU: GPU memory not checked"
            return
        busiest = max(gpus, key=lambda g: g.used_share)
        self.gpu_used_series.append((round(t, 3), busiest.used_bytes))
        if self.gpu_used_bytes is None or busiest.used_bytes > self.gpu_used_bytes:
            self.gpu_used_bytes, self.gpu_total_bytes = busiest.used_bytes, busiest.total_bytes
            self.gpu_index, self.gpu_name = busiest.index, busiest.name


def parse_metrics(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """(concept -> value, the cache_config_info labels) from a /metrics page."""
    found = concept_samples(text)      # only the series it reads are parsed: cheap every second
    values: dict[str, float] = {}
    labels: dict[str, str] = {}
    for sample in found.samples:
        if sample.concept == "cache_config":
            labels = {str(k): str(v) for k, v in (sample.labels or {}).items()}
            continue
        if sample.concept.endswith("usage"):           # per engine: the worst one counts
            values[sample.concept] = max(values.get(sample.concept, 0.0), float(sample.value))
        else:
            values[sample.concept] = values.get(sample.concept, 0.0) + float(sample.value)
    return values, labels


async def sample_once(session: Any, url: str, peaks: Peaks, t: float, timeout_s: float, nvml: bool) -> None:
    """One /metrics scrape and, while NVML answers, one GPU reading."""
    import aiohttp

    try:
        async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            body = await resp.content.read(METRICS_MAX_BYTES)
            if resp.status == 200:
                peaks.take_metrics(*parse_metrics(body.decode("utf-8", errors="replace")))
            else:
                peaks.metrics_failures += 1
                peaks.metrics_problem = f"GET /metrics -> {resp.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        peaks.metrics_failures += 1
        peaks.metrics_problem = f"GET /metrics: {type(exc).__name__}: {exc}"[:200]
    if nvml and peaks.gpu_note is None:
        peaks.take_gpus(t, await asyncio.to_thread(read_gpus, NVML_BOUND_S))
