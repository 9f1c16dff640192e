"""Fleet classification: one verdict per instance of a fleet, from the series a Prometheus-compatible
server already holds (`triage classify --prometheus URL`).

The instances are the `instance` label values of the targets the selector matches that expose vLLM
series in the window (plus the targets of the same jobs that were down throughout, such as a
server crash-looping at start-up, which never serves /metrics). Each instance is read with two
range queries run in a bounded thread pool (a timeout per request, a deadline for the whole pull):
its own series (`up`, `process_start_time_seconds`, the vLLM gauges and counters of
`triage.evidence.prometheus.CONCEPTS`, `vllm:cache_config_info`, counter creation times) and the
series of its GPU and pod (DCGM's framebuffer and last-Xid gauges, `triage watch`'s
`triage_gpu_memory_*` gauges, kube-state-metrics' restarts and termination reason), joined by the
target's `pod`/`namespace` labels when it has them, else by the host part of `instance`.
`triage.live.fleet.instance` turns them into evidence records and the flowchart decides, exactly as it
does for a log: one decision logic. Two things are this module's own:

* an out-of-memory death read from KV-cache pressure alone (no GPU memory series shows the card
  at its limit) is named at no more than `INFERRED_OOM_CAP`, below `thresholds.CONFIDENT`: the
  series make it likely, only the log can confirm it;
* every verdict that is `unknown` (and every failure read from the series) names the log to pull
  for its instance: `kubectl logs --previous` when the target has pod labels, else `triage
  collect`.

Per-instance failures (a timeout, an error answer) make that instance `unknown` with the reason;
the others are classified. `classify_around` classifies one instance from the series around a
moment, for callers that need one verdict (an alert receiver).

Exit codes (`triage.errors.ExitCode`), as for `triage classify`:
    0  the fleet was classified (any mix of classes, some instances unknown included);
    1  the server cannot be used (unreachable, credentials refused, not a Prometheus HTTP API),
       or the selector matches no vLLM instance in the window;
    3  every instance is `unknown`: nothing in the series settles a class (each says what to pull).
"""
from __future__ import annotations

import math
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ...classes import registry
from ...errors import ExitCode
from ...model import Evidence, EvidenceSet, SourceInfo, Step, Verdict
from ...thresholds import CONFIDENT
from .instance import InstanceSeries, read_instance
from .lifetimes import GPU_SERIES, PROCESS_START, RESTARTS, TERMINATED, VLLM_CONCEPTS, Failure, clock, iso
from .promapi import PrometheusError, PromClient, QueryFailed, label_value

SCHEMA_ID = "triage.fleet/v1"
#: An OOM read from KV pressure alone is named, but below the confident level.
INFERRED_OOM_CAP = round(CONFIDENT - 0.05, 2)
#: Restarts of this many instances (at least two, at least half the fleet) within this span are
#: one rollout.
ROLLOUT_SPAN_S = 300.0
MAX_POINTS = 11000           # Prometheus refuses a range query of more points per series
DEFAULT_POINTS = 720         # the default step keeps about this many points per series (>= 15 s)
MIN_STEP_S = 15.0
GRACE_S = 1.0                # past the deadline, for the classification of what was read just in time
# A counter's creation time stands for the process start where process_start_time_seconds is
# missing (a V1 server in multiprocess mode): one counter is enough.
_MAIN_NAMES = ("up", PROCESS_START, *sorted(VLLM_CONCEPTS), "vllm:request_success_created")
_SIDE_NAMES = (*sorted(GPU_SERIES), RESTARTS, TERMINATED)
_LIST_NAMES = ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# Never starting inside a number: a long run of digits with no unit is then tried once, not from
# every position (quadratic).
_DURATION = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
CLASS_LABELS = registry().short_labels()
HEALTHY = registry().healthy.id            # a server that did not fail
UNDECIDED = registry().fallback.id         # a failure the series cannot name: pull the logs


# -- the window -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    start: float
    end: float
    step: float

    @classmethod
    def make(cls, since: str | None = None, start: str | None = None, end: str | None = None,
             step: str | None = None, now: float | None = None) -> "Window":
        """From the CLI's words; ValueError says what is wrong."""
        if since and start:
            raise ValueError("give --since or --start, not both")
        stop = parse_time(end, "--end") if end else math.floor(time.time() if now is None else now)
        begin = parse_time(start, "--start") if start else stop - parse_duration(since or "1h", "--since")
        if begin >= stop:
            raise ValueError(f"the window is empty: start {iso(begin)} is not before end {iso(stop)}")
        span = stop - begin
        every = parse_duration(step, "--step") if step else max(MIN_STEP_S, math.ceil(span / DEFAULT_POINTS))
        if span / every > MAX_POINTS:
            raise ValueError(f"--step {every:g}s gives {span / every:,.0f} points per series over the window; "
                             f"Prometheus allows {MAX_POINTS:,}: use a step of at least {math.ceil(span / MAX_POINTS)}s")
        return cls(begin, stop, every)

    def json(self) -> dict[str, Any]:
        return {"start": iso(self.start), "end": iso(self.end), "step_s": self.step}


def parse_duration(text: str, what: str) -> float:
    """Prometheus durations (`90s`, `15m`, `1h30m`, `2d`) or plain seconds."""
    s = text.strip()
    try:
        seconds = float(s)
    except ValueError:
        parts = _DURATION.findall(s)
        if not parts or "".join(n + u for n, u in parts) != s:
            raise ValueError(f"{what} {text!r} is not a duration (e.g. 90s, 15m, 1h30m, 2d)") from None
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} {text!r} must be a positive duration")
    return seconds


def parse_time(text: str, what: str) -> float:
    """RFC 3339 (`2026-03-12T14:00:00Z`) or unix seconds."""
    from ...timeref import parse_iso

    try:
        value = float(text)
    except ValueError:
        moment = parse_iso(text)
        if moment is None:
            raise ValueError(f"{what} {text!r} is not a time (RFC 3339 such as 2026-03-12T14:00:00Z, or unix "
                             "seconds)") from None
        return moment.timestamp()
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} {text!r} is not a time")
    return value


def selector_matchers(selector: str | None) -> str:
    """The label matchers inside `{...}` (empty for no selector)."""
    s = (selector or "").strip()
    if not s:
        return ""
    if not (s.startswith("{") and s.endswith("}")):
        raise ValueError(f"--selector {selector!r}: give label matchers in braces, e.g. '{{job=\"vllm\"}}'")
    return s[1:-1].strip().rstrip(",").strip()


def _select(names: Sequence[str], *matchers: str) -> str:
    alternation = "|".join(re.escape(n) for n in names)
    return "{" + ",".join([f"__name__=~{label_value(alternation)}", *(m for m in matchers if m)]) + "}"


# -- one instance ---------------------------------------------------------------------------------

@dataclass
class InstanceVerdict:
    instance: str
    labels: Mapping[str, str]
    verdict: Verdict
    deciding: Evidence | None = None
    failure: Failure | None = None
    restarts: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    first_end: float | None = None       # when a server process of it first ended with no memory sign
    vllm: bool = True                    # False: its target answered scrapes without any vLLM series

    @property
    def oom_class(self) -> str:
        return self.verdict.oom_class.value


def pull_instance(client: PromClient, instance: str, labels: Mapping[str, str], window: Window,
                  selector: str = "", timeout_s: float | None = None) -> InstanceSeries:
    """The instance's series (one range query) and its GPU/pod series (another: a failure there is
    noted, not fatal). Raises QueryFailed when its own series cannot be read."""
    own = f"instance={label_value(instance)}"
    main = client.query_range(_select(_MAIN_NAMES, selector, own), window.start, window.end, window.step, timeout_s)
    try:
        side = client.query_range(_select(_SIDE_NAMES, *_join(instance, labels)), window.start, window.end,
                                  window.step, timeout_s)
        return InstanceSeries(instance, labels, main, side)
    except QueryFailed as exc:
        return InstanceSeries(instance, labels, main, None, str(exc))


def _join(instance: str, labels: Mapping[str, str]) -> list[str]:
    """How the GPU and pod series of an instance are found: its pod, else its host."""
    if labels.get("pod"):
        out = [f"pod={label_value(labels['pod'])}"]
        if labels.get("namespace"):
            out.append(f"namespace={label_value(labels['namespace'])}")
        return out
    host = instance.rsplit(":", 1)[0] if re.search(r":\d+$", instance) else instance
    return [f"instance=~{label_value(re.escape(host) + '(:[0-9]+)?')}"]


def classify_instance(data: InstanceSeries, window: Window) -> InstanceVerdict:
    """The verdict of one instance from its series (no I/O). A target that answered its scrapes
    with no vLLM series at all is not a vLLM server: unknown, with `vllm` False."""
    from ...api import classify_evidence

    reading = read_instance(data, window.start)
    notes = [f"GPU and pod series not read: {data.gpu_error}"] if data.gpu_error else []
    if reading.lives and not reading.vllm:
        other = unread(data.instance, data.labels, "its target answered scrapes without any vLLM series")
        other.vllm = False
        return other
    if not reading.records:
        return unread(data.instance, data.labels, "no series of this instance in the window")
    ev = EvidenceSet(list(reading.records), [SourceInfo(f"prometheus instance={data.instance}", "prometheus_api",
                                                        len(reading.records))], [])
    verdict = classify_evidence(ev)
    failure = reading.failure
    if failure is not None and failure.oom and failure.memory is None and verdict.confidence > INFERRED_OOM_CAP \
            and registry().spec(verdict.oom_class).gpu_oom:
        verdict.confidence = INFERRED_OOM_CAP
        verdict.summary += " (read from KV-cache pressure: no GPU memory series shows the card at its limit)"
        verdict.attach.insert(0, "GPU memory series (dcgm-exporter, or `triage watch --exporter`) to confirm the OOM")
    if failure is not None or verdict.oom_class is UNDECIDED:
        verdict.attach.insert(0, logs_to_pull(data.instance, data.labels, failure))
    ends = [t for t in (life.quiet_end() for life in reading.lives) if t is not None]
    return InstanceVerdict(data.instance, data.labels, verdict, deciding(verdict, reading.records), failure,
                           reading.restarts, None, notes, min(ends, default=None))


def classify_around(client: PromClient, instance: str, at: float, *, before_s: float = 3600.0,
                    after_s: float = 300.0, selector: str = "") -> InstanceVerdict:
    """One instance's verdict from the series around a moment (an alert's startsAt): the window
    [at - before_s, at + after_s] at the default step. Raises PrometheusError when the server
    cannot be used; an instance whose series cannot be read is `unknown`, saying why."""
    window = Window.make(start=str(at - before_s), end=str(at + after_s))
    inner = selector_matchers(selector)
    own = ",".join(m for m in (inner, f"instance={label_value(instance)}") if m)
    labels = list_instances(client, own, window).get(instance, {"instance": instance})
    try:
        data = pull_instance(client, instance, labels, window, inner)
    except QueryFailed as exc:
        return unread(instance, labels, f"series not read: {exc}")
    return classify_instance(data, window)


def unread(instance: str, labels: Mapping[str, str], why: str) -> InstanceVerdict:
    """An instance whose series could not be read (or hold nothing): unknown, saying why."""
    verdict = Verdict(UNDECIDED, 0.0, f"Unknown: {why}",
                      [Step("Could the instance's series be read?", "no", why)],
                      attach=[logs_to_pull(instance, labels, None)],
                      facts={"engine": "unknown", "engine_version": None, "inputs": []})
    return InstanceVerdict(instance, labels, verdict, error=why)


def logs_to_pull(instance: str, labels: Mapping[str, str], failure: Failure | None) -> str:
    when = f" around {iso(failure.t)}" if failure is not None else ""
    if labels.get("pod"):
        ns = f"-n {labels['namespace']} " if labels.get("namespace") else ""
        where = f"{labels['namespace']}/{labels['pod']}" if labels.get("namespace") else labels["pod"]
        return (f"the server log of {instance}{when}: `kubectl logs --previous {ns}{labels['pod']}` "
                f"(or `triage collect --kubectl {where} -o INCIDENT_DIR`)")
    return (f"the server log of {instance}{when} (e.g. `triage collect --vllm-url http://{instance} --log LOGFILE "
            "-o INCIDENT_DIR` on its host)")


_RANK = {"gpu_memory": 0, "xid": 0, "oom_killed": 0, "stats": 1, "metric": 2}


def deciding(verdict: Verdict, records: Sequence[Evidence]) -> Evidence | None:
    """The record that shows the class best: for a healthy instance its latest load reading; else
    a reading the first cause rests on, or else the verdict (the card or a fault before a gauge,
    before the configuration; the latest of those); else the failure itself."""
    if verdict.oom_class is HEALTHY:
        return next((e for e in reversed(records) if "kv_usage" in e.fields or "running" in e.fields), None)

    def readings(items: Sequence[Evidence]) -> list[Evidence]:
        return [e for e in items if e.fields.get("reading") and not e.fields.get("derived")]

    pool: list[Evidence] = []
    if verdict.oom_class is not UNDECIDED:
        pool = (readings(verdict.causes[0].evidence) if verdict.causes else []) or readings(verdict.evidence)
    if pool:
        return min(pool, key=lambda e: (_RANK.get(e.kind, 1), -(e.time.timestamp() if e.time else 0.0)))
    return next((e for e in verdict.evidence if e.fields.get("reading")), None)


# -- the fleet ------------------------------------------------------------------------------------

@dataclass
class FleetReport:
    url: str
    selector: str
    window: Window
    instances: list[InstanceVerdict]
    rollout: float | None
    summary: str
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Instances per class, most first."""
        return class_counts(self.instances)

    @property
    def exit_code(self) -> ExitCode:
        if self.instances and all(i.oom_class == UNDECIDED.value for i in self.instances):
            return ExitCode.UNKNOWN
        return ExitCode.OK


def list_instances(client: PromClient, selector: str, window: Window) -> dict[str, dict[str, str]]:
    """instance -> its target labels: targets with vLLM series in the window, and the other targets
    the selector matches (a server that never answered has only `up`); with no selector, only
    those of the jobs that have vLLM servers."""
    matchers = [f"{name}{{{selector}}}" for name in ("up", *_LIST_NAMES)]
    try:
        found = client.series(matchers, window.start, window.end)
    except QueryFailed as exc:
        raise PrometheusError(f"{client.url}: cannot list the instances: {exc}") from None
    targets: dict[str, dict[str, str]] = {}
    vllm: set[str] = set()
    for labels in found:
        inst = labels.get("instance")
        if not inst:
            continue
        if labels.get("__name__") == "up":
            targets[inst] = {k: v for k, v in labels.items() if k != "__name__"}
        else:
            vllm.add(inst)
            targets.setdefault(inst, {k: v for k, v in labels.items()
                                      if k in ("instance", "job", "pod", "namespace", "node")})
    jobs = {targets[i].get("job") for i in vllm}
    return {i: targets[i] for i in sorted(targets) if selector or i in vllm or targets[i].get("job") in jobs}


def classify_fleet(client: PromClient, selector: str, window: Window, *, parallel: int = 8,
                   deadline_s: float = 60.0, progress: Callable[[int, int], None] | None = None) -> FleetReport:
    inner = selector_matchers(selector)
    instances = list_instances(client, inner, window)
    if not instances:
        raise PrometheusError(f"{client.url}: no vLLM instance matches {selector or '{}'} between {iso(window.start)} "
                              f"and {iso(window.end)}")
    until = time.monotonic() + deadline_s
    results: dict[str, InstanceVerdict] = {}

    def one(inst: str) -> InstanceVerdict:
        left = until - time.monotonic()
        if left <= 0:
            return unread(inst, instances[inst], f"not read: the {deadline_s:g}s deadline of the whole pull passed")
        try:
            data = pull_instance(client, inst, instances[inst], window, inner, left)
        except QueryFailed as exc:
            return unread(inst, instances[inst], f"series not read: {exc}")
        return classify_instance(data, window)

    pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="triage-fleet")
    futures: dict[Future, str] = {pool.submit(one, inst): inst for inst in instances}
    try:
        for fut in as_completed(futures, timeout=max(0.0, until - time.monotonic()) + GRACE_S):
            results[futures[fut]] = fut.result()
            if progress is not None:
                progress(len(results), len(instances))
    except FutureTimeout:
        pass
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for inst in instances:
        if inst not in results:
            results[inst] = unread(inst, instances[inst], f"not read within the {deadline_s:g}s deadline of the "
                                                          "whole pull")
    verdicts = [results[i] for i in instances if results[i].vllm]
    others = [i for i in instances if not results[i].vllm]
    if not verdicts:
        raise PrometheusError(f"{client.url}: the targets {selector or '{}'} matches answered without vLLM series "
                              f"between {iso(window.start)} and {iso(window.end)}")
    rollout = find_rollout(verdicts)
    warnings = [f"{v.instance}: {n}" for v in verdicts for n in v.notes]
    if others:
        warnings.append(f"{len(others)} target(s) answered without any vLLM series, left out: {', '.join(others[:5])}"
                        + (" ..." if len(others) > 5 else ""))
    return FleetReport(client.url, selector, window, verdicts, rollout, summarize(verdicts, rollout), warnings)


def find_rollout(verdicts: Sequence[InstanceVerdict]) -> float | None:
    """The start of the first span of ROLLOUT_SPAN_S in which at least two instances, and at least
    half of the fleet, had a server process end with no memory sign before it (stop answering or
    restart): a rollout, not a wave of OOMs."""
    ends = sorted(v.first_end for v in verdicts if v.first_end is not None)
    need = max(2, math.ceil(len(verdicts) / 2))
    for i, t in enumerate(ends):
        if sum(1 for u in ends[i:] if u - t <= ROLLOUT_SPAN_S) >= need:
            return t
    return None


def class_counts(verdicts: Sequence[InstanceVerdict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.oom_class] = counts.get(v.oom_class, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def summarize(verdicts: Sequence[InstanceVerdict], rollout: float | None) -> str:
    n = len(verdicts)
    counts = class_counts(verdicts)
    failing = sorted((c for c in counts if c != HEALTHY.value), key=lambda c: (-counts[c], c == UNDECIDED.value, c))
    if not failing:
        return f"{n}/{n} instances healthy"
    lead = failing[0]
    group = [v for v in verdicts if v.oom_class == lead]
    times = [v.failure.t for v in group if v.failure is not None]
    when = ""
    if rollout is not None and times and min(times) >= rollout:
        when = f" after the {clock(rollout)[:5]} rollout"
    elif times:
        when = f" since {clock(min(times))[:5]}"
    parts = [f"{counts[lead]}/{n} instances: {CLASS_LABELS[lead]}{when}"]
    parts += [f"{counts[c]} {CLASS_LABELS[c]}" for c in failing[1:]]
    if counts.get(HEALTHY.value):
        parts.append(f"{counts[HEALTHY.value]} {CLASS_LABELS[HEALTHY.value]}")
    return "; ".join(parts)


# -- JSON -----------------------------------------------------------------------------------------

def to_json(report: FleetReport) -> dict[str, Any]:
    from ...report import to_json as verdict_json

    return {
        "schema": SCHEMA_ID,
        "prometheus": report.url,
        "selector": report.selector,
        "window": report.window.json(),
        "summary": report.summary,
        "counts": report.counts(),
        "rollout": iso(report.rollout) if report.rollout is not None else None,
        "instances": [{
            "instance": v.instance,
            "labels": dict(v.labels),
            "class": v.oom_class,
            "confidence": round(float(v.verdict.confidence), 2),
            "summary": v.verdict.summary,
            "deciding": _reading(v.deciding),
            "failure": None if v.failure is None else {"time": iso(v.failure.t), "phase": v.failure.phase,
                                                       "what": v.failure.what},
            "restarts": v.restarts,
            "error": v.error,
            "verdict": verdict_json(v.verdict),
        } for v in report.instances],
        "warnings": list(report.warnings),
    }


def _reading(e: Evidence | None) -> dict[str, Any] | None:
    shown = e.fields.get("reading") if e is not None else None
    if e is None or shown is None:
        return None
    return {"series": shown.series, "time": iso(shown.t), "value": shown.value, "text": e.text}
