"""The outcome of a proof: held or failed, and the figures that say why (`triage.prove/v1`).

Held means: every request the load sent was served, the server still answers /health after it,
and — where NVML reads the card and a minimum headroom was asked for — the card kept that much
free at its fullest. Anything else is failed, with the first failure and when it came.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .load import LoadState
from .profile import Limits, LoadProfile

SCHEMA = "triage.prove/v1"
GiB = float(1 << 30)
HELD, FAILED, INTERRUPTED = "held", "failed", "interrupted"


@dataclass
class ProveResult:
    url: str
    loopback: bool
    model: str
    profile: LoadProfile
    limits: Limits
    started_at: datetime
    state: LoadState
    health_after: str | None = None          # "GET /health -> 200", or why not
    healthy_after: bool = True
    min_headroom_bytes: int | None = None
    reproduced: dict[str, Any] | None = None  # the server log's verdict after a failure
    incident: dict[str, Any] | None = None    # {path, class, recorded}
    export: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    # -- the verdict ------------------------------------------------------------------------------
    @property
    def result(self) -> str:
        if self.state.interrupted:
            return INTERRUPTED
        return FAILED if self.failure() is not None else HELD

    def failure(self) -> dict[str, Any] | None:
        """The first failure: a request, the server after the load, or too little headroom."""
        st = self.state
        if st.first_failure is not None:
            f = st.first_failure
            return {"time_s": f.time_s, "phase": f.phase, "kind": f.kind, "status": f.status, "detail": f.detail}
        if not self.healthy_after:
            return {"time_s": round(st.elapsed_s, 3), "phase": "after", "kind": "server_down", "status": None,
                    "detail": f"after the load: {self.health_after}"}
        if st.served == 0 and not st.interrupted:
            return {"time_s": round(st.elapsed_s, 3), "phase": "hold", "kind": "nothing_served", "status": None,
                    "detail": "no request completed within the run"}
        headroom = self.headroom_bytes
        if self.min_headroom_bytes is not None and headroom is not None and headroom < self.min_headroom_bytes:
            return {"time_s": round(st.elapsed_s, 3), "phase": "hold", "kind": "headroom", "status": None,
                    "detail": f"the card kept {headroom / GiB:.2f} GiB free at its fullest, under the "
                              f"{self.min_headroom_bytes / GiB:.2f} GiB asked for"}
        return None

    @property
    def headroom_bytes(self) -> int | None:
        p = self.state.peaks
        if p.gpu_used_bytes is None or p.gpu_total_bytes is None:
            return None
        return p.gpu_total_bytes - p.gpu_used_bytes

    def latency(self) -> dict[str, float] | None:
        values = sorted(self.state.latencies)
        if not values:
            return None
        return {"p50": _pct(values, 50), "p90": _pct(values, 90), "p99": _pct(values, 99),
                "max": round(values[-1], 3), "mean": round(sum(values) / len(values), 3)}

    def gpu(self) -> dict[str, Any]:
        p = self.state.peaks
        if p.gpu_used_bytes is None or p.gpu_total_bytes is None:
            return {"read": False, "note": p.gpu_note or "GPU memory not read"}
        total, used = p.gpu_total_bytes, p.gpu_used_bytes
        headroom = total - used
        out: dict[str, Any] = {
            "read": True, "index": p.gpu_index, "name": p.gpu_name, "total_bytes": total,
            "peak_used_bytes": used, "peak_used_gib": round(used / GiB, 2),
            "headroom_bytes": headroom, "headroom_gib": round(headroom / GiB, 2),
            "headroom_pct": round(100.0 * headroom / total, 1) if total else None,
            "budget_share": p.budget_share, "budget_bytes": None, "over_budget_bytes": None}
        if p.budget_share:
            budget = int(p.budget_share * total)
            out["budget_bytes"] = budget
            out["over_budget_bytes"] = used - budget
        return out

    # -- its forms ------------------------------------------------------------------------------
    def json(self) -> dict[str, Any]:
        st, p = self.state, self.state.peaks
        return {
            "schema": SCHEMA,
            "result": self.result,
            "summary": self.summary(),
            "target": {"url": self.url, "loopback": self.loopback, "model": self.model},
            "profile": self.profile.json(),
            "limits": {"duration_s": self.limits.duration_s, "ramp_s": self.limits.ramp_s,
                       "max_requests": self.limits.max_requests, "request_timeout_s": self.limits.request_timeout_s,
                       "drain_s": self.limits.drain_s},
            "started_at": self.started_at.isoformat().replace("+00:00", "Z"),
            "elapsed_s": round(st.elapsed_s, 3),
            "first_failure": self.failure(),
            "requests": {"sent": st.sent, "served": st.served, "failed": st.failed, "cut": st.cut,
                         "request_bound_hit": st.request_bound_hit},
            "latency_s": self.latency(),
            "server": {"samples": p.samples, "peak_kv_usage": p.kv_usage, "peak_running": p.running,
                       "peak_waiting": p.waiting, "preemptions": p.preemptions,
                       "metrics_failures": p.metrics_failures, "metrics_problem": p.metrics_problem,
                       "health_after": self.health_after},
            "gpu": self.gpu(),
            "reproduced": self.reproduced,
            "incident": self.incident,
            "export": {"vllm_bench_serve": self.export},
            "notes": [*self.profile.notes, *self.notes],
        }

    def summary(self) -> str:
        """One line; the timeline shows it (the last line of the recorded output)."""
        load = self.profile.describe()
        whose = "the incident's peak" if self.profile.from_incident else "the given load"
        if self.result == INTERRUPTED:
            return f"proof interrupted after {self.state.elapsed_s:.1f} s under {whose} ({load})"
        fail = self.failure()
        if fail is None:
            gpu = self.gpu()
            room = f", GPU headroom {gpu['headroom_gib']:.2f} GiB ({gpu['headroom_pct']:.1f}%)" if gpu["read"] else ""
            held = (f"held {self.state.sent} requests (the request bound)" if self.state.request_bound_hit
                    else f"held {self.limits.duration_s:g} s")
            return f"fix proven under {whose}: {load} {held}, {self.state.served} served, 0 failed{room}"
        like = ""
        if self.reproduced and self.reproduced.get("class"):
            like = f"; the server log reads {self.reproduced['class'].upper()}"
            if self.incident and self.incident.get("class") == self.reproduced["class"]:
                like += ", as the incident"
        return (f"failed under {whose}: {load}: first failure at {fail['time_s']:.1f} s ({fail['phase']}): "
                f"{fail['detail']}{like}")

    def lines(self) -> list[str]:
        """The human report (stdout without --json)."""
        st, p = self.state, self.state.peaks
        out = [f"{self.result.upper()}: {self.summary()}",
               f"target {self.url} ({'loopback' if self.loopback else 'remote'}), model {self.model}",
               f"load: {self.profile.describe()}, ramp {self.limits.ramp_s:g} s, hold {self.limits.duration_s:g} s",
               "  figures from: " + "; ".join(f"{name} {fig.source}" for name, fig in (
                   ("concurrency", self.profile.concurrency), ("prompt", self.profile.prompt_tokens),
                   ("output", self.profile.output_tokens))),
               f"requests: {st.sent} sent, {st.served} served, {st.failed} failed, {st.cut} cut at the end"]
        lat = self.latency()
        if lat:
            out.append(f"latency: p50 {lat['p50']:.2f} s, p90 {lat['p90']:.2f} s, p99 {lat['p99']:.2f} s, "
                       f"max {lat['max']:.2f} s")
        kv = f"{p.kv_usage:.1%}" if p.kv_usage is not None else "not read"
        out.append(f"server: peak KV usage {kv}, running {p.running if p.running is not None else '?'}, waiting "
                   f"{p.waiting if p.waiting is not None else '?'}, preemptions "
                   f"{p.preemptions if p.preemptions is not None else '?'}"
                   + (f"; {self.health_after}" if self.health_after else ""))
        gpu = self.gpu()
        if gpu["read"]:
            line = (f"GPU {gpu['index']} ({gpu['name']}): peak {gpu['peak_used_gib']:.2f} of "
                    f"{gpu['total_bytes'] / GiB:.2f} GiB in use, headroom {gpu['headroom_gib']:.2f} GiB "
                    f"({gpu['headroom_pct']:.1f}% of the card)")
            if gpu["budget_bytes"] is not None:
                line += f"; engine budget {gpu['budget_bytes'] / GiB:.2f} GiB ({gpu['budget_share']:g})"
            out.append(line)
        else:
            out.append(f"GPU: {gpu['note']}")
        if self.reproduced:
            out.append(f"server log {self.reproduced.get('log')}: {self.reproduced.get('summary')}")
        if self.incident:
            out.append(f"incident {self.incident['path']}: "
                       + ("run recorded in actions.jsonl" if self.incident.get("recorded")
                          else "not recorded (a log, not an incident directory, or --no-record)"))
        out += [f"note: {n}" for n in [*self.profile.notes, *self.notes]]
        return out


def _pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    rank = max(1, min(len(values), int(-(-q * len(values) // 100))))
    return round(values[rank - 1], 3)
