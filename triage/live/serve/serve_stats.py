"""`triage serve`'s own /metrics, in a private prometheus-client registry (never the process-wide
default one, so nothing another library registers leaks into it)."""
from __future__ import annotations

from typing import Callable


class ServeStats:
    def __init__(self, queue_depth: Callable[[], float]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics

        disable_created_metrics()     # this process is the receiver alone: `_created` series only add noise
        self.registry = CollectorRegistry(auto_describe=True)
        depth = Gauge("triage_serve_queue_depth", "Alerts waiting for a worker", registry=self.registry)
        depth.set_function(queue_depth)
        self.requests = Counter("triage_serve_requests_total", "HTTP requests answered, by path and status code",
                                ["path", "code"], registry=self.registry)
        self.alerts = Counter("triage_serve_alerts_total", "Alerts received, by what was done with them "
                              "(accepted, duplicate, resolved, rejected)", ["outcome"], registry=self.registry)
        self.verdicts = Counter("triage_serve_verdicts_total", "Incidents opened, by verdict class", ["class"],
                                registry=self.registry)
        self.failures = Counter("triage_serve_failures_total", "Failures, by stage (incident, resolve, post)",
                                ["stage"], registry=self.registry)
        self.posts = Counter("triage_serve_posts_total", "Messages posted to --post, by result", ["result"],
                             registry=self.registry)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
