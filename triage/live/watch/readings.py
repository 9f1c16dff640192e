"""What one `triage watch` reading holds, and its JSON form (schema `triage.watch/v1`).

`triage watch --once --json` prints one `Reading` as this object (every number is a JSON number
or null; null means "not known from this reading", never zero):

  schema        "triage.watch/v1"
  time          when the reading was taken, UTC RFC 3339
  interval_s    the watch interval; timeout_s the per-source timeout (shorter than the interval)
  servers[]     one per --vllm-url, in the order given:
    url                       the base URL as given (the exporter's `server` label)
    gpus                      NVML indexes judged against this server's budget
    sources                   {metrics|health|hooks: {ok, detail, took_s}}: each source's last answer,
                              or why there was none (connection refused, timed out after 0.8 s, ...)
    healthy                   /health answered 200 (false: the front end is up but the engine is not)
    kv_cache_usage            0-1, the fullest engine's KV pool
    requests_running, requests_waiting
    preemptions_per_s         rate of vllm:num_preemptions_total since the previous reading
    request_success_per_s     rate of vllm:request_success_total since the previous reading
    prefix_caching            true / false / null (from vllm:cache_config_info, or V0's hit-rate gauge)
    prefix_cache_hit_ratio    hits / queries since the previous reading (V1), or V0's gauge
    prefix_cache_hit_ratio_window, hit_window_s
                              the same over the last few minutes (what the risk judges: a 1 s
                              interval often holds no query at all)
    gpu_memory_utilization    the engine's budget, 0-1 (vllm:cache_config_info)
    kv_capacity_tokens        num_gpu_blocks x block_size
    max_model_len             from /v1/models
    discrepancy_points        {gpu index: NVML used share minus the budget, in points of the card}
    fragmentation             from the newest triage.hooks memory_stats dump, or null:
                              {ratio, inactive_split_bytes, reserved_bytes, file, time, age_s, pid, current}
    load                      {points, mean_running, steady}: running requests over the trend window
    risks[]                   {class, level (warning|critical), reasons[]}: most pressing first
    risk                      risks[0] or null: the class this server is heading for
    risk_unknown              why no risk could be judged (its /metrics not read), else null: an
                              unreachable server is unknown, not "no risk"
  gpus[]        one per NVML device: index, name, uuid, used_bytes, total_bytes, used_share,
                trend {slope_bytes_per_hour, span_s, points, rise_bytes} (null until 2 points)
  nvml          {ok, detail, took_s}, or null with --no-nvml
  warnings[]    one line per condition currently raised (what --incident writes, de-duplicated)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...classes import registry

SCHEMA = "triage.watch/v1"
RISK_CLASSES = registry().gpu_oom_ids()       # watch warns of the GPU OOM classes, in registry order
LEVELS = ("warning", "critical")


@dataclass(frozen=True)
class Source:
    """One source's last answer: ok, or why not, in one line."""

    ok: bool
    detail: str
    took_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail,
                "took_s": round(self.took_s, 4) if self.took_s is not None else None}


@dataclass(frozen=True)
class Scrape:
    """The series watch reads from one /metrics answer, under the evidence parser's concept names
    (V0 and V1 alike), summed over label sets except where noted."""

    kv_cache_usage: float | None = None             # the fullest engine's pool (max, not sum)
    running: float | None = None
    waiting: float | None = None
    preemptions_total: float | None = None
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hit_rate_gauge: float | None = None      # V0's vllm:gpu_prefix_cache_hit_rate (-1: off)
    success_total: float | None = None
    gpu_memory_utilization: float | None = None
    prefix_caching: bool | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None


@dataclass(frozen=True)
class Fragmentation:
    """inactive_split / reserved of one triage.hooks memory_stats dump (the worst device's)."""

    ratio: float
    inactive_split_bytes: int
    reserved_bytes: int
    file: str
    time: str | None
    age_s: float | None
    pid: int | None
    current: bool           # the process that wrote it still runs: its allocator is today's

    def to_json(self) -> dict[str, Any]:
        return {"ratio": round(self.ratio, 4), "inactive_split_bytes": self.inactive_split_bytes,
                "reserved_bytes": self.reserved_bytes, "file": self.file, "time": self.time,
                "age_s": _round(self.age_s, 1), "pid": self.pid, "current": self.current}


@dataclass(frozen=True)
class Trend:
    """Least-squares slope of GPU memory in use over the bounded window."""

    slope_bytes_per_hour: float
    span_s: float
    points: int

    @property
    def rise_bytes(self) -> float:
        """What the slope adds up to over the window (the fitted rise, not last minus first)."""
        return self.slope_bytes_per_hour * self.span_s / 3600

    def to_json(self) -> dict[str, Any]:
        return {"slope_bytes_per_hour": round(self.slope_bytes_per_hour), "span_s": round(self.span_s, 1),
                "points": self.points, "rise_bytes": round(self.rise_bytes)}


@dataclass(frozen=True)
class Load:
    """Running requests over the trend window: is the load flat (the leak rule needs it)?"""

    points: int
    mean_running: float | None
    steady: bool

    def to_json(self) -> dict[str, Any]:
        return {"points": self.points, "mean_running": _round(self.mean_running, 2), "steady": self.steady}


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    uuid: str
    used_bytes: int
    total_bytes: int
    trend: Trend | None = None

    @property
    def used_share(self) -> float | None:
        return self.used_bytes / self.total_bytes if self.total_bytes else None

    @property
    def fills_in_s(self) -> float | None:
        """At the trend's slope, seconds until nothing of the card is free (None: not rising)."""
        if self.trend is None or self.trend.slope_bytes_per_hour <= 0 or not self.total_bytes:
            return None
        return max(0.0, self.total_bytes - self.used_bytes) / (self.trend.slope_bytes_per_hour / 3600)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "uuid": self.uuid, "used_bytes": self.used_bytes,
                "total_bytes": self.total_bytes, "used_share": _round(self.used_share, 4),
                "trend": self.trend.to_json() if self.trend else None}


@dataclass(frozen=True)
class Risk:
    oom_class: str          # one of RISK_CLASSES
    level: str              # one of LEVELS
    reasons: tuple[str, ...]
    fills_card_in_s: float | None = None    # a leak: at its slope, the time until the card is full

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"class": self.oom_class, "level": self.level, "reasons": list(self.reasons)}
        if self.fills_card_in_s is not None:
            out["fills_card_in_s"] = round(self.fills_card_in_s)
        return out


@dataclass(frozen=True)
class ServerView:
    """One server in one reading: the scrape with its rates, and what it is judged against."""

    url: str
    sources: dict[str, Source]
    gpus: tuple[int, ...] = ()
    healthy: bool | None = None
    kv_cache_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions_per_s: float | None = None
    request_success_per_s: float | None = None
    prefix_caching: bool | None = None
    prefix_hit_ratio: float | None = None
    prefix_hit_ratio_window: float | None = None
    hit_window_s: float | None = None
    gpu_memory_utilization: float | None = None
    kv_capacity_tokens: int | None = None
    max_model_len: int | None = None
    fragmentation: Fragmentation | None = None
    load: Load | None = None
    risks: tuple[Risk, ...] = ()

    @property
    def hit_window(self) -> str:
        """Over what the windowed hit rate was counted, in words."""
        return f"over the last {self.hit_window_s:.0f} s" if self.hit_window_s else "since the server started"

    @property
    def reachable(self) -> bool:
        return any(s.ok for k, s in self.sources.items() if k in ("metrics", "health"))

    @property
    def risk_unknown(self) -> str | None:
        """Why no OOM risk could be judged (its /metrics were not read), or None: a server that
        cannot be read is not a server without risk."""
        metrics = self.sources.get("metrics")
        if metrics is not None and metrics.ok:
            return None
        return f"/metrics not read ({metrics.detail})" if metrics is not None else "/metrics not read"

    def discrepancy(self, gpu: GpuView) -> float | None:
        """NVML used share minus the engine's budget, in percentage points of the card."""
        if self.gpu_memory_utilization is None or gpu.used_share is None:
            return None
        return 100 * (gpu.used_share - self.gpu_memory_utilization)

    def to_json(self, gpus: dict[int, GpuView]) -> dict[str, Any]:
        gaps = {str(i): self.discrepancy(gpus[i]) for i in self.gpus if i in gpus}
        return {
            "url": self.url, "gpus": list(self.gpus),
            "sources": {k: v.to_json() for k, v in self.sources.items()},
            "healthy": self.healthy, "kv_cache_usage": _round(self.kv_cache_usage, 4),
            "requests_running": _round(self.running, 1), "requests_waiting": _round(self.waiting, 1),
            "preemptions_per_s": _round(self.preemptions_per_s, 3),
            "request_success_per_s": _round(self.request_success_per_s, 3),
            "prefix_caching": self.prefix_caching, "prefix_cache_hit_ratio": _round(self.prefix_hit_ratio, 4),
            "prefix_cache_hit_ratio_window": _round(self.prefix_hit_ratio_window, 4),
            "hit_window_s": _round(self.hit_window_s, 1),
            "gpu_memory_utilization": self.gpu_memory_utilization, "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_model_len": self.max_model_len,
            "discrepancy_points": {k: _round(v, 2) for k, v in gaps.items()},
            "fragmentation": self.fragmentation.to_json() if self.fragmentation else None,
            "load": self.load.to_json() if self.load else None,
            "risks": [r.to_json() for r in self.risks],
            "risk": self.risks[0].to_json() if self.risks else None,
            "risk_unknown": None if self.risks else self.risk_unknown,   # why there is no judgement at all
        }


@dataclass(frozen=True)
class Condition:
    """A condition that is raised now: `key` identifies it across readings (de-duplication),
    `title` names it (what a "cleared" line repeats), `text` says it with the numbers of the
    reading that raised it."""

    key: tuple[str, ...]
    title: str
    text: str


@dataclass(frozen=True)
class Reading:
    time: datetime
    interval_s: float
    timeout_s: float
    servers: tuple[ServerView, ...]
    gpus: tuple[GpuView, ...]
    nvml: Source | None
    warnings: tuple[Condition, ...] = field(default=())

    def gpu_map(self) -> dict[int, GpuView]:
        return {g.index: g for g in self.gpus}

    def any_source_ok(self) -> bool:
        """Whether anything at all was read (the exit code of --once rests on it)."""
        if self.nvml is not None and self.nvml.ok:
            return True
        return any(s.ok for server in self.servers for s in server.sources.values())

    def to_json(self) -> dict[str, Any]:
        from ...timestamps import rfc3339

        gpus = self.gpu_map()
        return {"schema": SCHEMA, "time": rfc3339(self.time), "interval_s": self.interval_s,
                "timeout_s": round(self.timeout_s, 3),
                "servers": [s.to_json(gpus) for s in self.servers],
                "gpus": [g.to_json() for g in self.gpus],
                "nvml": self.nvml.to_json() if self.nvml else None,
                "warnings": [w.text for w in self.warnings]}


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None
