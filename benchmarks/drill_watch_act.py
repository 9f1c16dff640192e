#!/usr/bin/env python3
"""`triage watch --act` drills in simulated time: how early a leak is restarted, and whether a long
busy healthy run ever triggers an action.

    python benchmarks/drill_watch_act.py [--rates 0.1,0.5,2,8] [--healthy-hours 168] [--json]

For each leak rate (GiB/h, flat load, the simulator's 80 GiB card at gpu_memory_utilization 0.90)
twice: with the budget on /metrics (memory outside it is the first precursor) and without it (only
the leak trend can see it). Each row: when the card would be full, when the restart came, the lead
time and the precursor that triggered it. Then the healthy run: a daily load cycle with the KV
cache saturated at every peak, memory flat; its actions must be none. The watch's own Watcher
(trend, load, risk) and Actor (hold 120 s, rate limit, leak horizon 24 h) run on a simulated clock
(triage/sim/watch_drill.py). Exit 0 when every leak was restarted before the card filled, except
those faster than the leak rule's one-hour evidence span with no budget to compare against, and
the healthy run acted never; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triage.sim import watch_drill  # noqa: E402
from triage.thresholds import LEAK_MIN_SPAN_S  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="0.1,0.5,2,8", help="leak rates, GiB per hour")
    ap.add_argument("--healthy-hours", type=float, default=168.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows, ok = [], True
    started = time.perf_counter()
    for rate in (float(r) for r in args.rates.split(",")):
        for known in (True, False):
            run = watch_drill.leak(rate, budget_known=known)
            fills_h = run.oom_at_s / 3600
            row = {"leak_gib_per_h": rate, "budget_on_metrics": known, "card_full_h": round(fills_h, 2),
                   "restart_h": round(run.first_action_s / 3600, 2) if run.first_action_s is not None else None,
                   "lead_h": round(run.lead_s / 3600, 2) if run.lead_s is not None else None,
                   "precursor": run.actions[0][2] if run.actions else None}
            rows.append(row)
            excused = not known and run.oom_at_s < LEAK_MIN_SPAN_S      # fills before the rule's evidence span
            if (run.lead_s is None or run.lead_s <= 0) and not excused:
                ok = False
    healthy = watch_drill.healthy(args.healthy_hours)
    ok = ok and not healthy.actions
    doc = {"leaks": rows, "healthy": {"hours": args.healthy_hours, "readings": healthy.readings,
                                      "burst_risk_readings": healthy.risks["burst"],
                                      "precursors": len(healthy.precursors), "actions": len(healthy.actions)},
           "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{'leak GiB/h':>10} {'budget':>7} {'card full':>10} {'restart':>8} {'lead':>7}  precursor")
        for r in rows:
            restart = f"{r['restart_h']:.2f} h" if r["restart_h"] is not None else "none"
            lead = f"{r['lead_h']:.2f} h" if r["lead_h"] is not None else "-"
            print(f"{r['leak_gib_per_h']:>10g} {'known' if r['budget_on_metrics'] else 'unknown':>7} "
                  f"{r['card_full_h']:>8.2f} h {restart:>8} {lead:>7}  {r['precursor'] or '(missed)'}")
        h = doc["healthy"]
        print(f"healthy, busy: {h['hours']:g} h, {h['readings']} readings, burst risk in {h['burst_risk_readings']}, "
              f"precursors {h['precursors']}, actions {h['actions']}  ({doc['seconds']} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
