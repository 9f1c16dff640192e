"""One instance's series read as server processes: readings per step, lifetimes, and the first
failure the series show (see `triage.live.fleet.instance` for how they become evidence records).

* a reading is the instance's series at one step of the range query (`Reading`), and its GPU's
  (`GpuReading`: DCGM's framebuffer and last-Xid gauges, `triage watch`'s GPU memory gauges);
* a lifetime (`Life`) is a run of readings of one server process: it starts when the target
  answers (`up` 1) and ends when it stops answering (`up` 0) or when the process changed between
  two readings (`process_start_time_seconds` or the earliest `vllm:*_created` changed, or a
  counter went down);
* the failure (`Failure`) is the first end of a lifetime that the series show as one: memory at
  its limit in the stretch before it (GPU memory within `thresholds.DISCREPANCY` of the card, or
  KV-cache usage at `thresholds.KV_HIGH` or more), a target that never answered again until the
  end of the window (a start-up failure when the card filled up meanwhile), or repeated
  restarts. A restart after which the server answered again, with no memory sign before it (a
  rollout, a planned restart), is not a failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

from ...evidence.prometheus import CONCEPTS
from ...thresholds import DISCREPANCY, KV_HIGH
from .promapi import Series

#: The vLLM series of an instance, exposed name -> concept (the scrape parser's table).
VLLM_CONCEPTS = {name: concept for name, concept in CONCEPTS.items() if name.startswith("vllm:")}
#: GPU memory series: name -> (concept, bytes per unit).
GPU_SERIES = {
    "DCGM_FI_DEV_FB_USED": ("used", 1 << 20), "dcgm_fb_used": ("used", 1 << 20),
    "DCGM_FI_DEV_FB_FREE": ("free", 1 << 20), "dcgm_fb_free": ("free", 1 << 20),
    "DCGM_FI_DEV_FB_RESERVED": ("reserved", 1 << 20),
    "triage_gpu_memory_used_bytes": ("used", 1), "triage_gpu_memory_total_bytes": ("total", 1),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", 1), "dcgm_xid_errors": ("xid", 1),
}
RESTARTS = "kube_pod_container_status_restarts_total"
TERMINATED = "kube_pod_container_status_last_terminated_reason"
PROCESS_START = "process_start_time_seconds"
#: The stretch of series before a death that is read for memory signs: about the twelve stats
#: lines (10 s apart) before a failure that the burst rules read in a log.
PRESSURE_WINDOW_S = 120.0
#: A card this full is at its limit: free memory within the accounting-discrepancy margin.
CARD_FULL_SHARE = 1.0 - DISCREPANCY
#: Deaths with no memory sign after which the server answered again: this many in the window
#: is a crash loop, not a rollout.
CRASH_LOOP_DEATHS = 3
_COUNTERS = ("request_success_total", "preemptions_total", "prefix_cache_queries_total")
_STEP_COUNTERS = ("preemptions_total", "prefix_cache_queries_total", "prefix_cache_hits_total")
_CITE_LABELS = ("instance", "pod", "namespace", "gpu", "Hostname", "hostname", "reason")


def cite(labels: Mapping[str, str], name: str | None = None) -> str:
    """`name{instance="...",...}`: a series named the way PromQL would select it, with only the
    labels that tell it apart."""
    name = name or labels.get("__name__", "")
    # kube-state-metrics' own address is not the pod's: its pod and namespace say whose series it is.
    keys = _CITE_LABELS[1:] if name.startswith("kube_") and labels.get("pod") else _CITE_LABELS
    shown = ",".join(f'{k}="{labels[k]}"' for k in keys if labels.get(k))
    return f"{name}{{{shown}}}"


# Readings of one instance share their step times: each time is formatted once.
@lru_cache(maxsize=1 << 16)
def utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


@lru_cache(maxsize=1 << 16)
def iso(t: float) -> str:
    return utc(t).isoformat().replace("+00:00", "Z")


def clock(t: float) -> str:
    return utc(t).strftime("%H:%M:%S")


def fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.4g}"


@dataclass(frozen=True)
class Shown:
    """A reading as cited: `series{labels}@time=value`."""

    series: str
    t: float
    value: str

    def text(self, when=iso) -> str:
        return f"{self.series}@{when(self.t)}={self.value}"


@dataclass
class Reading:
    """The instance at one step: `up`, the process identity, the vLLM values (summed over the
    series of one concept; KV usage is the highest engine's)."""

    t: float
    up: float | None = None
    ident: float | None = None
    values: dict[str, float] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.up == 1 or (self.up is None and bool(self.values))

    def busy(self) -> bool:
        return any((self.values.get(k) or 0) > 0 for k in ("requests_running", "requests_waiting", "kv_cache_usage"))


@dataclass
class GpuReading:
    t: float
    key: str                 # the GPU's series, cited
    labels: Mapping[str, str]
    used: int | None = None
    free: int | None = None
    reserved: int | None = None
    total: int | None = None
    xid: float | None = None
    used_series: str = ""
    xid_series: str = ""
    repeated: bool = False           # the same as the readings on either side (see _mark_repeats)

    @property
    def shown(self) -> Shown:
        """The used-memory reading as cited (MiB for DCGM, bytes for triage's exporter)."""
        if self.used is None:
            return Shown(self.key, self.t, "?")
        mib = self.used_series.startswith(("DCGM", "dcgm"))
        return Shown(self.used_series or self.key, self.t, str(self.used >> 20 if mib else self.used))

    @property
    def capacity(self) -> int | None:
        if self.total:
            return self.total
        if self.used is not None and self.free is not None:
            return self.used + self.free + (self.reserved or 0)
        return None

    @property
    def share(self) -> float | None:
        cap = self.capacity
        return self.used / cap if cap and self.used is not None else None


@dataclass
class Life:
    """One server process, as the series saw it."""

    first: int                       # index of its first reading
    last: int                        # index of its last answered reading
    start: float | None              # process start (unix seconds) when the series say
    served: bool = False
    end: str = "open"                # "down" | "restart" | "open"
    next_t: float | None = None      # the reading that shows the end
    signs: tuple | None = None       # memory at its limit just before the end (see _pressure)

    def quiet_end(self) -> float | None:
        """When it was seen gone with no memory sign before it (a rollout's restart, or a death the
        series cannot explain); None for a life still running or one that died with memory at its
        limit."""
        return self.next_t if self.end != "open" and self.signs is None else None


@dataclass
class Failure:
    """The failure the verdict is about, as the series show it."""

    t: float
    phase: str                       # serving | ready | starting
    what: str                        # one line: what the series show
    shown: Shown                     # the reading that shows it
    memory: GpuReading | None = None    # the card at its limit
    kv: Shown | None = None          # KV-cache usage at or above KV_HIGH
    uptime_s: float | None = None

    @property
    def oom(self) -> bool:
        return self.memory is not None or self.kv is not None



# -- readings -----------------------------------------------------------------------------------

def read_series(series: Iterable[Series]) -> tuple[list[Reading], dict[str, str], list[tuple[float, dict]]]:
    by_t: dict[float, Reading] = {}
    cited: dict[str, str] = {}
    config: list[tuple[float, dict]] = []
    created: dict[float, float] = {}
    for s in series:
        name = s.name
        if name == "vllm:cache_config_info":
            labels = {k: v for k, v in s.labels.items() if k not in ("__name__", "instance", "job")}
            config += [(t, labels) for t, v in s.points if v == 1]
            cited.setdefault("cache_config", cite(s.labels))
            continue
        if name.startswith("vllm:") and name.endswith("_created"):
            cited.setdefault("start", cite(s.labels))
            for t, v in s.points:      # the earliest counter creation: the process start
                created[t] = min(created.get(t, v), v)
            continue
        concept = VLLM_CONCEPTS.get(name) or {"up": "up", PROCESS_START: "start"}.get(name)
        if concept is None:
            continue
        if concept == "start":
            cited["start"] = cite(s.labels)     # the process's own start time wins over a counter's creation
        elif concept != "up":
            cited.setdefault(concept, cite(s.labels))
        for t, v in s.points:
            r = by_t.get(t)
            if r is None:
                r = by_t[t] = Reading(t)
            if concept == "up":
                r.up = max(r.up or 0.0, v)
            elif concept == "start":
                r.ident = max(r.ident or 0.0, v)
            elif concept == "kv_cache_usage":
                r.values[concept] = max(r.values.get(concept, 0.0), v)
            else:
                r.values[concept] = r.values.get(concept, 0.0) + v
    for t, v in created.items():
        r = by_t.get(t)
        if r is None:
            r = by_t[t] = Reading(t)
        if r.ident is None:
            r.ident = v
    readings = sorted(by_t.values(), key=lambda r: r.t)
    for r in readings:
        if r.up == 0:
            r.values.clear()      # what a stopped target still shows is its last scrape, carried forward
            r.ident = None
    return readings, cited, sorted(config, key=lambda c: c[0])


def _mark_repeats(gpus: list[GpuReading]) -> list[GpuReading]:
    """A reading equal to the one before and the one after it on its GPU adds nothing to the
    trend (the first and last of a flat stretch are kept): marked `repeated`."""
    by_gpu: dict[str, list[GpuReading]] = {}
    for g in gpus:
        by_gpu.setdefault(g.key, []).append(g)
    for run in by_gpu.values():
        for a, b, c in zip(run, run[1:], run[2:]):
            b.repeated = (a.used, a.capacity) == (b.used, b.capacity) == (c.used, c.capacity)
    return gpus


def read_gpus(series: Iterable[Series]) -> list[GpuReading]:
    by_key: dict[tuple[str, float], GpuReading] = {}
    for s in series:
        spec = GPU_SERIES.get(s.name)
        if spec is None:
            continue
        concept, unit = spec
        gpu_labels = {k: v for k, v in s.labels.items()
                      if k in ("instance", "gpu", "UUID", "uuid", "Hostname", "hostname", "pod", "namespace")}
        key, named = cite(gpu_labels, "gpu"), cite(s.labels)
        for t, v in s.points:
            g = by_key.get((key, t))
            if g is None:
                g = by_key[key, t] = GpuReading(t, key, gpu_labels)
            setattr(g, concept, v if concept == "xid" else int(v * unit))
            if concept in ("used", "xid"):
                setattr(g, f"{concept}_series", named)
    return _mark_repeats(sorted(by_key.values(), key=lambda g: (g.t, g.key)))


def _restarted(a: Reading, b: Reading) -> bool:
    if a.ident is not None and b.ident is not None and abs(a.ident - b.ident) > 1.0:
        return True
    return any(k in a.values and k in b.values and b.values[k] < a.values[k] - 0.5 for k in _COUNTERS)


def find_lives(readings: list[Reading]) -> list[Life]:
    lives: list[Life] = []
    cur: Life | None = None
    for i, r in enumerate(readings):
        if r.up == 0:
            if cur is not None:
                cur.end, cur.next_t = "down", r.t
                lives.append(cur)
                cur = None
            continue
        if not r.live:
            continue
        if cur is not None and _restarted(readings[cur.last], r):
            cur.end, cur.next_t = "restart", r.t
            lives.append(cur)
            cur = None
        if cur is None:
            cur = Life(i, i, r.ident)
        prev = readings[cur.last]
        grew = (r.values.get("request_success_total") or 0) > (prev.values.get("request_success_total") or 0)
        cur.served = cur.served or r.busy() or (cur.last != i and grew)
        cur.last = i
        cur.start = cur.start if cur.start is not None else r.ident
    if cur is not None:
        lives.append(cur)
    return lives


def kube_restarts(kube: Sequence[Series]) -> int:
    """Container restarts kube-state-metrics counted in the window (its counter's rise)."""
    total = 0
    for s in kube:
        if s.name == RESTARTS and s.points:
            values = [v for _, v in s.points]
            total += sum(max(0.0, b - a) for a, b in zip(values, values[1:]))
    return int(total)


# -- the failure --------------------------------------------------------------------------------

def first_failure(readings: list[Reading], lives: list[Life], gpus: list[GpuReading], cited: dict[str, str],
                   instance: str) -> Failure | None:
    up = cite({"instance": instance}, "up")
    for life in lives:
        if life.end != "open" and life.next_t is not None:
            last = readings[life.last].t
            life.signs = _pressure(readings, life, gpus, cited, last + (life.next_t - last) / 2)
    if not lives:
        down = [r for r in readings if r.up == 0]
        if not down:
            return None
        return _never_answered(down[0].t, down[0].t, gpus, Shown(up, down[0].t, "0"),
                               "never answered a scrape in the window: up=0 throughout")
    unexplained: list[Failure] = []
    for k, life in enumerate(lives):
        if life.end == "open" or life.next_t is None:
            continue
        last = readings[life.last]
        death = last.t + (life.next_t - last.t) / 2    # between its last answered scrape and the one that shows it gone
        gone = _gone(readings, life, up, cited)
        how = ("stopped answering" if life.end == "down" else "restarted") + \
              f" between {clock(last.t)} and {clock(life.next_t)}"
        phase = "serving" if life.served else "ready"
        signs = life.signs
        if signs is not None:
            memory, kv, said = signs
            return Failure(death, phase, f"{how} right after {said}", gone, memory, kv, _uptime(life, death))
        if k == len(lives) - 1 and life.end == "down":
            return _never_answered(life.next_t, death, gpus, gone, f"{how} and never answered again: up=0 to the end "
                                   "of the window", "no memory sign before it", phase, _uptime(life, death))
        unexplained.append(Failure(death, phase, f"{how}, no memory sign before it", gone, uptime_s=_uptime(life, death)))
    if len(unexplained) >= CRASH_LOOP_DEATHS:
        first = unexplained[0]
        first.what = f"restarted {len(unexplained)} times in the window with no memory sign before any; first {first.what}"
        return first
    return None


def _gone(readings: list[Reading], life: Life, up: str, cited: dict[str, str]) -> Shown:
    """The reading that shows the process gone: `up` 0, or the new process's start time."""
    t = life.next_t or readings[life.last].t
    if life.end == "down":
        return Shown(up, t, "0")
    new = next((r for r in readings if r.t == t), None)
    series = cited.get("start") or PROCESS_START
    return Shown(series, t, fmt(new.ident) if new is not None and new.ident is not None else "changed")


def _pressure(readings: list[Reading], life: Life, gpus: list[GpuReading], cited: dict[str, str],
              death: float) -> tuple[GpuReading | None, Shown | None, str] | None:
    """Memory at its limit in the stretch before a death: the card full, or the KV cache."""
    since = death - PRESSURE_WINDOW_S
    kv = [(r.t, r.values["kv_cache_usage"]) for r in readings[life.first:life.last + 1]
          if r.t >= since and r.values.get("kv_cache_usage") is not None]
    high = max(kv, key=lambda x: x[1], default=None)
    full = _full_card(g for g in gpus if since <= g.t <= (life.next_t or death))
    kv_sign = Shown(cited.get("kv_cache_usage", "vllm:kv_cache_usage_perc"), high[0], fmt(high[1])) \
        if high and high[1] >= KV_HIGH else None
    if full is None and kv_sign is None:
        return None
    said = []
    if full is not None:
        said.append(f"GPU memory at {full.share:.1%} of the card ({full.shown.text(clock)})")
    if kv_sign is not None:
        said.append(f"KV-cache usage {float(kv_sign.value):.0%} ({kv_sign.text(clock)})")
    return full, kv_sign, " and ".join(said)


def _never_answered(after: float, death: float, gpus: list[GpuReading], gone: Shown, how: str,
                    otherwise: str = "", phase: str = "starting", uptime_s: float | None = None) -> Failure:
    """Down from `after` to the end. When the card filled up meanwhile, the restarts' start-up ran
    out of memory before the server listened; else it is a death (of a process in `phase`) the
    series cannot explain."""
    full = _full_card(g for g in gpus if g.t >= after)
    if full is not None:
        # Its uptime is the time since it went down: what the server did before then is another process's.
        return Failure(full.t, "starting", f"{how}; meanwhile GPU memory reached {full.share:.1%} of the card "
                       f"({full.shown.text(clock)})", full.shown, full, uptime_s=full.t - after)
    return Failure(death, phase, f"{how}, {otherwise}" if otherwise else how, gone, uptime_s=uptime_s)


def _full_card(gpus: Iterable[GpuReading]) -> GpuReading | None:
    for g in gpus:
        share = g.share
        if share is not None and share >= CARD_FULL_SHARE:
            return g
    return None


def counted(now: Mapping[str, float], before: Mapping[str, float] | None) -> dict[str, float]:
    """What the counters counted since the reading before (never negative)."""
    if before is None:
        return {}
    return {k: max(0.0, now[k] - before[k]) for k in _STEP_COUNTERS if k in now and k in before}


def _uptime(life: Life, death: float) -> float | None:
    return max(0.0, death - life.start) if life.start else None
