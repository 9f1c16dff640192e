"""Not a GPU OOM: host RAM kills, hardware faults, illegal accesses and NCCL failures.

**Signature**: kernel OOM killer / cgroup / Kubernetes OOMKilled (exit 137), a child process
killed by SIGKILL (-9), host RSS growth; Xid 48/63/64/74/79/92/94/95, ECC errors, a GPU fallen
off the bus; "an illegal memory access was encountered"; NCCL errors and watchdog timeouts —
with no GPU out-of-memory message.
**Not to be confused with**: a GPU OOM followed by teardown noise (Xid 43/45, peers' NCCL
timeouts): the GPU-or-not question keeps those on the GPU-OOM path.
**Recovery**: runbooks/host_oom.yaml, runbooks/gpu_fault.yaml

How each kind of record is named, and how sure that is, is data: triage/data/lookalikes.yaml.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from ..evidence.kinds import Kind
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..flowchart.gpu_or_not import GpuAnswer
from ..model import Cause, Evidence, OomClass
from .base import Assessment, Branch, CauseSpec, ClassSpec
from .compiled import load

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
    attach = []
    if best < ATTACH_BELOW:
        attach.append("dmesg / journalctl -k around the crash and `kubectl get pod -o json` (OOMKilled, exit code)")
    evidence = [e for c in ordered for e in c.evidence]
    return Assessment(SPEC.id, round(best, 2), summary, gpu.why, evidence, ordered, attach)


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
