"""`--exporter PORT`: the latest reading as Prometheus gauges, on a private registry.

Names, labels and help texts come from triage/data/exporter_metrics.yaml, the one definition the
shipped alert rules and dashboard are tested against; this module only says where each value
comes from (SERIES), and refuses to start if the two disagree. A collector builds the gauges
from the latest reading at scrape time: a server, GPU or risk class that went away has no stale
series left behind, and the watch loop never blocks on a scrape. The private registry carries
none of prometheus-client's process or platform collectors.

`triage_source_up{source="nvml"}` is host-wide: its `server` label is empty. The `server` label
is the --vllm-url masked as every output is (a password in it, `?token=`, `&sig=`...): a scrape
of the exporter is an output like any other.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ...errors import TriageError
from ...paths import data_file
from .readings import RISK_CLASSES, GpuView, Reading, ServerView

SPEC_PATH = data_file("exporter_metrics.yaml")

Sample = tuple[dict[str, str], float]


@dataclass(frozen=True)
class MetricSpec:
    name: str
    labels: tuple[str, ...]
    help: str


def load_specs(path: Path = SPEC_PATH, section: str = "metrics") -> dict[str, MetricSpec]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TriageError(f"{path}: cannot read the exporter's metric definitions: {exc}") from None
    metrics = doc.get(section) if isinstance(doc, dict) else None
    if not isinstance(metrics, dict):
        raise TriageError(f"{path}: no `{section}:` mapping")
    specs = {}
    for name, entry in metrics.items():
        labels = entry.get("labels") if isinstance(entry, dict) else None
        text = entry.get("help") if isinstance(entry, dict) else None
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels) or not isinstance(text, str):
            raise TriageError(f"{path}: {name}: needs `labels:` (a list of names) and `help:` (text)")
        specs[str(name)] = MetricSpec(str(name), tuple(labels), text.strip())
    return specs


def _each(items: Callable[[Reading], Iterable[Any]], labels: Callable[[Any], dict[str, str]],
          value: Callable[[Any], float | None]) -> Callable[[Reading], Iterator[Sample]]:
    """The samples of one value of each server (or GPU): none where the reading lacks it."""
    def samples(reading: Reading) -> Iterator[Sample]:
        for item in items(reading):
            v = value(item)
            if v is not None:
                yield labels(item), float(v)
    return samples


@functools.lru_cache(maxsize=256)
def server_label(url: str) -> str:
    """The `server` label of a --vllm-url: masked (a few URLs, asked at every scrape)."""
    from ...redact import mask_text

    return mask_text(url)


def _per_server(value: Callable[[ServerView], float | None]) -> Callable[[Reading], Iterator[Sample]]:
    return _each(lambda r: r.servers, lambda s: {"server": server_label(s.url)}, value)


def _gpu(value: Callable[[GpuView], float | None]) -> Callable[[Reading], Iterator[Sample]]:
    return _each(lambda r: r.gpus, lambda g: {"gpu": str(g.index), "uuid": g.uuid}, value)


def _discrepancy(reading: Reading) -> Iterator[Sample]:
    gpus = reading.gpu_map()
    for s in reading.servers:
        for i in s.gpus:
            gap = s.discrepancy(gpus[i]) if i in gpus else None
            if gap is not None:
                yield {"server": server_label(s.url), "gpu": str(i)}, gap


def _risk(reading: Reading) -> Iterator[Sample]:
    for s in reading.servers:
        if not s.risks and s.risk_unknown:
            continue            # not judged (its /metrics unread): no series rather than a false 0
        heading = {r.oom_class for r in s.risks}
        for cls in RISK_CLASSES:
            yield {"server": server_label(s.url), "class": cls}, 1.0 if cls in heading else 0.0


def _source_up(reading: Reading) -> Iterator[Sample]:
    for s in reading.servers:
        for name, source in s.sources.items():
            yield {"server": server_label(s.url), "source": name}, 1.0 if source.ok else 0.0
    if reading.nvml is not None:
        yield {"server": "", "source": "nvml"}, 1.0 if reading.nvml.ok else 0.0


#: metric name -> the samples of a reading (labels as the yaml names them).
SERIES: dict[str, Callable[[Reading], Iterable[Sample]]] = {
    "triage_kv_cache_usage_ratio": _per_server(lambda s: s.kv_cache_usage),
    "triage_requests_running": _per_server(lambda s: s.running),
    "triage_requests_waiting": _per_server(lambda s: s.waiting),
    "triage_preemptions_per_second": _per_server(lambda s: s.preemptions_per_s),
    "triage_prefix_cache_hit_ratio": _per_server(lambda s: s.prefix_hit_ratio),
    "triage_request_success_per_second": _per_server(lambda s: s.request_success_per_s),
    "triage_engine_memory_budget_ratio": _per_server(lambda s: s.gpu_memory_utilization),
    "triage_gpu_memory_used_bytes": _gpu(lambda g: g.used_bytes),
    "triage_gpu_memory_total_bytes": _gpu(lambda g: g.total_bytes),
    "triage_gpu_memory_slope_bytes_per_hour": _gpu(lambda g: g.trend.slope_bytes_per_hour if g.trend else None),
    "triage_nvml_engine_discrepancy_points": _discrepancy,
    "triage_allocator_fragmentation_ratio": _per_server(lambda s: s.fragmentation.ratio if s.fragmentation else None),
    "triage_oom_risk": _risk,
    "triage_source_up": _source_up,
}


class ReadingCollector:
    """A prometheus-client collector over the latest reading (swapped in whole, under a lock)."""

    def __init__(self, specs: dict[str, MetricSpec]) -> None:
        missing = sorted(set(SERIES) - set(specs))
        if missing:
            raise TriageError(f"{SPEC_PATH.name} does not define {', '.join(missing)}")
        self.specs = {name: specs[name] for name in SERIES}
        self._reading: Reading | None = None
        self._lock = threading.Lock()

    def set(self, reading: Reading) -> None:
        with self._lock:
            self._reading = reading

    def describe(self) -> list[Any]:
        return list(self._families(None))

    def collect(self) -> list[Any]:
        with self._lock:
            reading = self._reading
        return list(self._families(reading))

    def _families(self, reading: Reading | None) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        for name, spec in self.specs.items():
            family = GaugeMetricFamily(name, spec.help, labels=list(spec.labels))
            for labels, value in (SERIES[name](reading) if reading is not None else ()):
                family.add_metric([labels[label] for label in spec.labels], value)
            yield family


class ActCollector:
    """watch --act's decisions as series (act_metrics in the yaml), read from the actor at scrape time."""

    def __init__(self, actor: Any, specs: dict[str, MetricSpec]) -> None:
        names = ("triage_act_decisions_total", "triage_act_precursor_held_seconds",
                 "triage_act_last_action_timestamp_seconds")
        missing = [n for n in names if n not in specs]
        if missing:
            raise TriageError(f"{SPEC_PATH.name} does not define {', '.join(missing)} under act_metrics")
        self.actor, self.specs = actor, specs

    def describe(self) -> list[Any]:
        return list(self._families([]))

    def collect(self) -> list[Any]:
        return list(self._families(self.actor.snapshot()))

    def _families(self, states: list[Any]) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from .act import DECISION_KINDS

        spec = self.specs["triage_act_decisions_total"]
        # prometheus-client appends `_total` to a counter's name itself.
        decisions = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=list(spec.labels))
        spec = self.specs["triage_act_precursor_held_seconds"]
        held = GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))
        spec = self.specs["triage_act_last_action_timestamp_seconds"]
        last = GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))
        for st in states:
            server = server_label(st.url)
            for kind in DECISION_KINDS:
                decisions.add_metric([server, kind], float(st.counts.get(kind, 0)))
            held.add_metric([server], float(st.held_s))
            if st.last_action is not None:
                last.add_metric([server], st.last_action.timestamp())
        yield from (decisions, held, last)


class Exporter:
    def __init__(self, host: str, port: int, specs: dict[str, MetricSpec] | None = None) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.collector = ReadingCollector(specs or load_specs())
        registry = CollectorRegistry(auto_describe=True)
        registry.register(self.collector)      # type: ignore[arg-type]
        self._registry = registry
        try:
            started = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise TriageError(f"--exporter: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        if started is None:        # prometheus-client before 0.20 does not hand the server back
            self._server, self.port = None, port
        else:
            self._server = started[0]
            self.port = int(self._server.server_address[1])
        self.host = host

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def update(self, reading: Reading) -> None:
        self.collector.set(reading)

    def add_act(self, actor: Any) -> None:
        """Serve watch --act's decisions too (act_metrics)."""
        self._registry.register(ActCollector(actor, load_specs(section="act_metrics")))   # type: ignore[arg-type]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
