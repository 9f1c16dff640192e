"""`triage watch --act`: the sidecar that restarts a server before an OOM, not after one.

It acts on watch's own judgement (`risk.assess`, the thresholds of triage/thresholds.py), and
only on the risks that precede an OOM:

  chronic   a leak trend (GPU memory rising with a flat load) or allocator fragmentation
            from the hooks dumps: memory a restart gives back;
  startup   only its NVML part: memory in use outside the engine's budget
            (`gpu_memory_utilization`) by more than `discrepancy` points, shrinking the headroom
            (`risk.outside_budget`). A budget of util_no_headroom alone is configuration.

Never on burst or prefix_cache: a full KV cache with a queue is saturation, the engine doing its
job, and a restart only drops the queue. A leak that at its slope will not fill the card within
`leak_horizon_s` (the time to the next scheduled restart) is left to that restart.

A precursor must hold for `hold_s` (every reading in a row) before anything is done. Then the
server is proven (the process listening on the URL's port, whose command line is an engine's own
entry point serving the model /v1/models names) and the recovery executor runs a drained restart
on it: drain, stop the process tree, relaunch with the running server's own command line,
wait until it serves a completion — with recovery's audit log, host and incident locks and step
timeouts (`recovery.session.open_live_session` / `execute`). Without `execute` it is a dry run:
the plan is written to INCIDENT/watch-act/plan-<UTC>.json and nothing is touched. At most
`max_actions` actions (dry-run plans included) per server per `window_s`, and on at most
`fleet_share` of the watched servers within one window (never two at once when only a few are
watched); every decision is a line of INCIDENT/notes.jsonl (the timeline) and of the watch's
output, and with --exporter the decisions, the current hold and the last action are gauges.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import urlsplit

from .readings import GpuView, Reading, Risk, ServerView
from .risk import LIMITS, Limits, outside_budget

RUNBOOK_ID = "watch-restart"
NOTE_PREFIX = "triage watch: act: "
PLAN_DIR = "watch-act"

# The drained restart: the same actions `triage recover` runs (runbooks/chronic.yaml's first half),
# the relaunch unchanged: the running server's own command line and environment.
RUNBOOK = {
    "id": RUNBOOK_ID,
    "title": "Drained restart before an OOM (triage watch --act)",
    "applies_to": ["chronic", "startup"],
    "summary": "A precursor of an OOM held on a serving server: drain it, stop it and start it again with "
               "the same command line, then wait until it serves.",
    "steps": [
        {"id": "drain", "title": "Let running requests finish", "action": "drain",
         "params": {"poll_s": 1, "max_wait_s": 120}, "timeout_s": 150, "on_failure": "continue",
         "verify": "vllm:num_requests_running reaches 0"},
        {"id": "stop", "title": "Stop the server's process tree", "action": "stop_server",
         "params": {"grace_s": 30}, "timeout_s": 90, "on_failure": "stop",
         "verify": "none of the identified PIDs is alive"},
        {"id": "relaunch", "title": "Relaunch with the same command line", "action": "restart",
         "params": {"driver": "process"}, "timeout_s": 900, "on_failure": "stop",
         "verify": "the server starts again"},
        {"id": "healthy", "title": "Wait until it serves a real completion", "action": "wait_healthy",
         "params": {"retries": 60, "backoff_s": 1, "completion_deadline_s": 60}, "timeout_s": 900,
         "on_failure": "stop", "verify": "/health answers 200 and a 1-token completion returns"},
    ],
}


@dataclass(frozen=True)
class Policy:
    hold_s: float = 120.0             # a precursor must last this long, every reading, before acting
    max_actions: int = 1              # per server per window (dry-run plans count)
    window_s: float = 3600.0
    execute: bool = False             # False: write the plan, touch nothing
    lock_path: str | None = None      # recovery's host lock (None: its default, $TRIAGE_LOCK_FILE)
    leak_horizon_s: float = 24 * 3600.0   # a leak filling the card later than this waits for the scheduled restart
    fleet_share: float = 0.25         # at most this share of the watched servers acted on per window (at least one)

    def fleet_limit(self, servers: int) -> int:
        return max(1, math.floor(self.fleet_share * servers + 1e-9))


@dataclass(frozen=True)
class Decision:
    time: datetime
    url: str
    kind: str          # precursor | cleared | planned | restarted | failed | refused | rate_limited | fleet_limited
    text: str


DECISION_KINDS = ("precursor", "cleared", "planned", "restarted", "failed", "refused", "rate_limited",
                  "fleet_limited")


def precursors(server: ServerView, gpus: Sequence[GpuView], limits: Limits = LIMITS,
               leak_horizon_s: float = math.inf) -> list[Risk]:
    """The server's risks (already judged by `risk.assess`) that precede an OOM; never saturation,
    and never a leak that will not fill the card within `leak_horizon_s`."""
    own = [g for g in gpus if g.index in server.gpus]
    out = []
    for r in server.risks:
        if r.oom_class == "chronic":
            if r.fills_card_in_s is None or r.fills_card_in_s <= leak_horizon_s:
                out.append(r)
        elif r.oom_class == "startup" and any(outside_budget(server, g, limits) is not None for g in own):
            out.append(r)
    return out


@dataclass
class _State:
    since: float | None = None                         # monotonic time the precursor was first seen, in a row
    actions: deque[float] = field(default_factory=deque)
    limited_said: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    last_action: datetime | None = None


@dataclass(frozen=True)
class ServerActState:
    """What the exporter's gauges show of one server: the current hold, the decisions so far."""

    url: str
    held_s: float
    counts: dict[str, int]
    last_action: datetime | None


Restart = Callable[[ServerView, list[Risk]], tuple[str, str]]      # -> (decision kind, text)


class Actor:
    def __init__(self, policy: Policy, incident: str | Path, say: Callable[[str], None] = lambda line: None, *,
                 limits: Limits = LIMITS, clock: Callable[[], float] = time.monotonic,
                 restart: Restart | None = None) -> None:
        self.policy, self.incident, self.say, self.limits, self.clock = policy, Path(incident), say, limits, clock
        self._restart = restart or self._drained_restart
        self._state: dict[str, _State] = {}
        self._lock = threading.Lock()          # observe() in the watch loop, snapshot() in an exporter scrape
        self.decisions: list[Decision] = []

    def observe(self, reading: Reading) -> list[Decision]:
        out: list[Decision] = []
        for server in reading.servers:
            with self._lock:
                st = self._state.setdefault(server.url, _State())
            found = precursors(server, reading.gpus, self.limits, self.policy.leak_horizon_s) \
                if server.reachable and server.healthy else []
            now = self.clock()
            if not found:
                if st.since is not None:
                    out.append(Decision(reading.time, server.url, "cleared",
                                        f"{server.url}: the precursor cleared after {now - st.since:.0f} s: "
                                        "nothing done"))
                st.since, st.limited_said = None, False
                continue
            if st.since is None:
                st.since = now
                out.append(Decision(reading.time, server.url, "precursor",
                                    f"{server.url}: OOM precursor {_describe(found)}; a drained restart if it holds "
                                    f"for {self.policy.hold_s:g} s"))
            if now - st.since < self.policy.hold_s:
                continue
            while st.actions and now - st.actions[0] >= self.policy.window_s:
                st.actions.popleft()
            if len(st.actions) >= self.policy.max_actions:
                if not st.limited_said:
                    st.limited_said = True
                    out.append(Decision(reading.time, server.url, "rate_limited",
                                        f"{server.url}: precursor held {now - st.since:.0f} s, but {len(st.actions)} "
                                        f"action(s) in the last {self.policy.window_s:g} s (at most "
                                        f"{self.policy.max_actions}): nothing done"))
                continue
            busy = self._fleet_acted(now, server.url)
            limit = self.policy.fleet_limit(len(reading.servers))
            if len(busy) >= limit:
                if not st.limited_said:
                    st.limited_said = True
                    out.append(Decision(reading.time, server.url, "fleet_limited",
                                        f"{server.url}: precursor held {now - st.since:.0f} s, but {len(busy)} of the "
                                        f"{len(reading.servers)} watched servers were acted on in the last "
                                        f"{self.policy.window_s:g} s (at most {limit}, fleet share "
                                        f"{self.policy.fleet_share:g}): nothing done"))
                continue
            st.actions.append(now)
            st.since, st.limited_said = None, False           # a new hold starts after an action
            st.last_action = reading.time
            kind, text = self._restart(server, found)
            out.append(Decision(reading.time, server.url, kind, text))
        for d in out:
            self._record(d)
        return out

    def _fleet_acted(self, now: float, url: str) -> list[str]:
        """The other servers acted on within the window (this one's own actions are its rate limit)."""
        return [u for u, st in self._state.items()
                if u != url and any(now - t < self.policy.window_s for t in st.actions)]

    def snapshot(self) -> list[ServerActState]:
        with self._lock:
            now = self.clock()
            return [ServerActState(url, now - st.since if st.since is not None else 0.0, dict(st.counts),
                                   st.last_action) for url, st in self._state.items()]

    # -- recording ----------------------------------------------------------------------------------
    def _record(self, d: Decision) -> None:
        from ...redact import mask_text
        from ...timeline.notes import MAX_TEXT, WATCH_AUTHOR, append_note
        from ...timestamps import rfc3339
        from ...errors import TriageError

        self.decisions.append(d)
        with self._lock:
            counts = self._state.setdefault(d.url, _State()).counts
            counts[d.kind] = counts.get(d.kind, 0) + 1
        self.say(f"{rfc3339(d.time)} act {d.kind}: {d.text}")
        text = mask_text(NOTE_PREFIX + f"{d.kind}: {d.text}")
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT - 3] + "..."
        try:
            append_note(self.incident, text, author=WATCH_AUTHOR, now=d.time)
        except TriageError as exc:
            self.say(f"triage: warning: cannot write to the incident: {exc}")

    # -- the action -----------------------------------------------------------------------------------
    def _drained_restart(self, server: ServerView, found: list[Risk]) -> tuple[str, str]:
        from ...errors import TriageError

        try:
            pids, model, proof = prove_server(server.url)
        except TriageError as exc:
            return "refused", f"{server.url}: not restarted: {exc}"
        try:
            return self._run(server, found, pids, model, proof)
        except TriageError as exc:
            return "failed", f"{server.url}: the drained restart did not run: {exc}"

    def _run(self, server: ServerView, found: list[Risk], pids: list[int], model: str,
             proof: str) -> tuple[str, str]:
        from ...model import OomClass, Verdict
        from ...recovery.context import ExecOptions
        from ...recovery.plan import plan_json
        from ...recovery.runbooks import parse_runbook
        from ...recovery.session import execute, open_live_session

        verdict = Verdict(OomClass(found[0].oom_class), 1.0, f"triage watch --act: {_describe(found)}",
                          facts={"launch_args": {"model": model}}, runbook=RUNBOOK_ID)
        book = parse_runbook(RUNBOOK, "triage watch --act")
        session = open_live_session(self.incident, verdict, book, pids=pids, url=server.url)
        try:
            confirmed = [p.info.pid for p in session.prepared.identification.processes]
            if not set(pids) <= set(confirmed) or session.prepared.launch is None:
                why = "; ".join(f"pid {r.pid}: {r.reason}" for r in session.prepared.identification.refused) \
                    or "no command line to relaunch it with"
                return "refused", f"{server.url}: not restarted: recovery did not confirm pid(s) {pids} ({why})"
            argv = " ".join(session.prepared.launch.argv)
            if not self.policy.execute:
                name = _write_plan(session.held, plan_json(session.plan))
                return "planned", (f"{server.url}: dry run: would drain, stop pid(s) {', '.join(map(str, confirmed))} "
                                   f"({proof}) and relaunch `{argv}`; plan in {PLAN_DIR}/{name} (--execute to act)")
            options = ExecOptions(yes=True, force=True,       # it serves: acting before it fails is the point
                                  say=lambda line: self.say(f"  {line}"))
            report = execute(session, options, lock_path=self.policy.lock_path)
            steps = ", ".join(f"{s.step_id} {s.result}" for s in report.steps)
            if report.ok:
                return "restarted", (f"{server.url}: drained restart done ({steps}); run {report.run_id} in "
                                     f"actions.jsonl")
            return "failed", (f"{server.url}: drained restart {report.result} ({steps}); run {report.run_id} in "
                              "actions.jsonl")
        finally:
            session.close()


def _describe(found: list[Risk]) -> str:
    return "; ".join(f"{r.oom_class} ({r.level}): " + "; ".join(r.reasons) for r in found)


def _write_plan(held, doc: dict) -> str:
    from ...timestamps import rfc3339

    stamp = rfc3339(datetime.now().astimezone()).replace(":", "")
    sub = held.subdir(PLAN_DIR, create=True)
    try:
        for n in range(100):
            name = f"plan-{stamp}{'-' + str(n) if n else ''}.json"
            if not sub.exists(name):
                fd = sub.create_new(name)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(doc, fh, indent=2, ensure_ascii=False)
                    fh.write("\n")
                return name
        raise OSError("too many plans this second")
    finally:
        sub.close()


# -- which process is the server -------------------------------------------------------------------

def prove_server(url: str) -> tuple[list[int], str, str]:
    """The PIDs of the server at `url` on this host, its model, and the proof: the process that listens on the
    URL's port, whose command line is an engine's own entry point (on that port) serving the model
    /v1/models names. Anything less is refused (TriageError)."""
    from ...errors import TriageError
    from ...live.procs import read_proc
    from ...live.server import served_model
    from ...recovery.entrypoints import not_server_problem

    port = urlsplit(url).port or (443 if url.startswith("https") else 80)
    model = served_model(url, 5.0)
    if not model:
        raise TriageError(f"{url}/v1/models names no model: cannot tell the server's processes")
    listeners = listening_pids(port)
    if not listeners:
        raise TriageError(f"no process of this host visible to this user listens on port {port}")
    roots = []
    for pid in sorted(listeners):
        info = read_proc(pid)
        if info is None:
            continue
        problem = not_server_problem(info.cmdline, port)
        if problem is None and any(a == model or a.endswith("=" + model) for a in info.cmdline):
            roots.append(pid)
    if len(roots) != 1:
        raise TriageError(f"port {port} is held by pid(s) {sorted(listeners)}, of which {len(roots)} is an engine's "
                          f"own entry point serving {model}: need exactly one")
    return roots, model, f"pid {roots[0]} listens on port {port}, an engine's entry point serving {model} (/v1/models)"


def listening_pids(port: int) -> set[int]:
    """Processes holding a TCP socket that listens on `port` (any address), from /proc."""
    from ...live.procs import listening_sockets, pids_holding

    return pids_holding({inode for _local, p, inode in listening_sockets() if p == port})


def loopback_problem(url: str) -> str | None:
    from ...httpget import is_loopback

    host = urlsplit(url).hostname or ""
    return None if is_loopback(host) else f"{url}: {host} is not a loopback address"
