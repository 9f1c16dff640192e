"""`watch --act` in simulated time: a leaking server and a busy healthy one, read for hours or days.

The leak and the healthy run are the two halves of what the sidecar must prove: it restarts a
leaking server before the card fills (and by how much earlier: the lead time), and it never acts
on a busy healthy server however long it runs. Neither can be waited for in real time (the leak
rule wants an hour of readings), so the watch's own `Watcher` (trend window, load series, risk
judgement) and `Actor` (hold, rate limit, fleet share) run on a simulated clock, fed by a
simulated server's /metrics and NVML instead of HTTP and a GPU. Only the restart itself is
replaced: it gives the leaked memory back, as a drained restart does. The real restart path
(PID proofs, the executor, the audit log) is proven against `triage sim serve` in
tests/test_watch_act.py.

The simulated server is the simulator's default card and budget (80 GiB, gpu_memory_utilization
0.90) with the CUDA context and NCCL outside the budget (NON_TORCH). NVML's used memory is
budget + non-torch + whatever leaked; the card is out of memory when that reaches the card.
"""
from __future__ import annotations

import math
import random
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ..live.nvml import GpuReading
from ..live.watch.act import Actor, Policy
from ..live.watch.readings import Scrape, Source
from ..live.watch.scrape import ServerFetch
from ..live.watch.watcher import ServerSpec, Watcher

GiB = 1 << 30
CARD = 80 * GiB
BUDGET = 0.90
NON_TORCH = int(0.6 * GiB)          # CUDA context, cuBLAS workspaces, NCCL: outside the budget
URL = "http://127.0.0.1:8000"
T0 = datetime(2026, 11, 27, tzinfo=timezone.utc)


@dataclass
class DrillResult:
    hours: float
    readings: int = 0
    oom_at_s: float | None = None          # when the card would have filled without any restart
    actions: list[tuple[float, str, str]] = field(default_factory=list)     # (t, decision, precursor class)
    precursors: list[tuple[float, str]] = field(default_factory=list)       # (t, first precursor's reasons)
    risks: Counter = field(default_factory=Counter)                         # readings that raised each risk class

    @property
    def first_action_s(self) -> float | None:
        return self.actions[0][0] if self.actions else None

    @property
    def lead_s(self) -> float | None:
        """How long before the card would have filled the first restart came (None: none came)."""
        if self.first_action_s is None or self.oom_at_s is None:
            return None
        return self.oom_at_s - self.first_action_s


class _Nvml:
    """A stand-in for watch's NVML session: one card whose used memory the drill sets."""

    def __init__(self) -> None:
        self.used = 0

    def read(self, timeout_s: float) -> list[GpuReading]:
        used = min(self.used, CARD)
        return [GpuReading(0, "NVIDIA H100 80GB HBM3", "GPU-drill-0", CARD, used, CARD - used)]

    def close(self) -> None:
        pass


def _run(hours: float, interval_s: float, policy: Policy, step) -> DrillResult:
    """Read every `interval_s` for `hours`; `step(t, result)` returns (used bytes, scrape) for time t
    and may end the run early by returning None."""
    result = DrillResult(hours)
    clock = {"t": 0.0}
    state = {"restarted_at": 0.0}
    nvml = _Nvml()
    scrape_box: dict[str, Scrape] = {}

    def fetcher(endpoint, timeout_s: float, want_models: bool) -> ServerFetch:
        return ServerFetch(Source(True, "ok"), Source(True, "ok"), scrape_box["now"], True,
                           32768 if want_models else None)

    def restart(server, found) -> tuple[str, str]:
        result.actions.append((clock["t"], "restarted", found[0].oom_class))
        state["restarted_at"] = clock["t"]
        return "restarted", f"{server.url}: drill restart (the leaked memory is given back)"

    watcher = Watcher([ServerSpec(URL, (0,))], interval_s, clock=lambda: clock["t"],
                      now=lambda: T0 + timedelta(seconds=clock["t"]), fetcher=fetcher, nvml_session=nvml)
    with tempfile.TemporaryDirectory(prefix="triage-watch-drill-") as incident:
        actor = Actor(policy, incident, clock=lambda: clock["t"], restart=restart)
        try:
            for n in range(int(hours * 3600 / interval_s) + 1):
                clock["t"] = n * interval_s
                got = step(clock["t"], state["restarted_at"], result)
                if got is None:
                    break
                nvml.used, scrape_box["now"] = got
                reading = watcher.read()
                result.readings += 1
                result.risks.update({r.oom_class for r in reading.servers[0].risks})
                for d in actor.observe(reading):
                    if d.kind == "precursor":
                        risks = reading.servers[0].risks
                        result.precursors.append((clock["t"], "; ".join(r for risk in risks for r in risk.reasons)))
        finally:
            watcher.close()
    return result


def leak(gib_per_hour: float, hours: float = 96.0, *, interval_s: float = 60.0, policy: Policy | None = None,
         running: float = 8.0, budget_known: bool = True, seed: int = 0) -> DrillResult:
    """A server that leaks `gib_per_hour` under a flat load (about `running` requests), until the
    card fills or the drill's first restart; the OOM time is where the leak alone fills the card.
    `budget_known=False`: its /metrics does not say its gpu_memory_utilization (an older vLLM, a
    proxy), so only the leak trend can see it coming, not memory outside the budget."""
    policy = policy or Policy(execute=True)
    rng = random.Random(seed)
    base = int(BUDGET * CARD) + NON_TORCH
    rate = gib_per_hour * GiB / 3600

    def step(t: float, restarted_at: float, result: DrillResult):
        if result.actions:
            return None                  # restarted: the leak's clock starts over, the drill is done
        used = base + int(rate * (t - restarted_at))
        if used >= CARD:
            return None                  # out of memory: no restart came in time
        scrape = Scrape(kv_cache_usage=0.45 + rng.uniform(-0.03, 0.03), running=running + rng.choice((-1, 0, 0, 1)),
                        waiting=0.0, gpu_memory_utilization=BUDGET if budget_known else None,
                        num_gpu_blocks=20000, block_size=16)
        return used, scrape

    result = _run(hours, interval_s, policy, step)
    result.oom_at_s = (CARD - base) / rate if rate > 0 else None
    return result


def healthy(hours: float = 168.0, *, interval_s: float = 60.0, policy: Policy | None = None,
            seed: int = 0) -> DrillResult:
    """A busy healthy server: a daily load cycle (5 to 60 running requests), the KV cache pinned above
    95% with a queue at every peak, preemptions, GPU memory flat (within 200 MiB of allocator noise)."""
    policy = policy or Policy(execute=True)
    rng = random.Random(seed)
    base = int(BUDGET * CARD) + NON_TORCH
    preempted = {"total": 0.0}

    def step(t: float, restarted_at: float, result: DrillResult):
        day = 0.5 - 0.5 * math.cos(2 * math.pi * t / 86400)          # 0 at midnight, 1 at noon
        running = 5 + 55 * day + rng.uniform(-3, 3)
        peak = day > 0.85
        kv = min(0.99, 0.2 + 0.8 * day + rng.uniform(-0.02, 0.02)) if not peak else rng.uniform(0.95, 0.99)
        waiting = rng.uniform(5, 40) if peak else 0.0
        preempted["total"] += rng.uniform(0, 3) if peak else 0.0
        scrape = Scrape(kv_cache_usage=kv, running=max(0.0, running), waiting=waiting,
                        preemptions_total=preempted["total"], gpu_memory_utilization=BUDGET,
                        num_gpu_blocks=20000, block_size=16)
        return base + int(rng.uniform(-200, 200) * (1 << 20)), scrape

    return _run(hours, interval_s, policy, step)
