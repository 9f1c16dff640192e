"""`Watcher.read()`: one reading of every source, with the state that turns readings into rates.

Counters become rates between two readings, GPU memory a trend over the bounded window, running
requests a load series (is it flat?), and the prefix-cache counters a hit rate over the last few
minutes. Every server is read in a thread of its own, all within one deadline shorter than the
interval, so one slow or dead server never delays the others; a server whose previous request
has still not returned (a DNS lookup ignores socket timeouts) is reported as such and skipped.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Sequence

from .fragments import read_fragmentation
from .gpus import NvmlSession
from .readings import Condition, GpuView, Load, Reading, Scrape, ServerView, Source, Trend
from .risk import LIMITS, Limits, assess
from .scrape import Endpoint, ServerFetch, fetch
from .trend import Window

HIT_WINDOW_S = 300.0          # the hit rate the risk judges: a few minutes of prefix-cache queries
MODELS_RETRY_S = 30.0         # /v1/models (max_model_len) is asked again this often until it answers
MAX_TIMEOUT_S = 10.0


def timeout_for(interval_s: float) -> float:
    """Each reading's deadline: well inside the interval, so readings never pile up."""
    return min(MAX_TIMEOUT_S, max(0.05, 0.8 * interval_s))


@dataclass(frozen=True)
class ServerSpec:
    url: str
    gpus: tuple[int, ...] | None = None        # None: every GPU when it is the only server, else none
    hooks_dir: str | None = None


@dataclass
class _Server:
    spec: ServerSpec
    endpoint: Endpoint
    last: tuple[float, Scrape] | None = None                      # the previous successful scrape
    known: dict[str, object] = field(default_factory=dict)        # settings that outlive a failed scrape
    hits: deque[tuple[float, float, float]] = field(default_factory=deque)    # (t, hits, queries)
    load: Window = field(default_factory=Window)
    models_after: float = 0.0
    asking_models: bool = False
    busy: threading.Thread | None = None


class Watcher:
    def __init__(self, servers: Sequence[ServerSpec], interval_s: float, *, nvml: bool = True,
                 limits: Limits = LIMITS, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 fetcher: Callable[[Endpoint, float, bool], ServerFetch] | None = None,
                 nvml_session: NvmlSession | None = None) -> None:
        """`fetcher` and `nvml_session` replace the HTTP scrape and NVML (a drill in simulated time)."""
        self.interval_s = interval_s
        self.timeout_s = timeout_for(interval_s)
        self.limits = limits
        self._clock, self._now, self._fetch = clock, now, fetcher
        self._servers = [_Server(s, Endpoint(s.url)) for s in servers]
        self._nvml = nvml_session if nvml_session is not None else (NvmlSession() if nvml else None)
        self._nvml_seen = False
        self._trends: dict[str, Window] = {}

    @property
    def servers(self) -> list[ServerSpec]:
        return [s.spec for s in self._servers]

    # -- one reading -------------------------------------------------------------------------------
    def read(self) -> Reading:
        t = self._clock()
        join = self._start_fetches(t)
        nvml_source, gpus = self._read_gpus(t)       # meanwhile: NVML shares the reading's deadline
        fetched = join()
        views = []
        only_one = len(self._servers) == 1
        for server, got in zip(self._servers, fetched):
            view = self._view(server, got, t, gpus, only_one)
            views.append(replace(view, risks=assess(view, gpus, self.limits)))
        reading = Reading(self._now(), self.interval_s, self.timeout_s, tuple(views), tuple(gpus), nvml_source)
        return replace(reading, warnings=tuple(self._conditions(reading)))

    def _start_fetches(self, t: float) -> Callable[[], list[ServerFetch | Source]]:
        """Every server at once, each in its own thread; the returned call joins them all by one
        deadline and gives each server's answer (or why there is none)."""
        results: list[ServerFetch | Source | None] = [None] * len(self._servers)
        threads: list[tuple[int, threading.Thread]] = []
        for i, server in enumerate(self._servers):
            if server.busy is not None and server.busy.is_alive():
                results[i] = Source(False, f"the previous request has not returned (over {self.timeout_s:.3g} s): "
                                           "skipped")
                continue
            server.asking_models = server.known.get("max_model_len") is None and t >= server.models_after

            def run(i: int = i, server: _Server = server) -> None:
                results[i] = (self._fetch or fetch)(server.endpoint, self.timeout_s, server.asking_models)

            thread = threading.Thread(target=run, name=f"triage-watch-{i}", daemon=True)
            thread.start()
            threads.append((i, thread))

        def join() -> list[ServerFetch | Source]:
            deadline = t + self.timeout_s + 0.2      # fetch() keeps its own deadline; this is the backstop
            for i, thread in threads:
                thread.join(max(0.0, deadline - self._clock()))
                if thread.is_alive():
                    self._servers[i].busy = thread
                    results[i] = Source(False, f"timed out after {self.timeout_s:.3g} s")
            return [r if r is not None else Source(False, "no answer") for r in results]
        return join

    def _read_gpus(self, t: float) -> tuple[Source | None, list[GpuView]]:
        if self._nvml is None:
            return None, []
        started = self._clock()
        got = self._nvml.read(self.timeout_s)
        took = self._clock() - started
        if not isinstance(got, list):
            return Source(False, got.reason, took), []
        self._nvml_seen = True
        views = []
        for g in got:
            window = self._trends.setdefault(g.uuid or str(g.index), Window())
            window.add(t, float(g.used_bytes))
            fit = window.fit()
            trend = Trend(fit.slope_per_s * 3600, fit.span_s, fit.points) if fit else None
            views.append(GpuView(g.index, g.name, g.uuid, g.used_bytes, g.total_bytes, trend))
        return Source(True, f"{len(views)} GPU(s) in {took * 1000:.0f} ms", took), views

    def _view(self, server: _Server, got: ServerFetch | Source, t: float, gpus: list[GpuView],
              only_one: bool) -> ServerView:
        spec = server.spec
        if spec.gpus is not None:
            own = tuple(spec.gpus)
        else:
            own = tuple(g.index for g in gpus) if only_one else ()
        sources: dict[str, Source] = {}
        fields: dict[str, object] = {}
        if isinstance(got, Source):
            sources["metrics"] = sources["health"] = got
        else:
            sources["metrics"], sources["health"] = got.metrics, got.health
            fields["healthy"] = got.healthy
            if got.max_model_len is not None:
                server.known["max_model_len"] = got.max_model_len
            elif server.asking_models and (got.metrics.ok or got.health.ok):
                server.models_after = t + MODELS_RETRY_S      # it answers, without the length: ask later
            if got.scrape is not None:
                fields.update(self._from_scrape(server, got.scrape, t))
        if spec.hooks_dir:
            fields["fragmentation"], sources["hooks"] = read_fragmentation(spec.hooks_dir)
        known = {k: v for k, v in server.known.items() if k not in fields}
        return ServerView(spec.url, sources, own, **known, **fields)      # type: ignore[arg-type]

    def _from_scrape(self, server: _Server, s: Scrape, t: float) -> dict[str, object]:
        out: dict[str, object] = {"kv_cache_usage": s.kv_cache_usage, "running": s.running, "waiting": s.waiting}
        for name, value in (("gpu_memory_utilization", s.gpu_memory_utilization),
                            ("prefix_caching", s.prefix_caching),
                            ("kv_capacity_tokens", s.num_gpu_blocks * s.block_size
                             if s.num_gpu_blocks and s.block_size else None)):
            if value is not None:
                server.known[name] = value       # configuration: kept through a failed scrape
        previous = server.last
        server.last = (t, s)
        if previous is not None and t > previous[0]:
            dt = t - previous[0]
            out["preemptions_per_s"] = _rate(previous[1].preemptions_total, s.preemptions_total, dt)
            out["request_success_per_s"] = _rate(previous[1].success_total, s.success_total, dt)
            out["prefix_hit_ratio"] = _ratio(previous[1], s)
        if s.prefix_hit_rate_gauge is not None and s.prefix_hit_rate_gauge >= 0:      # V0: the engine's own
            out["prefix_hit_ratio"] = out["prefix_hit_ratio_window"] = s.prefix_hit_rate_gauge
        elif s.prefix_hits_total is not None and s.prefix_queries_total is not None:
            out["prefix_hit_ratio_window"], out["hit_window_s"] = self._window_hits(server, s, t)
        if s.running is not None:
            server.load.add(t, s.running)
            out["load"] = _load(server.load.values())
        return out

    def _window_hits(self, server: _Server, s: Scrape, t: float) -> tuple[float | None, float | None]:
        """Hits / queries over the last HIT_WINDOW_S; before the window holds any query, since the
        server started (its counters' totals), with no window length."""
        hits, queries = s.prefix_hits_total or 0.0, s.prefix_queries_total or 0.0
        if server.hits and (queries < server.hits[-1][2] or hits < server.hits[-1][1]):
            server.hits.clear()          # counters went back: the server restarted
        server.hits.append((t, hits, queries))
        while len(server.hits) > 2 and t - server.hits[1][0] >= HIT_WINDOW_S:
            server.hits.popleft()
        first = server.hits[0]
        if queries - first[2] > 0:
            return (hits - first[1]) / (queries - first[2]), t - first[0]
        return (hits / queries if queries > 0 else None), None

    # -- what is raised now ---------------------------------------------------------------------------
    def _conditions(self, reading: Reading) -> list[Condition]:
        out = []
        for s in reading.servers:
            metrics, health = s.sources["metrics"], s.sources["health"]
            if not s.reachable:
                out.append(Condition(("down", s.url), f"{s.url}: not answering",
                                     f"{s.url}: not answering: {metrics.detail}"))
            else:
                for name, source in (("metrics", metrics), ("health", health)):
                    if not source.ok:
                        out.append(Condition((name, s.url), f"{s.url}: {name}", f"{s.url}: {source.detail}"))
            for r in s.risks:
                title = f"{s.url}: OOM risk {r.oom_class}"
                out.append(Condition(("risk", s.url, r.oom_class), title,
                                     f"{title} ({r.level}): " + "; ".join(r.reasons)))
        if reading.nvml is not None and not reading.nvml.ok and self._nvml_seen:
            out.append(Condition(("nvml",), "NVML", f"NVML: {reading.nvml.detail}"))
        return out

    def close(self) -> None:
        for server in self._servers:
            if server.busy is None or not server.busy.is_alive():
                server.endpoint.close()
        if self._nvml is not None:
            self._nvml.close()


def _rate(before: float | None, after: float | None, dt: float) -> float | None:
    if before is None or after is None or after < before:
        return None          # unknown, or a counter reset (the server restarted)
    return (after - before) / dt


def _ratio(before: Scrape, after: Scrape) -> float | None:
    if None in (before.prefix_hits_total, before.prefix_queries_total, after.prefix_hits_total,
                after.prefix_queries_total):
        return None
    queries = after.prefix_queries_total - before.prefix_queries_total      # type: ignore[operator]
    hits = after.prefix_hits_total - before.prefix_hits_total               # type: ignore[operator]
    return hits / queries if queries > 0 and hits >= 0 else None


def _load(running: list[float]) -> Load:
    if len(running) < 3:
        return Load(len(running), sum(running) / len(running) if running else None, False)
    # The classifier's own test of a steady load (coefficient of variation), so that watch and
    # `triage classify` agree on what "flat" means; imported only once a window exists.
    from ...classes.chronic import steady_load as _steady

    return Load(len(running), sum(running) / len(running), _steady(running))
