"""Every sample's postmortem chart, rendered to PNG and checked as a reader sees it (chartkit).
The drills' charts are checked where the drills run (tests/test_sim.py, test_recover_execute.py).

Set TRIAGE_CHART_DIR=DIR to keep the PNGs and look at them.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from triage.evidence.kinds import Kind
from triage.model import Evidence, EvidenceSet
from triage.postmortem import render_postmortem
from triage.postmortem.chart import Marker, build_chart

from .chartkit import check_chart

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
BUNDLES = sorted(p for p in SAMPLES.iterdir() if p.is_dir() and p.name != "models")


@pytest.mark.parametrize("bundle", BUNDLES, ids=[p.name for p in BUNDLES])
def test_every_sample_chart_reads_when_rendered(bundle, tmp_path):
    pm = render_postmortem(bundle, output=tmp_path / "postmortem.md")
    if pm.chart_svg is None:
        pytest.skip(f"{bundle.name}: no GPU memory or KV-cache readings, no chart")
    check_chart(pm.chart_svg, bundle.name)


def _stats(at: datetime, kv: float, line: int) -> Evidence:
    return Evidence(source="logs/vllm.log", line=line, time=at, kind=Kind.STATS, fields={"kv_usage": kv}, text="")


def test_an_incident_over_in_seconds_gets_second_ticks_and_spread_readings():
    t0 = datetime(2026, 3, 12, 14, 0, 0, tzinfo=timezone.utc)
    evidence = EvidenceSet([_stats(t0 + timedelta(seconds=s), kv, n) for n, (s, kv) in
                            enumerate([(0, 0.2), (1, 0.5), (2, 0.9), (3, 1.0)], 1)], [], [])
    chart = build_chart(evidence, [Marker(t0 + timedelta(seconds=3), "impact start"),
                                   Marker(t0 + timedelta(seconds=4), "detected")], "drill")
    assert chart.svg is not None
    assert "14:00:00" in chart.svg or "14:00:05" in chart.svg
    check_chart(chart.svg, "seconds")


def test_moments_seconds_apart_get_rows_of_their_own_above_the_data():
    t0 = datetime(2026, 3, 12, 14, 0, 0, tzinfo=timezone.utc)
    evidence = EvidenceSet([_stats(t0 + timedelta(minutes=m), 0.5 + m / 100, m + 1) for m in range(30)], [], [])
    moments = [Marker(t0 + timedelta(minutes=16, seconds=52), "impact start"),
               Marker(t0 + timedelta(minutes=17, seconds=5), "detected"),
               Marker(t0 + timedelta(minutes=19), "first response")]
    chart = build_chart(evidence, moments, "close moments")
    check_chart(chart.svg, "close-moments")
