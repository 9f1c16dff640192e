"""One instance's Prometheus series -> evidence records for the flowchart.

No I/O and no decision about the OOM class: the records built here go to the flowchart
(`triage.flowchart.decide`), which decides from them exactly as it decides from a log. What the
series say, and how they become records:

* a reading is the instance's series at one step of the range query. The vLLM gauges and
  counters become one `stats` record per step, as vLLM's own stats line: KV usage, running,
  waiting, the preemptions counted in the step and the prefix-cache hit rate of the step (V1:
  hits / queries counted in it; V0: its hit-rate gauge). `vllm:cache_config_info`
  becomes the `metric` record the flowchart reads the budget and prefix caching from. DCGM's
  framebuffer series (`DCGM_FI_DEV_FB_USED`/`FREE`) and `triage watch`'s
  `triage_gpu_memory_used_bytes`/`total_bytes` become `gpu_memory` readings, a change of DCGM's
  last-Xid gauge an `xid` record, kube-state-metrics' OOMKilled termination reason an
  `oom_killed` record.
* a lifetime (`triage.live.fleet.lifetimes`: one server process) that began inside the window gets a
  `startup_complete` record (its first answered scrape: vLLM only listens once its engine is
  up);
* the failure (`triage.live.fleet.lifetimes.first_failure`: memory at its limit before a death, a
  target that never answered again, repeated restarts) becomes one anchor record. With memory
  at its limit it is a `cuda_oom` record marked as read from the series (no log line says it),
  with the lifecycle phase of the process that died (`serving`, `ready`, or `starting` when it
  died before it ever answered) and its uptime, so the flowchart's phase question and class
  modules apply. Without a memory sign it is a `process_died` record: a failure that does not
  say what failed, which the flowchart answers with `unknown` and the logs to attach.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...evidence.kinds import Kind
from ...model import Evidence
from .lifetimes import (RESTARTS, TERMINATED, Failure, GpuReading, Life, Reading, Shown, cite,
                        counted, find_lives, first_failure, fmt, iso, kube_restarts, read_gpus, read_series, utc)
from .promapi import Series

#: How long after a death kube-state-metrics may take to report the container's termination.
TERMINATION_LAG_S = 300.0


@dataclass
class InstanceSeries:
    """What was read of one instance: its vLLM/`up` series, its GPU and pod series (None when
    they could not be read, with `gpu_error` saying why)."""

    instance: str
    labels: Mapping[str, str]
    main: Sequence[Series]
    gpu: Sequence[Series] | None = ()
    gpu_error: str | None = None


@dataclass
class InstanceReading:
    """Everything built from one instance's series (see the module docstring)."""

    readings: list[Reading]
    lives: list[Life]
    gpus: list[GpuReading]
    failure: Failure | None
    restarts: int
    records: list[Evidence]
    vllm: bool                       # any vLLM series at all
    cited: dict[str, str]            # concept -> series cited for it


def read_instance(data: InstanceSeries, start: float) -> InstanceReading:
    """The instance's readings, lifetimes, first failure and evidence records; `start` is the
    window's start (a lifetime that began before it has no start-up record)."""
    readings, cited, config = read_series(data.main)
    gpus = read_gpus(data.gpu or ())
    lives = find_lives(readings)
    kube = [s for s in (data.gpu or ()) if s.name in (RESTARTS, TERMINATED)]
    failure = first_failure(readings, lives, gpus, cited, data.instance)
    restarts = sum(1 for life in lives if life.end != "open") + kube_restarts(kube)
    records = _Records(data.instance, cited).build(readings, lives, gpus, kube, config, failure, start)
    vllm = any(concept != "start" for concept in cited)
    return InstanceReading(readings, lives, gpus, failure, restarts, records, vllm, cited)


# -- records ------------------------------------------------------------------------------------

class _Records:
    """The evidence records of one instance, in time order (their `seq`). Each record's text
    starts with the reading it rests on, `series{labels}@time=value` (its `reading` field)."""

    def __init__(self, instance: str, cited: dict[str, str]):
        self.instance = instance
        self.cited = cited
        self.items: list[tuple[float, int, Evidence]] = []

    def add(self, t: float, shown: Shown, kind: Kind, note: str = "", **fields: Any) -> None:
        text = shown.text(iso) + (f" ({note})" if note else "")
        rec = Evidence(shown.series, None, kind.value, text, utc(t), {**fields, "reading": shown})
        self.items.append((t, len(self.items), rec))

    def build(self, readings: list[Reading], lives: list[Life], gpus: list[GpuReading], kube: Sequence[Series],
              config: list[tuple[float, dict]], failure: Failure | None, start: float) -> list[Evidence]:
        self._lives(readings, lives, start)
        self._config(config, failure)
        # GPU memory after the failure is the next process's (or none): not evidence about this one.
        self._gpus([g for g in gpus if failure is None or g.t <= failure.t])
        self._kube(kube, lives, readings)
        if failure is not None:
            self._anchor(failure)
        ordered = sorted(self.items, key=lambda x: (x[0], x[1]))
        return [Evidence(e.source, e.line, e.kind, e.text, e.time, e.fields, seq) for seq, (_, _, e) in enumerate(ordered)]

    def _lives(self, readings: list[Reading], lives: list[Life], start: float) -> None:
        load = self.cited.get("kv_cache_usage") or self.cited.get("requests_running") or "vllm"
        up = cite({"instance": self.instance}, "up")
        for life in lives:
            first = readings[life.first]
            if (life.start is not None and life.start >= start) or life.first > 0:
                self.add(first.t, Shown(up, first.t, "1"), Kind.STARTUP_COMPLETE,
                         "its first answered scrape: vLLM listens once its engine is up")
            prev: Reading | None = None
            for r in readings[life.first:life.last + 1]:
                if r.live:
                    self._stats(r, prev, load)
                    prev = r

    def _stats(self, r: Reading, prev: Reading | None, series: str) -> None:
        """One stats record per step, as vLLM's stats line: the load, the preemptions counted in
        the step and the prefix-cache hit rate of the step (V1: hits / queries counted in it; V0:
        its hit-rate gauge)."""
        v = r.values
        fields: dict[str, Any] = {"engine": "vllm"}
        for concept, key in (("kv_cache_usage", "kv_usage"), ("requests_running", "running"),
                             ("requests_waiting", "waiting")):
            if v.get(concept) is not None:
                fields[key] = v[concept]
        if len(fields) == 1:
            return
        notes = [f"{k} {fmt(fields[k])}" for k in ("running", "waiting") if k in fields]
        step = counted(v, prev.values if prev is not None else None)
        if step.get("preemptions_total") is not None:
            fields["preemptions"] = step["preemptions_total"]
            if fields["preemptions"]:
                notes.append(f"{fmt(fields['preemptions'])} preempted in the step")
        queries, hits = step.get("prefix_cache_queries_total"), step.get("prefix_cache_hits_total") or 0.0
        if queries:
            fields["prefix_hit_rate"] = min(1.0, hits / queries)
            notes.append(f"prefix-cache hit rate {fields['prefix_hit_rate']:.1%}: {fmt(hits)} of {fmt(queries)} "
                         "queried tokens in the step")
        elif (v.get("prefix_cache_hit_rate") if v.get("prefix_cache_hit_rate") is not None else -1) >= 0:
            fields["prefix_hit_rate"] = v["prefix_cache_hit_rate"]
            notes.append(f"prefix-cache hit rate {fields['prefix_hit_rate']:.1%}")
        shown = fmt(v["kv_cache_usage"] if "kv_usage" in fields else v["requests_running"])
        self.add(r.t, Shown(series, r.t, shown), Kind.STATS, ", ".join(notes), **fields)

    def _config(self, config: list[tuple[float, dict]], failure: Failure | None) -> None:
        before = [c for c in config if failure is None or c[0] <= failure.t]
        if not before:
            return
        t, labels = before[-1]
        series = self.cited.get("cache_config", "vllm:cache_config_info")
        note = ", ".join(f"{k}={labels[k]}" for k in ("gpu_memory_utilization", "enable_prefix_caching",
                                                      "num_gpu_blocks") if k in labels)
        self.add(t, Shown(series, t, "1"), Kind.METRIC, note, name="cache_config", metric="vllm:cache_config_info",
                 value=1.0, labels=labels)

    def _gpus(self, gpus: list[GpuReading]) -> None:
        last_xid: dict[str, float] = {}
        for g in gpus:
            if g.used is not None and not g.repeated:
                share = g.share
                self.add(g.t, g.shown, Kind.GPU_MEMORY, f"{share:.1%} of the card" if share is not None else "",
                         source="prometheus", used_bytes=g.used, total_bytes=g.capacity, free_bytes=g.free,
                         gpu=g.labels.get("gpu"), uuid=g.labels.get("UUID") or g.labels.get("uuid"),
                         host=g.labels.get("Hostname") or g.labels.get("hostname") or g.labels.get("instance"))
            if g.xid is not None and g.xid_series:
                before = last_xid.get(g.key)
                last_xid[g.key] = g.xid
                if before is not None and g.xid != before and g.xid > 0:
                    code = int(g.xid)
                    self.add(g.t, Shown(g.xid_series, g.t, str(code)), Kind.XID,
                             f"a new Xid since the scrape before: the last-Xid gauge went from {int(before)} to {code}",
                             code=code, pci=g.labels.get("pci_bus_id"), detail=f"Xid {code} dated by the gauge's change")

    def _kube(self, kube: Sequence[Series], lives: list[Life], readings: list[Reading]) -> None:
        """kube-state-metrics' last termination reason turning OOMKilled after a death."""
        deaths = [(readings[life.last].t, life.next_t) for life in lives if life.next_t is not None]
        for s in kube:
            if s.name != TERMINATED or s.labels.get("reason") != "OOMKilled":
                continue
            value_at = dict(s.points)
            for last_t, next_t in deaths:
                after = [t for t, v in s.points if v == 1 and next_t <= t <= next_t + TERMINATION_LAG_S]
                if after and value_at.get(last_t) != 1:
                    # Just before the death's midpoint: the kill is what ended the process.
                    self.add(last_t + (next_t - last_t) / 2 - 1e-3, Shown(cite(s.labels), after[0], "1"),
                             Kind.OOM_KILLED, "the container's last termination: OOMKilled (host memory)",
                             reason="OOMKilled", container=s.labels.get("container"), pod=s.labels.get("pod"))

    def _anchor(self, f: Failure) -> None:
        note = f.what
        fields: dict[str, Any] = {"phase": f.phase, "derived": "prometheus series"}
        if f.uptime_s is not None:
            fields["uptime_s"] = f.uptime_s
        if not f.oom:
            self.add(f.t, f.shown, Kind.PROCESS_DIED, note + "; the series do not say what failed", **fields)
            return
        if f.memory is not None and f.memory.capacity:
            fields["capacity_bytes"] = f.memory.capacity
            if f.memory.free is not None:
                fields["free_bytes"] = f.memory.free
        self.add(f.t, f.shown, Kind.CUDA_OOM, note + ": read as running out of GPU memory (from the series, "
                 "no log line)", **fields)
