"""The concurrency cap sized from what the KV cache really carried (burst and prefix-cache advice)."""
from __future__ import annotations

import math
from typing import Sequence

from ..model import Evidence, Recommendation
from ..thresholds import KV_BUSY

RULE_OF_THUMB_CUT = 0.75     # a quarter below the concurrency that failed, when the cache was not the limit


def kv_sized_cap(stats: Sequence[Evidence], cur: int | None, min_running: int = 1, kv_only: bool = False,
                 window: int | None = 6) -> Recommendation | None:
    """max_num_seqs from the concurrency the KV cache really carried: the busiest of the last
    `window` stats readings (None: of all before the failure), scaled so KV usage stays under
    KV_BUSY (the level the classifier already calls the cache the bottleneck). Without a KV reading
    (or one below KV_BUSY: the cache was not the limit), a quarter below the concurrency that
    failed, labelled a rule of thumb (`kv_only`: none)."""
    readings = [s for s in stats if s.fields.get("running")]
    if not readings:
        return None
    last = readings[-1]
    readings = readings[-window:] if window else readings
    # the busiest reading; of equally busy ones the fullest cache (the smaller, safer cap)
    peak = max(readings, key=lambda s: (s.fields["running"], s.fields.get("kv_usage") or 0))
    running, kv = int(peak.fields["running"]), peak.fields.get("kv_usage")
    if running < min_running:
        return None
    if kv is not None and kv >= KV_BUSY:
        new = math.floor(running * KV_BUSY / kv)
        then = ""
        if window is None and last is not peak:
            then = (f", the busiest it was before the failure (at the end {int(last.fields['running'])} ran at "
                    f"{(last.fields.get('kv_usage') or 0):.1%}: cached prefixes held the rest)")
        why, basis = (f"{running} running at {kv:.1%} KV-cache usage ({peak.where}){then}; {new} keeps KV usage "
                      f"under {KV_BUSY:.0%} ({running} x {KV_BUSY:.2f}/{kv:.3f}); rate-limit per pod at the gateway "
                      "to match"), "incident"
    elif kv_only:
        return None
    else:
        new = int(running * RULE_OF_THUMB_CUT)
        seen = "no KV-cache usage in the stats" if kv is None else f"KV-cache usage only {kv:.0%}: the cache was not " \
                                                                    "the limit"
        why, basis = (f"{running} running when it failed ({peak.where}), {seen}; cap a quarter below that (rule of "
                      "thumb) and rate-limit per pod at the gateway"), "rule_of_thumb"
    if new < 1 or new >= running or (cur is not None and new >= cur):
        return None
    return Recommendation("max_num_seqs", cur, new, why, basis)
