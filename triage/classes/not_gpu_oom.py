"""Not a GPU OOM: host RAM kills, hardware faults, illegal accesses and NCCL failures.

**Signature**: kernel OOM killer / cgroup / Kubernetes OOMKilled (exit 137), a child process
killed by SIGKILL (-9), host RSS growth; Xid 48/63/64/74/79/92/94/95, ECC errors, a GPU fallen
off the bus; "an illegal memory access was encountered"; NCCL errors and watchdog timeouts —
with no GPU out-of-memory message.
**Not to be confused with**: a GPU OOM followed by teardown noise (Xid 43/45, peers' NCCL
timeouts): the GPU-or-not question keeps those on the GPU-OOM path.
**Recovery**: runbooks/host_oom.yaml, runbooks/gpu_fault.yaml

How each kind of record is named, and how sure that is, is data: triage/data/lookalikes.yaml.
A host OOM names what the kernel killed (process, PID, RSS from its `Killed process` line) and
its advice is for a person: what held the host RAM (vLLM's CPU swap space, CPU weight offload,
tokenizer pools, extra API-server processes) and the container's memory limit. No relaunch with
new GPU settings fixes it.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from ..evidence.kinds import Kind
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.gpu_or_not import GpuAnswer
from ..lazyre import lazy
from ..model import Cause, Evidence, OomClass, Recommendation, Verdict
from .base import Assessment, Branch, CauseSpec, ClassSpec
from .compiled import load
from .settings import as_float, as_whole

if TYPE_CHECKING:
    from ..flowchart.incident import Incident

GiB = 1 << 30
# The kernel's report of the process it killed (mm/oom_kill.c, __oom_kill_process):
#   "[Memory cgroup out of memory: ]Killed process 1234 (python3) total-vm:..kB, anon-rss:..kB, file-rss:..kB, shmem-rss:..kB"
_KILLED = lazy(r"Killed process (\d{1,10}) \(([^()\n]{1,64})\)")
_RSS = re.compile(r"\b(total-vm|anon-rss|file-rss|shmem-rss):(\d{1,15})kB")
# The summary line of newer kernels: "oom-kill:constraint=...,task=python3,pid=1234,uid=0"
_TASK = re.compile(r"\btask=([^,\s]{1,64}),pid=(\d{1,10})")
NAMED_KILLS = 3         # the summary names at most this many killed processes

CAUSES = (
    CauseSpec("host_oom", "host (CPU) memory exhausted"),
    CauseSpec("gpu_hardware_fault", "GPU hardware fault"),
    CauseSpec("gpu_app_fault", "GPU application fault (Xid)"),
    CauseSpec("illegal_memory_access", "illegal memory access"),
    CauseSpec("nccl_failure", "NCCL failure"),
    CauseSpec("cuda_fault", "a CUDA error that is not out of memory"),
    CauseSpec("process_crash", "the process crashed"),
    CauseSpec("other", "a failure that is not memory (a panic, a hang, a broken install)"),
)
SPEC = ClassSpec(id=OomClass.NOT_GPU_OOM, label="not a GPU OOM", short_label="not a GPU OOM", colour="blue",
                 branch=Branch.NOT_GPU, causes=CAUSES)
ATTACH_BELOW = conf.MEDIUM_HIGH     # a weaker look-alike verdict asks for the kernel log and the pod


class LookalikeDataError(ValueError):
    """lookalikes.yaml names a cause no spec lists, or an entry lacks its why."""


class Naming(NamedTuple):
    cause: str
    title: str
    confidence: float


class Lookalikes(NamedTuple):
    kinds: dict[str, Naming]
    exit_137: Naming
    xid_hardware: Naming
    xid_application: Naming
    pinned_host: Naming
    pinned_summary: str
    unlisted_confidence: float


def assess(ctx: Context, gpu: GpuAnswer) -> Assessment:
    if gpu.answer != "no":
        return Assessment(SPEC.id, conf.NONE, "", "a GPU OOM is in the evidence")
    table = lookalikes()
    if not ctx.not_gpu:   # a GPU-looking OOM that the walk showed to be host memory (pinned buffers)
        pinned = table.pinned_host
        return Assessment(SPEC.id, pinned.confidence, table.pinned_summary, gpu.why, list(gpu.evidence),
                          [Cause(pinned.cause, pinned.title, tuple(gpu.evidence))])
    causes: dict[str, Cause] = {}
    best = conf.NONE
    for rec in ctx.not_gpu:
        named = naming(rec)
        if named.cause not in causes:
            causes[named.cause] = Cause(named.cause, named.title, (rec,))
        best = max(best, named.confidence)
    ordered = sorted(causes.values(), key=lambda c: -naming(c.evidence[0]).confidence)
    if len(ordered) > 1:
        best = min(conf.CEILING, best + conf.NUDGE)
    summary = "Not a GPU OOM: " + ordered[0].title
    if ordered[0].id == "host_oom":
        summary += _killed_text(ctx.not_gpu)
    attach = []
    if best < ATTACH_BELOW:
        attach.append("dmesg / journalctl -k around the crash and `kubectl get pod -o json` (OOMKilled, exit code)")
    evidence = [e for c in ordered for e in c.evidence]
    return Assessment(SPEC.id, round(best, 2), summary, gpu.why, evidence, ordered, attach)


class Kill(NamedTuple):
    """One process the kernel OOM killer killed, as its own line states it."""

    pid: int
    process: str
    rss_bytes: int | None          # anon + file + shmem RSS at the kill
    anon_bytes: int | None
    cgroup: bool                   # killed for a memory cgroup's limit (a container), not the whole host
    rec: Evidence

    def describe(self) -> str:
        rss = f", RSS {self.rss_bytes / GiB:.1f} GiB" if self.rss_bytes is not None else ""
        anon = f" of which {self.anon_bytes / GiB:.1f} GiB anonymous" if self.anon_bytes is not None and rss else ""
        return f"{self.process} (PID {self.pid}{rss}{anon}, at {self.rec.where})"


def kernel_kills(records: list[Evidence]) -> list[Kill]:
    """The processes the kernel OOM killer reports killing, once each, in order."""
    out: dict[int, Kill] = {}
    for rec in records:
        if rec.kind != Kind.HOST_OOM_KILL.value:
            continue
        text = rec.text or ""
        m = _KILLED.search(text)
        if m is None:
            task = _TASK.search(text)
            if task is None or int(task.group(2)) in out:
                continue
            out[int(task.group(2))] = Kill(int(task.group(2)), task.group(1), None, None,
                                           "CONSTRAINT_MEMCG" in text, rec)
            continue
        kb = {k: int(v) * 1024 for k, v in _RSS.findall(text)}
        parts = [kb[k] for k in ("anon-rss", "file-rss", "shmem-rss") if k in kb]
        pid = int(m.group(1))
        prev = out.get(pid)
        if prev is not None and prev.rss_bytes is not None:
            continue
        cgroup = "Memory cgroup" in text or bool(rec.fields.get("cgroup")) or bool(prev and prev.cgroup)
        out[pid] = Kill(pid, m.group(2), sum(parts) if parts else None, kb.get("anon-rss"), cgroup, rec)
    return list(out.values())


def _killed_text(records: list[Evidence]) -> str:
    kills = kernel_kills(records)
    if not kills:
        return ""
    named = "; ".join(k.describe() for k in kills[:NAMED_KILLS])
    more = f" and {len(kills) - NAMED_KILLS} more" if len(kills) > NAMED_KILLS else ""
    where = " in its memory cgroup (the container's limit)" if any(k.cgroup for k in kills) else ""
    return f": {named}{more}{where}"


# --- advice ----------------------------------------------------------------------------------------
# Host memory is no GPU setting: each step is for a person (manual), from what the launch shows
# held host RAM, and the container's limit.

def recommend(incident: Incident, verdict: Verdict) -> list[Recommendation]:
    if not any(c.id == "host_oom" for c in verdict.causes):
        return []
    from ..flowchart.knowledge import in_range
    kills = kernel_kills(list(incident.ev.of(Kind.HOST_OOM_KILL)))
    pods = [r for r in incident.ev.of(Kind.OOM_KILLED) if r.fields.get("reason") == "OOMKilled"]
    seen = "; ".join(k.describe() for k in kills[:NAMED_KILLS])
    out: list[Recommendation] = []
    swap = as_float(incident.arg("swap_space"))
    # V1 never swaps KV blocks to host RAM (its preemption recomputes), so swap_space holds nothing
    # there; V0, gone from 0.11.0, pinned swap_space GiB per GPU at start-up.
    v1 = incident.engine_mode == "v1" or (incident.version is not None and in_range(incident.version, ">=0.11.0"))
    if swap and swap > 0 and incident.engine == "vllm" and not v1:
        out.append(_manual("swap_space", swap, 0, f"vLLM reserves swap_space={swap:g} GiB of host RAM per GPU for "
                           "preempted requests' KV cache; 0 gives it back (a preempted request is recomputed "
                           "instead)"))
    offload = as_float(incident.arg("cpu_offload_gb"))
    if offload and offload > 0:
        out.append(_manual("cpu_offload_gb", offload, 0, f"cpu_offload_gb={offload:g} keeps that many GiB of weights "
                           "per GPU in host RAM; lower it (the GPU budget must then hold those weights: check with "
                           "`triage plan`)"))
    pool = as_whole(incident.arg("tokenizer_pool_size"))
    if pool and pool > 0:
        out.append(_manual("tokenizer_pool_size", pool, 0, f"tokenizer_pool_size={pool} runs that many tokenizer "
                           "processes, each with its own copy of the tokenizer in host RAM"))
    servers = as_whole(incident.arg("api_server_count"))
    if servers and servers > 1:
        out.append(_manual("api_server_count", servers, 1, f"api_server_count={servers} runs that many API-server "
                           "processes, each with its own host memory (tokenizer, multimodal processor caches)"))
    workers = as_whole(incident.arg("tensor_parallel_size"))
    biggest = max((k.rss_bytes or 0 for k in kills), default=0)
    if kills and workers and workers > 1:
        held = f" (the largest killed process held {biggest / GiB:.1f} GiB)" if biggest else ""
        out.append(_manual("host_worker_processes", workers, None, f"tensor_parallel_size={workers} runs one worker "
                           f"process per GPU, each with its own host RSS{held}: budget host RAM for all of them, "
                           "or serve on fewer, larger GPUs"))
    limit_why = (f"the kernel OOM killer killed {seen}" if kills else
                 f"the container was OOMKilled ({pods[0].where})" if pods else "host RAM ran out")
    in_cgroup = bool(pods) or any(k.cgroup for k in kills)
    total = sum(k.rss_bytes or 0 for k in kills)
    need = f": at least the {total / GiB:.1f} GiB the killed processes held, plus headroom" if total else ""
    if in_cgroup:
        out.append(_manual("container_memory_limit", None, "raise", f"{limit_why}; it hit the container's memory "
                           f"limit: raise the pod's memory limit (and request){need}, or cut the host memory above"))
    else:
        out.append(_manual("host_memory", None, "free or add", f"{limit_why}; the host itself ran out: stop other "
                           f"memory-hungry processes on the node or move to a node with more RAM{need}"))
    return out


def _manual(setting: str, cur: Any, new: Any, why: str) -> Recommendation:
    return Recommendation(setting, cur, new, why, "incident", manual=True)


def naming(rec: Evidence) -> Naming:
    """The cause, title and confidence of one look-alike record."""
    table = lookalikes()
    if rec.kind == Kind.OOM_KILLED.value and rec.fields.get("reason") != "OOMKilled":
        return table.exit_137       # exit 137 is SIGKILL: the OOM killer most often, not always
    if rec.kind == Kind.XID.value:
        from ..flowchart.xids import is_hardware

        code = rec.fields.get("code")
        if is_hardware(code):
            named = table.xid_hardware
            return Naming(named.cause, named.title.format(code=code, detail=rec.fields.get("detail", "")[:60]),
                          named.confidence)
        return Naming(table.xid_application.cause, table.xid_application.title.format(code=code),
                      table.xid_application.confidence)
    return table.kinds.get(rec.kind) or Naming("other", rec.kind, table.unlisted_confidence)


@lru_cache(maxsize=1)
def lookalikes() -> Lookalikes:
    return parse_lookalikes(load("lookalikes"))


def parse_lookalikes(doc: Any) -> Lookalikes:
    known = set(SPEC.cause_ids)

    def entry(raw: Any, where: str) -> Naming:
        if not isinstance(raw, dict) or not raw.get("why") or raw.get("cause") not in known:
            raise LookalikeDataError(f"lookalikes.yaml: {where}: needs a cause of {sorted(known)}, a title and a why")
        return Naming(str(raw["cause"]), str(raw["title"]), float(raw["confidence"]))

    try:
        kinds = {kind: entry(raw, f"kinds.{kind}") for kind, raw in doc["kinds"].items()}
        return Lookalikes(kinds, entry(doc["exit_137"], "exit_137"), entry(doc["xid"]["hardware"], "xid.hardware"),
                          entry(doc["xid"]["application"], "xid.application"),
                          entry(doc["pinned_host"], "pinned_host"), str(doc["pinned_host"]["summary"]),
                          float(doc["unlisted_confidence"]))
    except (KeyError, TypeError) as exc:
        raise LookalikeDataError(f"lookalikes.yaml: missing or malformed {exc}") from None
