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
  or the server's very command line (a forked worker that outlived its parent).

The confirmed processes plus all their descendants are the server's process tree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable

from ..evidence.kinds import Kind
from ..model import EvidenceSet
from .procs import ProcInfo, all_procs, descendants, protected_pids, read_proc

# Log times have one-second resolution; a process may start in the same second it logs.
CLOCK_SLACK = timedelta(seconds=2)
VLLM_TITLES = ("VLLM::", "ray::")


@dataclass(frozen=True)
class Candidate:
    pid: int
    role: str                          # "APIServer", "EngineCore_DP0", "GPU process", "--pid", ...
    source: str                        # where the PID was named (source:line, "--pid", actions.jsonl:N)
    seen_at: datetime | None = None    # when that source saw it alive
    start_ticks: int | None = None     # exact start time, when this tool launched it


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
            out.append(Candidate(pid, role, rec.where, rec.time))
    return out


def identify(candidates: Iterable[Candidate], model: str | None,
             server_cmdlines: Iterable[tuple[str, ...]] = ()) -> Identification:
    """Confirm each candidate (see the module doc) and add the process trees of those confirmed."""
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
        problem = _start_problem(cand, info)
        if problem:
            result.refused.append(Refusal(cand.pid, cand.role, cand.source, problem))
            continue
        pending.append((cand, info))

    # Servers first (they run the model); children and orphans are confirmed against them.
    confirmed: dict[int, ServerProcess] = {}
    for cand, info in pending:
        if _runs_model(info, model) or (cand.start_ticks is not None and info.start_ticks == cand.start_ticks):
            how = "runs the incident's model" if _runs_model(info, model) else "launched by this tool (same start time)"
            confirmed[info.pid] = ServerProcess(info, cand.role, f"named in {cand.source}; {how}; "
                                                                 f"{_started(cand, info)}")
            cmdlines.add(info.cmdline)
    procs = all_procs()
    trees: dict[int, ServerProcess] = {}
    for root in list(confirmed.values()):
        for child in descendants(root.info, procs):
            if child.pid not in confirmed and child.pid not in protected:
                trees.setdefault(child.pid, ServerProcess(child, _role(child),
                                                          f"child of {root.role} {root.info.pid}"))
    for cand, info in pending:
        if info.pid in confirmed or info.pid in trees:
            continue
        why = _orphan_reason(info, cmdlines)
        if why:
            confirmed[info.pid] = ServerProcess(info, cand.role, f"named in {cand.source}; {why}; {_started(cand, info)}")
            for child in descendants(info, procs):
                if child.pid not in confirmed and child.pid not in protected:
                    trees.setdefault(child.pid, ServerProcess(child, _role(child), f"child of {cand.role} {info.pid}"))
        else:
            result.refused.append(Refusal(info.pid, cand.role, cand.source,
                                          f"its command line {info.command(80)!r} is not this server's "
                                          f"({'model ' + model if model else 'model unknown'}), and it is not "
                                          "a child of a confirmed server process"))
    result.processes = list(confirmed.values()) + [p for pid, p in trees.items() if pid not in confirmed]
    return result


def still_same(proc: ServerProcess) -> str | None:
    """None when the process is unchanged or gone; else why it drifted (re-checked before acting)."""
    now = read_proc(proc.info.pid)
    if now is None or proc.info.same_process(now):
        return None
    return (f"pid {proc.info.pid} ({proc.role}) now runs {now.command(80)!r} with another start time: "
            "the PID was reused")


def _dedupe(cands: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per PID: the earliest sighting (the strictest start-time check), explicit ones first."""
    best: dict[int, Candidate] = {}
    for c in cands:
        old = best.get(c.pid)
        if old is None or (old.seen_at and c.seen_at and c.seen_at < old.seen_at) or c.start_ticks is not None:
            best[c.pid] = c
    return list(best.values())


def _start_problem(cand: Candidate, info: ProcInfo) -> str | None:
    if cand.start_ticks is not None:
        if info.start_ticks != cand.start_ticks:
            return "its start time differs from the one recorded when it was launched: the PID was reused"
        return None
    started = info.start_utc
    if cand.seen_at is None or started is None:
        return None
    if started > cand.seen_at + CLOCK_SLACK:
        return (f"it started at {started:%Y-%m-%dT%H:%M:%SZ}, after {cand.source} saw that PID at "
                f"{cand.seen_at:%Y-%m-%dT%H:%M:%SZ}: the PID was reused by another program (or the log's "
                "time zone is wrong: set timezone in incident.yaml)")
    return None


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


def confirm_given(pid: int) -> Candidate:
    """A `--pid` from the operator: a candidate like any other (it must still run the model)."""
    return Candidate(pid, "--pid", "--pid")


__all__ = ["Candidate", "Identification", "Refusal", "ServerProcess", "candidates_from_evidence", "confirm_given",
           "identify", "still_same"]
