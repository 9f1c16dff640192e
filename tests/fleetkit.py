"""Fleets of vLLM servers as Prometheus holds them, for the fleet tests and the fleet benchmark.

`Fleet` builds deterministic series (vLLM V1 gauges and counters, `up`, the process start time,
`vllm:cache_config_info`, DCGM's framebuffer and Xid gauges, kube-state-metrics' restarts and
termination reason) for servers that fail the way each OOM class does; `write_openmetrics` writes
them as OpenMetrics text, `build_tsdb` turns that into TSDB blocks with `promtool tsdb
create-blocks-from openmetrics`, and `Prometheus` runs a real server on loopback over them (or
over a scrape configuration), killed as a process group on exit. Every wait is bounded.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

MIB_CARD = 81920            # an 80 GiB card, in MiB as DCGM reports it
UTIL = 0.9
BUDGET_MIB = int(MIB_CARD * UTIL) + 600     # what vLLM holds at utilisation 0.9, CUDA context included


def tools_missing() -> str | None:
    """Why the fleet tests cannot run here, or None."""
    missing = [t for t in ("prometheus", "promtool") if shutil.which(t) is None]
    return f"{' and '.join(missing)} not installed (Debian: apt-get install prometheus)" if missing else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- series -------------------------------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]


@dataclass
class Fleet:
    """Series by (metric name, labels): points in time order."""

    series: dict[tuple[str, Labels], list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, name: str, labels: dict[str, str], t: float, value: float) -> None:
        self.series.setdefault((name, tuple(sorted(labels.items()))), []).append((t, value))

    def server(self, instance: str, job: str = "vllm", gpu_instance: str | None = None, **target: str) -> "Server":
        host = instance.rsplit(":", 1)[0]
        return Server(self, instance, job, target, gpu_instance or f"{host}:9400")


@dataclass
class Server:
    """One vLLM target (V1 names), its process and its GPU, written one scrape at a time."""

    fleet: Fleet
    instance: str
    job: str
    target: dict[str, str]
    gpu_instance: str
    prefix_caching: bool = True
    util: float = UTIL
    started: float | None = None
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        return {"instance": self.instance, "job": self.job, **self.target}

    def start(self, t: float) -> None:
        """A new server process (counters from zero)."""
        self.started = t
        self.counters = {}

    def up(self, t: float, *, kv: float, running: float, waiting: float = 0, served: float = 0,
           preempted: float = 0, queries: float = 0, hits: float = 0, gpu_mib: float | None = None) -> None:
        if self.started is None:
            self.start(t - 3600)
        add, own = self.fleet.add, self.labels
        vllm = {**own, "engine": "0", "model_name": "meta-llama/Llama-3.1-70B-Instruct"}
        add("up", own, t, 1)
        add("process_start_time_seconds", own, t, self.started)
        add("vllm:kv_cache_usage_perc", vllm, t, kv)
        add("vllm:num_requests_running", vllm, t, running)
        add("vllm:num_requests_waiting", vllm, t, waiting)
        for name, inc in (("vllm:request_success_total", served), ("vllm:num_preemptions_total", preempted),
                          ("vllm:prefix_cache_queries_total", queries), ("vllm:prefix_cache_hits_total", hits)):
            self.counters[name] = self.counters.get(name, 0.0) + inc
            extra = {"finished_reason": "stop"} if name == "vllm:request_success_total" else {}
            add(name, {**vllm, **extra}, t, self.counters[name])
            add(name.replace("_total", "_created"), {**vllm, **extra}, t, self.started)
        add("vllm:cache_config_info", {**own, "engine": "0", "block_size": "16", "gpu_memory_utilization": str(self.util),
                                       "enable_prefix_caching": str(self.prefix_caching), "num_gpu_blocks": "27910"},
            t, 1)
        if gpu_mib is not None:
            self.gpu(t, gpu_mib)

    def down(self, t: float, gpu_mib: float | None = None) -> None:
        self.fleet.add("up", self.labels, t, 0)
        if gpu_mib is not None:
            self.gpu(t, gpu_mib)

    def gpu(self, t: float, used_mib: float, xid: float = 0) -> None:
        labels = {"instance": self.gpu_instance, "job": "dcgm", "gpu": "0", "UUID": f"GPU-{zlib.crc32(self.instance.encode()):08x}",
                  "device": "nvidia0", "modelName": "NVIDIA A100-SXM4-80GB",
                  "Hostname": self.instance.rsplit(":", 1)[0], **{k: v for k, v in self.target.items()
                                                                 if k in ("pod", "namespace")}}
        used = min(MIB_CARD, max(0.0, round(used_mib)))
        self.fleet.add("DCGM_FI_DEV_FB_USED", labels, t, used)
        self.fleet.add("DCGM_FI_DEV_FB_FREE", labels, t, MIB_CARD - used)
        self.fleet.add("DCGM_FI_DEV_XID_ERRORS", labels, t, xid)

    def kube(self, t: float, restarts: float, reason: str | None) -> None:
        own = {"namespace": self.target.get("namespace", "default"), "pod": self.target["pod"], "container": "vllm",
               "job": "kube-state-metrics", "instance": "kube-state-metrics:8080"}
        self.fleet.add("kube_pod_container_status_restarts_total", own, t, restarts)
        for r in ("OOMKilled", "Error"):
            self.fleet.add("kube_pod_container_status_last_terminated_reason", {**own, "reason": r}, t,
                           1 if r == reason else 0)


def times(start: float, end: float, step: float) -> list[float]:
    return [start + i * step for i in range(int((end - start) // step) + 1)]


def wave(t: float, period: float = 600.0) -> float:
    """A deterministic wobble in [0, 1]."""
    return 0.5 + 0.5 * math.sin(2 * math.pi * t / period)


# -- the OOM classes as series --------------------------------------------------------------------

def healthy(s: Server, ts: Iterable[float], *, gpu: bool = True) -> None:
    for t in ts:
        s.up(t, kv=0.3 + 0.2 * wave(t), running=6 + round(2 * wave(t, 300)), served=5, queries=4000, hits=2600,
             gpu_mib=BUDGET_MIB if gpu else None)


def burst(s: Server, ts: list[float], fail_at: float, *, gpu: bool = True, back_after: float | None = 60.0) -> None:
    """Steady, then two minutes of a spike (KV to 99%, a queue, preemptions), then the process dies;
    Kubernetes starts it again `back_after` seconds later (None: it stays down)."""
    for t in ts:
        if t < fail_at - 120:
            s.up(t, kv=0.4 + 0.1 * wave(t), running=8, served=6, queries=3000, hits=1800,
                 gpu_mib=BUDGET_MIB if gpu else None)
        elif t < fail_at:
            x = (t - (fail_at - 120)) / 120
            s.up(t, kv=round(0.85 + 0.14 * x, 4), running=round(24 + 8 * x), waiting=round(4 + 40 * x), served=4,
                 preempted=round(3 + 5 * x), queries=9000, hits=5000,
                 gpu_mib=(BUDGET_MIB + (MIB_CARD - 150 - BUDGET_MIB) * x) if gpu else None)
        elif back_after is None or t < fail_at + back_after:
            s.down(t, gpu_mib=300 if gpu else None)
        else:
            if s.started is not None and s.started < fail_at:
                s.start(t)
            s.up(t, kv=0.2, running=3, served=2, queries=1000, hits=700, gpu_mib=BUDGET_MIB if gpu else None)


def chronic(s: Server, ts: list[float], fail_at: float) -> None:
    """Steady load while GPU memory in use climbs for hours until the card is full; then it dies."""
    first = ts[0]
    s.start(first - 600)
    for t in ts:
        if t < fail_at:
            share = (t - first) / (fail_at - first)
            s.up(t, kv=0.45 + 0.05 * wave(t), running=8 + (1 if wave(t, 900) > 0.5 else 0), served=6, queries=3000,
                 hits=2000, gpu_mib=BUDGET_MIB + (MIB_CARD - 200 - BUDGET_MIB) * share)
        else:
            s.down(t, gpu_mib=200)


def prefix_stall(s: Server, ts: list[float]) -> None:
    """Prefix caching on, the hit rate at 3%, the KV cache pinned at 100% while running requests
    collapse and the queue grows: thrashing, no crash."""
    first = ts[0]
    for t in ts:
        x = min(1.0, (t - first) / (ts[-1] - first) * 1.5)
        s.up(t, kv=min(1.0, 0.5 + 0.6 * x), running=max(1, round(16 * (1 - x))), waiting=round(40 * x), served=2,
             queries=8000, hits=240, gpu_mib=BUDGET_MIB)


def startup_loop(s: Server, ts: list[float], fail_from: float, *, gpu: bool = True, cycle: float = 90.0) -> None:
    """Serving until `fail_from` (a rollout), then restarting over and over: each start loads the
    weights, fills the card while starting, dies before it ever answers a scrape."""
    for t in ts:
        if t < fail_from:
            s.up(t, kv=0.35 + 0.1 * wave(t), running=6, served=5, queries=4000, hits=2500,
                 gpu_mib=BUDGET_MIB if gpu else None)
            continue
        phase = ((t - fail_from) % cycle) / cycle
        mib = MIB_CARD * (0.99 * min(1.0, phase / 0.6)) if phase < 0.75 else 250
        s.down(t, gpu_mib=mib if gpu else None)


def rolled(s: Server, ts: list[float], restart_at: float, down_for: float = 60.0) -> None:
    """Serving, restarted by a rollout at `restart_at`, serving again."""
    for t in ts:
        if restart_at <= t < restart_at + down_for:
            s.down(t, gpu_mib=300)
            continue
        if t >= restart_at + down_for and s.started is not None and s.started < restart_at:
            s.start(t)
        s.up(t, kv=0.3 + 0.1 * wave(t), running=5, served=5, queries=4000, hits=2600, gpu_mib=BUDGET_MIB)


def oomkilled(s: Server, ts: list[float], fail_at: float) -> None:
    """A busy server (KV at 95%) whose container the host OOM killer ends: kube-state-metrics says
    OOMKilled; Kubernetes starts it again a minute later."""
    restarts = 0.0
    reason = None
    for t in ts:
        if t < fail_at:
            s.up(t, kv=0.9 + 0.05 * wave(t), running=20, waiting=3, served=6, queries=3000, hits=2000,
                 gpu_mib=BUDGET_MIB)
        elif t < fail_at + 60:
            s.down(t, gpu_mib=300)
            restarts, reason = 1.0, "OOMKilled"
        else:
            if s.started is not None and s.started < fail_at:
                s.start(t)
            s.up(t, kv=0.3, running=4, served=3, queries=1000, hits=600, gpu_mib=BUDGET_MIB)
        s.kube(t, restarts, reason)


def xid_fault(s: Server, ts: list[float], fail_at: float) -> None:
    """Xid 79 (the GPU fell off the bus) a scrape before the server dies with the card full."""
    for t in ts:
        xid = 79 if t >= fail_at - 15 else 0
        if t < fail_at:
            s.up(t, kv=0.5, running=8, served=6, queries=3000, hits=2000)
            s.gpu(t, MIB_CARD - 100 if t >= fail_at - 15 else BUDGET_MIB, xid)
        else:
            s.down(t)
            s.gpu(t, 0, xid)


def never_up(s: Server, ts: list[float]) -> None:
    for t in ts:
        s.down(t)


# -- files and servers ----------------------------------------------------------------------------

def write_openmetrics(fleet: Fleet, path: Path) -> Path:
    """OpenMetrics text: each metric's series together, points in time order, `# EOF` last."""
    by_name: dict[str, list[tuple[Labels, list[tuple[float, float]]]]] = {}
    for (name, labels), points in fleet.series.items():
        by_name.setdefault(name, []).append((labels, points))
    with open(path, "w", encoding="utf-8") as out:
        for name in sorted(by_name):
            out.write(f"# TYPE {name} gauge\n")
            for labels, points in sorted(by_name[name]):
                head = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
                out.writelines(f"{head} {v:g} {t:.3f}\n" for t, v in sorted(points))
        out.write("# EOF\n")
    return path


def build_tsdb(openmetrics: Path, data_dir: Path, timeout: float = 300) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed: {done.stderr[-2000:]}")
    return data_dir


class Prometheus:
    """A real `prometheus` on a free loopback port, over `data_dir`, scraping what `config` says
    (nothing by default), stopped with its whole process group."""

    def __init__(self, data_dir: Path, config: str = "global:\n  scrape_interval: 1m\n", *,
                 web_config: str | None = None, extra: tuple[str, ...] = ()):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = data_dir.parent / f"prometheus-{self.port}.yml"
        cfg.write_text(config, encoding="utf-8")
        argv = ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y",
                "--log.level=warn", *extra]
        if web_config is not None:
            web = data_dir.parent / f"web-{self.port}.yml"
            web.write_text(web_config, encoding="utf-8")
            argv.append(f"--web.config.file={web}")
        self.log = data_dir.parent / f"prometheus-{self.port}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def wait_ready(self, timeout: float = 60.0, tls: bool = False) -> "Prometheus":
        """Until /-/ready answers 200 (over TLS, unverified, for a server behind a web config's TLS)."""
        import ssl

        context = ssl._create_unverified_context() if tls else None
        url = self.url.replace("http://", "https://") if tls else self.url
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=2, context=context) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready within {timeout:.0f}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> "Prometheus":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def scrape_config(targets: dict[str, list[str]], interval: str = "1s") -> str:
    """A prometheus.yml scraping `job -> [host:port, ...]` every `interval`."""
    jobs = "".join(f"  - job_name: {job}\n    static_configs:\n      - targets: [{', '.join(repr(t) for t in hosts)}]\n"
                   for job, hosts in targets.items())
    return (f"global:\n  scrape_interval: {interval}\n  evaluation_interval: 1m\n  scrape_timeout: {interval}\n"
            f"scrape_configs:\n{jobs}")
