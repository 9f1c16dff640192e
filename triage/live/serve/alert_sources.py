"""The evidence `triage serve` gathers for one alert: the server's log and its Prometheus series.

Logs come from one of two places (`--logs-from`):

* a directory of per-instance logs. The file is found from the alert's labels, the first label
  that names one winning, in this order: `pod`, `instance`, the host part of `instance`
  (`gpu-node-07` of `gpu-node-07:8000`), `Hostname`, `hostname`, `node`. For a label value V
  the directory is looked into for a file `V`, a file `V.log` and a directory `V/` (whose plain
  files are all taken, in name order). Values holding `/` or starting with `.` name nothing.
* `kubectl`: the pod named by the alert's `namespace` and `pod` labels: `kubectl get pod` and
  `kubectl logs` per container, with `--previous` for a container that restarted (the crashed
  run's log is the evidence), each with a timeout.

Either way the tail of each log is copied, masked, as `triage collect` copies it. The series are
the instance's (its `instance` label) from `startsAt - lookback` to `startsAt + after` (or now),
read through the fleet library and written to metrics/ as timestamped exposition text (label
values masked), which the bundle's own classification reads like any scrape.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..collect import kube_source, log_source
from .alert_payload import Alert
from ..collect.collect import log_names
from ..source import SourceRun
from ..staging import Staging

LABEL_ORDER = ("pod", "instance", "@host", "Hostname", "hostname", "node")
MAX_LOG_FILES = 8            # of one instance's directory
TARGET_LABELS = ("instance", "job", "pod", "namespace", "node")
SERIES_POINTS = 4000         # the default step keeps about this many points per series (1 s at least)
_SAFE_FILE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class LogsFrom:
    directory: Path | None = None       # None: kubectl

    @property
    def kubectl(self) -> bool:
        return self.directory is None

    def describe(self) -> str:
        return "kubectl" if self.kubectl else str(self.directory)


def candidate_names(labels: dict[str, str]) -> list[str]:
    """The label values a log may be named after, in the order they are tried."""
    out: list[str] = []
    for key in LABEL_ORDER:
        if key == "@host":
            inst = labels.get("instance", "")
            value = inst.rsplit(":", 1)[0] if re.search(r":\d+$", inst) else ""
        else:
            value = labels.get(key, "")
        value = value.strip()
        if value and "/" not in value and "\0" not in value and not value.startswith(".") and value not in out:
            out.append(value)
    return out


def match_logs(directory: Path, labels: dict[str, str]) -> list[Path]:
    for name in candidate_names(labels):
        found = [p for p in (directory / name, directory / f"{name}.log") if p.is_file()]
        folder = directory / name
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))[:MAX_LOG_FILES]
        if found:
            return found
    return []


def gather_logs(staging: Staging, logs_from: LogsFrom, labels: dict[str, str], timeout_s: float,
                max_bytes: int) -> list[SourceRun]:
    if logs_from.directory is not None:
        files = match_logs(logs_from.directory, labels)
        if not files:
            run = SourceRun("log", str(logs_from.directory), timeout_s, staging)
            tried = ", ".join(candidate_names(labels)) or "no label to match"
            run.skip(f"no log in {logs_from.directory} matches the alert (looked for: {tried})")
            return [run]
        runs = []
        for rel, path in log_names(tuple(files)):
            run = SourceRun("log", str(path), timeout_s, staging)
            guarded(run, log_source.log_file, run, path, rel, max_bytes)
            runs.append(run)
        return runs
    ns, pod = labels.get("namespace", ""), labels.get("pod", "")
    if not (kube_source.NAME_RE.match(ns) and kube_source.NAME_RE.match(pod)):
        run = SourceRun("kubectl logs", "kubectl logs", timeout_s, staging)
        run.skip("the alert has no usable namespace and pod labels")
        return [run]
    pod_run = SourceRun("kubectl pod", f"kubectl get pod -n {ns} {pod} -o json", timeout_s, staging)
    doc = guarded(pod_run, kube_source.pod, pod_run, ns, pod)
    logs_run = SourceRun("kubectl logs", f"kubectl logs -n {ns} {pod}", timeout_s, staging)
    guarded(logs_run, kube_source.logs, logs_run, ns, pod, doc, max_bytes)
    return [pod_run, logs_run]


def series_step(span_s: float, step_s: float | None = None) -> float:
    """The query step: the one given, else one that follows the window — fine enough that a server
    living a few seconds still leaves points (one instance per query: the points are cheap)."""
    return step_s if step_s else max(1.0, float(math.ceil(span_s / SERIES_POINTS)))


def gather_series(staging: Staging, client: Any, alert: Alert, lookback_s: float, after_s: float,
                  timeout_s: float, step_s: float | None = None) -> tuple[SourceRun, Any]:
    """(the run, the instance's verdict from its series (fleet.InstanceVerdict) or None)."""
    from ..fleet.fleet import Window, classify_instance, pull_instance
    from ..fleet.promapi import PrometheusError, QueryFailed

    instance = alert.labels.get("instance", "")
    run = SourceRun("prometheus", f"{client.url} instance={instance}", timeout_s, staging)
    if not instance:
        run.skip("the alert has no instance label")
        return run, None
    at = alert.starts.timestamp()
    end = max(at, min(time.time(), at + after_s))
    step = series_step(end + 1 - (at - lookback_s), step_s)
    window = Window.make(start=str(at - lookback_s), end=str(end + 1), step=f"{step:g}s")
    labels = {k: v for k, v in alert.labels.items() if k in TARGET_LABELS}
    try:
        data = pull_instance(client, instance, labels, window, "", timeout_s)
    except (QueryFailed, PrometheusError) as exc:
        run.fail(f"series not read: {exc}")
        return run, None
    series = [*data.main, *(data.gpu or ())]
    if not series:
        run.ok(f"no series of instance {instance} from {window.json()['start']} to {window.json()['end']}")
        return run, None
    safe = _SAFE_FILE.sub("_", instance).strip("_") or "instance"
    try:
        run.write(f"metrics/prometheus-{safe}.prom", exposition(series), "GET /api/v1/query_range")
    except Exception as exc:          # the disk, or the source's time ran out while writing
        run.fail(f"series not written: {exc}"[:300])
        return run, None
    verdict = classify_instance(data, window)
    run.ok(f"{len(series)} series, {sum(len(s.points) for s in series)} points at a {step:g} s step; "
           f"from them: {verdict.oom_class}")
    return run, verdict


def exposition(series: Iterable[Any]) -> bytes:
    """Range-query series as Prometheus text exposition, one timestamped (ms) sample a line."""
    by_name: dict[str, list[Any]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s)
    lines = []
    for name in sorted(n for n in by_name if n):
        for s in by_name[name]:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items()) if k != "__name__")
            head = f"{name}{{{labels}}}"
            lines.extend(f"{head} {v!r} {int(round(t * 1000))}" for t, v in s.points)
    return ("\n".join(lines) + "\n").encode("utf-8")


def _escape(value: str) -> str:
    from ...redact import mask_text

    value = mask_text(value)               # a label can hold a URL with its password, or a token
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def guarded(run: SourceRun, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args); whatever goes wrong in it is this source's failure, not the incident's."""
    try:
        return fn(*args)
    except Exception as exc:
        run.fail(f"{exc.__class__.__name__}: {exc}"[:300])
        return None
    finally:
        if run.status is None:
            run.fail("ended without a result")
