"""Which running processes are *this* server's: the only ones recovery may ever signal.

Nothing is chosen by a name pattern (`pkill -f vllm` kills the neighbour's server too). A
candidate PID comes from `--pid`, from the evidence (a vLLM log's `(APIServer pid=N)` prefixes,
nvidia-smi's process list) or from the audit log (a server this tool relaunched), and must then
be confirmed:

* it is alive and is not init, this process or one of its ancestors;
* it started no later than the evidence line that names it (else the PID was reused), or with
  exactly the start time recorded when this tool launched it;
* its command line is the server's: it runs the incident's model, or it is a descendant of a
  confirmed server process, or it carries vLLM's process title (`VLLM::EngineCore`, `VLLM::Worker`)
  or the server's very command line (a forked worker that outlived its parent);
* a PID read from a log (whose writer chose the numbers) also runs as the owner of that log file
  or of the incident directory, and a process that runs the model is confirmed only when its
  command line is an engine's own entry point (`entrypoints.py`) on the port the log served on.

A GPU process list (NVML now, nvidia-smi in the bundle) names every process on the host's GPUs,
the other servers' too — and a neighbour replica runs the same model and carries the same vLLM
titles. So a PID known *only* from such a list is confirmed only through this server: it is a
descendant of a confirmed server process, or it is in the session or process group of a process
this server's own log (or --pid, or a relaunch record) names — alive and confirmed, or gone and
the candidate is a vLLM process (an orphaned worker). Anything else is refused: give --pid.

The confirmed processes plus all their descendants are the server's process tree.

Only the failing server's own log names candidates: a bundle may hold the log of a healthy
replica on the same host (same model, same titles), and its PIDs are refused with that reason
(`scope_to_verdict`). A sighting dated after now (past a few minutes of clock skew) proves
nothing about when a process started: the log's zone is wrong, and it never passes the
started-before check.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterable

from ..evidence.kinds import GPU_OOM_KINDS, NOT_GPU_KINDS, Kind
from ..live.procs import ProcInfo, all_procs, descendants, protected_pids, read_proc
from ..model import EvidenceSet, Verdict
from ..timeref import future_warning, in_future
from .entrypoints import not_server_problem

# Log times have one-second resolution; a process may start in the same second it logs.
CLOCK_SLACK = timedelta(seconds=2)
VLLM_TITLES = ("VLLM::", "ray::")
# What a server's failure looks like in its own log: the records that place the failure in a file.
FAILURE_KINDS = GPU_OOM_KINDS | NOT_GPU_KINDS | frozenset({
    Kind.ENGINE_DEAD, Kind.ENGINE_START_FAILED, Kind.PROCESS_DIED, Kind.REQUEST_FAILED, Kind.CHILD_KILLED,
    Kind.TRACEBACK, Kind.EXCEPTION})
SERVER_LOG_KINDS = (Kind.SERVER_PROCESS, Kind.ENGINE_VERSION, Kind.LAUNCH_CONFIG, Kind.STARTUP_BEGIN,
                    Kind.STARTUP_COMPLETE, Kind.STATS, Kind.KV_CAPACITY, Kind.MEMORY_PROFILE)
_URL = re.compile(r"https?://[\w.\-\[\]:]+")


@dataclass(frozen=True)
class Candidate:
    pid: int
    role: str                          # "APIServer", "EngineCore_DP0", "GPU process", "--pid", ...
    source: str                        # where the PID was named (source:line, "--pid", actions.jsonl:N)
    seen_at: datetime | None = None    # when that source saw it alive
    start_ticks: int | None = None     # exact start time, when this tool launched it
    weak: bool = False                 # from a GPU process list: it may be any server's on this host
    from_log: bool = False             # named by a log: its writer chose the number
    owners: frozenset[int] | None = None   # the uids that log may name (None: any, or not from a log)


@dataclass(frozen=True)
class ServerProcess:
    info: ProcInfo
    role: str
    why: str                           # how it was confirmed, for the plan and the audit log


@dataclass(frozen=True)
class Refusal:
    pid: int
    role: str
    source: str
    reason: str


@dataclass
class Identification:
    processes: list[ServerProcess] = field(default_factory=list)   # roots first, then their trees
    refused: list[Refusal] = field(default_factory=list)
    gone: list[Candidate] = field(default_factory=list)             # named, but no longer running

    @property
    def pids(self) -> list[int]:
        return [p.info.pid for p in self.processes]

    def refuse(self, refusals: Iterable[Refusal]) -> None:
        """Add refusals decided before identification, for PIDs not confirmed (or refused) here."""
        known = set(self.pids) | {r.pid for r in self.refused}
        self.refused += [r for r in refusals if r.pid not in known]

    def lines(self) -> list[str]:
        out = [f"{p.info.pid} {p.role}: {p.why}; command {p.info.command(100)!r}" for p in self.processes]
        out += [f"{r.pid} {r.role} ({r.source}) REFUSED: {r.reason}" for r in self.refused]
        if self.gone:
            out.append("already exited: " + ", ".join(f"{c.pid} ({c.role}, {c.source})" for c in self.gone))
        return out


def candidates_from_evidence(evidence: EvidenceSet) -> list[Candidate]:
    out: list[Candidate] = []
    for rec in evidence.of(Kind.SERVER_PROCESS, Kind.GPU_PROCESS):
        pid = rec.fields.get("pid")
        if isinstance(pid, int) and pid > 0:
            role = str(rec.fields.get("role") or rec.fields.get("name") or rec.fields.get("process_name")
                       or "GPU process")
            weak = rec.kind == Kind.GPU_PROCESS
            out.append(Candidate(pid, role, rec.where, rec.time, weak=weak, from_log=not weak))
    return out


def server_url(evidence: EvidenceSet) -> str | None:
    """The server's base URL as its own start-up line printed it (0.0.0.0 means loopback here)."""
    for rec in reversed(evidence.of(Kind.STARTUP_COMPLETE)):
        m = _URL.search(rec.text)
        if m:
            return m.group(0).replace("0.0.0.0", "127.0.0.1")
    return None


def cited_files(verdict: Verdict) -> set[str]:
    """The files that hold the failure the verdict cites (an OOM, an engine death...)."""
    cited = list(verdict.evidence) + [e for cause in verdict.causes for e in cause.evidence]
    return {e.source for e in cited if e.kind in FAILURE_KINDS}


def scope_to_verdict(candidates: list[Candidate], verdict: Verdict, evidence: EvidenceSet,
                     notes: list[str]) -> tuple[list[Candidate], list[Refusal]]:
    """(candidates of the failing server's own log, refusals for the PIDs other logs name).

    A GPU process list (weak candidates) is kept: it is linked to the server later or refused.
    When the failure the verdict cites is in no server log (dmesg, pod status, a scrape), a bundle
    whose PIDs all come from one log keeps them: there is no other server's log to mix up."""
    named = [c for c in candidates if not c.weak]
    files = {source_file(c) for c in named}
    failing = cited_files(verdict)
    if failing & files:
        cited = failing & files
    elif failing & _server_logs(evidence):
        cited = set()                  # the failing server's log names no PID: the others are other servers'
    else:
        cited = files if len(files) <= 1 else set()
    keep = [c for c in candidates if c.weak or source_file(c) in cited]
    kept = {c.pid for c in keep if not c.weak}
    refused: dict[int, Refusal] = {}
    for cand in named:
        if cand.pid in kept or cand.pid in refused or read_proc(cand.pid) is None:
            continue                   # named by the failing log too, refused already, or gone
        where = ", ".join(sorted({source_file(c) for c in named if c.pid == cand.pid}))
        why = (f"seen only in {where}, which the verdict does not cite" if failing & (files | _server_logs(evidence))
               else f"seen only in {where}; the verdict cites none of the {len(files)} logs that name PIDs")
        refused[cand.pid] = Refusal(cand.pid, cand.role, cand.source,
                                    f"{why}: it may be another server on this host; give --pid if it is this one")
    _note_future(named, notes)
    return keep, list(refused.values())


def _server_logs(evidence: EvidenceSet) -> set[str]:
    """Files a server wrote (its version, arguments, start-up or serving lines): not dmesg or a pod."""
    return {e.source for e in evidence.of(*SERVER_LOG_KINDS)}


def source_file(cand: Candidate) -> str:
    """The file a candidate was read from (`logs/vllm.log` of `logs/vllm.log:12`)."""
    return cand.source.rsplit(":", 1)[0] if cand.source.rsplit(":", 1)[-1].isdigit() else cand.source


def _note_future(cands: list[Candidate], notes: list[str]) -> None:
    """One plan note per file whose sightings lie ahead of now: its time zone is probably wrong."""
    now = datetime.now(timezone.utc)
    ahead: dict[str, datetime] = {}
    for c in cands:
        if c.seen_at is not None and in_future(c.seen_at, now):
            ahead[source_file(c)] = max(c.seen_at, ahead.get(source_file(c), c.seen_at))
    for name, latest in sorted(ahead.items()):
        notes.append(future_warning(name, latest, now=now) + " Its sightings confirm no process: give --pid")


def identify(candidates: Iterable[Candidate], model: str | None,
             server_cmdlines: Iterable[tuple[str, ...]] = (), port: int | None = None) -> Identification:
    """Confirm each candidate (see the module doc) and add the process trees of those confirmed.
    `port`: where the failing server's log says it served (a log PID must be a server on it)."""
    result = Identification()
    protected = protected_pids()
    cmdlines = {tuple(c) for c in server_cmdlines if c}
    pending: list[tuple[Candidate, ProcInfo]] = []
    seen: set[int] = set()
    for cand in _dedupe(candidates):
        if cand.pid in seen:
            continue
        seen.add(cand.pid)
        info = read_proc(cand.pid)
        if info is None:
            result.gone.append(cand)
            continue
        if cand.pid in protected:
            result.refused.append(Refusal(cand.pid, cand.role, cand.source,
                                          "it is init, this process or one of its parents"))
            continue
        problem = _start_problem(cand, info) or _owner_problem(cand, info)
        if problem:
            result.refused.append(Refusal(cand.pid, cand.role, cand.source, problem))
            continue
        pending.append((cand, info))

    # Servers first (they run the model); children and orphans are confirmed against them.
    confirmed: dict[int, ServerProcess] = {}
    for cand, info in pending:
        if cand.weak:
            continue
        if cand.from_log and _runs_model(info, model):
            not_server = not_server_problem(info.cmdline, port)
            if not_server:
                result.refused.append(Refusal(info.pid, cand.role, cand.source, f"{not_server}: a log can name any "
                                              "PID, so only a server's own command line confirms it; give --pid "
                                              "if it is this one"))
                continue
        if _runs_model(info, model) or (cand.start_ticks is not None and info.start_ticks == cand.start_ticks):
            how = "runs the incident's model" if _runs_model(info, model) else "launched by this tool (same start time)"
            confirmed[info.pid] = ServerProcess(info, cand.role, f"named in {cand.source}; {how}; "
                                                                 f"{_started(cand, info)}")
            cmdlines.add(info.cmdline)
    procs = all_procs()
    trees: dict[int, ServerProcess] = {}

    def add_tree(root: ProcInfo, label: str) -> None:
        for child in descendants(root, procs):
            if child.pid not in confirmed and child.pid not in protected:
                trees.setdefault(child.pid, ServerProcess(child, _role(child), f"child of {label}"))

    for root in list(confirmed.values()):
        add_tree(root.info, f"{root.role} {root.info.pid}")
    refused_now = {r.pid for r in result.refused}
    for cand, info in pending:
        if info.pid in confirmed or info.pid in trees or cand.weak or info.pid in refused_now:
            continue
        why = _orphan_reason(info, cmdlines)
        if why:
            confirmed[info.pid] = ServerProcess(info, cand.role, f"named in {cand.source}; {why}; {_started(cand, info)}")
            add_tree(info, f"{cand.role} {info.pid}")
        else:
            result.refused.append(Refusal(info.pid, cand.role, cand.source,
                                          f"its command line {info.command(80)!r} is not this server's "
                                          f"({'model ' + model if model else 'model unknown'}), and it is not "
                                          "a child of a confirmed server process"))
    # PIDs only a GPU process list names: confirmed only through a link to this server.
    named_gone = {c.pid: c for c in result.gone if not c.weak}
    for cand, info in pending:
        if not cand.weak or info.pid in confirmed or info.pid in trees:
            continue
        why = _linked(info, set(confirmed), named_gone, model, cmdlines)
        if why:
            confirmed[info.pid] = ServerProcess(info, _role(info) if cand.role == "GPU process" else cand.role,
                                                f"listed in {cand.source}; {why}; {_started(cand, info)}")
            add_tree(info, str(info.pid))
        else:
            result.refused.append(Refusal(info.pid, cand.role, cand.source,
                                          f"{info.command(80)!r} is on the GPU, but nothing links it to this "
                                          "server (not a child of its processes, not in their session or process "
                                          "group): it may be another server on this host; give --pid if it is "
                                          "this one's"))
    result.processes = list(confirmed.values()) + [p for pid, p in trees.items() if pid not in confirmed]
    return result


def _linked(info: ProcInfo, confirmed: set[int], named_gone: dict[int, Candidate], model: str | None,
            cmdlines: set[tuple[str, ...]]) -> str | None:
    """Why a process seen only on the GPU belongs to this server, or None.

    A session or process group outlives its leader, and Linux does not hand out a PID while a
    session or group still carries it: a process in the session of a PID this server's log named
    was started from that very process (or from its children)."""
    for kind, leader in (("session", info.sid), ("process group", info.pgid)):
        if leader and leader != info.pid and leader in confirmed:
            return f"in the {kind} of confirmed server process {leader}"
    for kind, leader in (("session", info.sid), ("process group", info.pgid)):
        if leader and leader != info.pid and leader in named_gone and not _owner_problem(named_gone[leader], info):
            vllm = "runs the incident's model" if _runs_model(info, model) else _orphan_reason(info, cmdlines)
            if vllm:
                return f"in the {kind} of {leader}, a server process the log names (exited); {vllm}"
    return None


def still_same(proc: ServerProcess) -> str | None:
    """None when the process is unchanged or gone; else why it drifted (re-checked before acting)."""
    now = read_proc(proc.info.pid)
    if now is None or proc.info.same_process(now) or proc.info.exiting(now):
        return None
    return (f"pid {proc.info.pid} ({proc.role}) now runs {now.command(80)!r} with another start time: "
            "the PID was reused")


def _dedupe(cands: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per PID: the earliest sighting (the strictest start-time check), explicit ones first."""
    best: dict[int, Candidate] = {}
    for c in cands:
        old = best.get(c.pid)
        if old is None or (old.weak and not c.weak):
            best[c.pid] = c
        elif c.weak and not old.weak:
            continue                   # a GPU list never overrides what the server's own log says
        elif (old.seen_at and c.seen_at and c.seen_at < old.seen_at) or c.start_ticks is not None:
            best[c.pid] = c
    return list(best.values())


def _start_problem(cand: Candidate, info: ProcInfo) -> str | None:
    if cand.start_ticks is not None:
        if info.start_ticks != cand.start_ticks:
            return "its start time differs from the one recorded when it was launched: the PID was reused"
        return None
    if cand.seen_at is not None and in_future(cand.seen_at):
        # Any process started before a time that has not come yet: such a sighting proves nothing.
        return (f"{cand.source} dates it {cand.seen_at:%Y-%m-%dT%H:%M:%SZ}, which is in the future: log times lie "
                "in the future (is incident.yaml's timezone right?), so nothing shows it is the process the log saw")
    started = info.start_utc
    if cand.seen_at is None or started is None:
        return None
    if started > cand.seen_at + CLOCK_SLACK:
        return (f"it started at {started:%Y-%m-%dT%H:%M:%SZ}, after {cand.source} saw that PID at "
                f"{cand.seen_at:%Y-%m-%dT%H:%M:%SZ}: the PID was reused by another program (or the log's "
                "time zone is wrong: set timezone in incident.yaml)")
    return None


def _owner_problem(cand: Candidate, info: ProcInfo) -> str | None:
    """A log is written by its server's user (or collected into its owner's directory): whoever can
    write it can print any PID there, so it may only name processes of those users (a log only
    root could have written names any: `prepare.with_log_owners`)."""
    if cand.owners is None or info.uid in cand.owners:
        return None
    owners = ", ".join(f"uid {u}" for u in sorted(cand.owners))
    return (f"it runs as uid {info.uid}, and {source_file(cand)} (or the incident directory holding it) belongs to "
            f"{owners}: a log may only name its owner's processes; give --pid if it is this one")


def _runs_model(info: ProcInfo, model: str | None) -> bool:
    if not model:
        return False
    return any(arg == model or arg.endswith("=" + model) for arg in info.cmdline)


def _orphan_reason(info: ProcInfo, cmdlines: set[tuple[str, ...]]) -> str | None:
    if info.cmdline in cmdlines:
        return "same command line as the server (a forked worker)"
    title = info.cmdline[0] if info.cmdline else ""
    if title.startswith(VLLM_TITLES) or info.comm.startswith(VLLM_TITLES):
        return f"carries vLLM's process title {info.comm!r}"
    return None


def _role(info: ProcInfo) -> str:
    title = info.cmdline[0] if info.cmdline and info.cmdline[0].startswith(VLLM_TITLES) else info.comm
    return title or "child"


def _started(cand: Candidate, info: ProcInfo) -> str:
    started = info.start_utc
    when = f"started {started:%Y-%m-%dT%H:%M:%SZ}" if started else "start time unknown"
    if cand.seen_at and started:
        return f"{when}, before {cand.seen_at:%H:%M:%SZ} when the log saw it"
    return when


__all__ = ["Candidate", "FAILURE_KINDS", "Identification", "Refusal", "ServerProcess", "candidates_from_evidence",
           "cited_files", "identify", "scope_to_verdict", "server_url", "source_file", "still_same"]
