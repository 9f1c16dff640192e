"""No OOM: the evidence shows a server working normally and no failure of any kind.

**Signature**: start-up lines that complete (weights loaded, KV cache sized, graphs captured,
routes up) and/or serving lines (requests, stats), with no error — for every engine the signature
data knows (vLLM stats and offline progress, SGLang batch lines, TGI shards and requests, lmdeploy
and TensorRT-LLM sizing and stats, llama.cpp/Ollama loading and slots), busy or not: a KV cache at
95% with a queue that never failed is a busy server, not an incident.
**Not to be confused with**: an excerpt with nothing recognisable at all — that is `unknown`,
since the failure may simply not be in it.
"""
from __future__ import annotations

from ..evidence.kinds import HEALTHY_KINDS, Kind
from ..flowchart import confidence as conf
from ..flowchart.context import Context
from ..model import OomClass
from .base import Assessment, Branch, ClassSpec

SPEC = ClassSpec(id=OomClass.NO_OOM, label="no OOM found", short_label="healthy", colour="green",
                 branch=Branch.HEALTHY)
QUESTION = "Does the evidence show a working server?"
_HEALTHY = frozenset(k.value for k in HEALTHY_KINDS)


def assess(ctx: Context) -> Assessment:
    if ctx.any_failure:
        return Assessment(SPEC.id, conf.NONE, "", "a failure is in the evidence")
    healthy = [e for e in ctx.ev if e.kind in _HEALTHY]
    if not healthy:
        return Assessment(SPEC.id, conf.NONE, "", "nothing recognisable in the evidence")
    served = [e for e in healthy if e.kind in (Kind.REQUEST_SERVED.value, Kind.STATS.value)]
    complete = [e for e in healthy if e.kind == Kind.STARTUP_COMPLETE.value]
    if served:
        why, level = f"the server was serving ({len(served)} request/stats lines) and nothing failed", conf.VERY_HIGH
    elif complete:
        why, level = "start-up completed normally and nothing failed", conf.HIGH
    else:
        why, level = "start-up was progressing normally (no error in the excerpt)", conf.MEDIUM_HIGH
    key = (served or complete or healthy)
    return Assessment(SPEC.id, level, "No OOM: " + why, why, [key[0], key[-1]] if len(key) > 1 else key[:1])
