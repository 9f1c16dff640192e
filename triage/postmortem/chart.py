"""GPU memory and KV-cache usage over the incident, as a small hand-written SVG line chart.

Why SVG by hand and not a plotting library: the chart is one panel of percentages over time;
a few hundred lines of markup do it, render in any Markdown viewer, and come out byte-identical
on every run (a golden file can hold them), with no font cache, backend or extra dependency.

Series come from the Evidence records the parsers already produced:
  GPU memory  `gpu_memory` readings (nvidia-smi, NVML, DCGM framebuffer): used / total, the
              fullest GPU of a node at each reading; `torch_oom` messages as crosses
              (capacity - free) / capacity at the moment of the failure
  KV cache    vLLM stats lines (`kv_usage`) and /metrics scrapes (`kv_cache_usage`)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape
from typing import Iterable, Sequence

from ..evidence.kinds import Kind
from ..model import Evidence, EvidenceSet

WIDTH = 820
LEFT, RIGHT, TOP, PLOT_H = 56, 20, 44, 250
MAX_POINTS = 240                      # per series: enough for the shape, small enough to diff
# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")


@dataclass(frozen=True)
class Point:
    time: datetime
    value: float                      # percent, 0-100
    where: str                        # source:line


@dataclass
class Series:
    label: str
    kind: str                         # "gpu_memory" | "kv_cache" | "oom"
    points: list[Point] = field(default_factory=list)
    node: str | None = None

    @property
    def peak(self) -> Point:
        return max(self.points, key=lambda p: (p.value, -p.time.timestamp()))

    @property
    def first(self) -> Point:
        return self.points[0]

    @property
    def last(self) -> Point:
        return self.points[-1]


@dataclass(frozen=True)
class Marker:
    time: datetime
    label: str


@dataclass
class Chart:
    series: list[Series]
    markers: list[Marker]
    svg: str | None                   # None when there is nothing to draw
    note: str                         # what the chart shows, or why there is none


def node_of(rec: Evidence) -> str | None:
    """The node a record belongs to, named exactly as the timeline names it."""
    from ..timeline.from_evidence import node_of as timeline_node

    return timeline_node(rec)


def collect_series(evidence: EvidenceSet) -> list[Series]:
    gpu: dict[str, dict[datetime, Point]] = {}
    kv: dict[str, list[Point]] = {}
    nodes: dict[str, str | None] = {}
    ooms: list[Point] = []
    for rec in evidence:
        if rec.time is None:
            continue
        f = rec.fields
        if rec.kind == Kind.GPU_MEMORY and f.get("used_bytes") and f.get("total_bytes"):
            label = f"GPU memory{_on(rec)} ({'DCGM' if f.get('source') == 'dcgm' else 'nvidia-smi'})"
            at = rec.time.replace(microsecond=0)     # one reading of a node's GPUs = one instant
            value = 100.0 * f["used_bytes"] / f["total_bytes"]
            nodes[label] = node_of(rec)
            held = gpu.setdefault(label, {}).get(at)
            if held is None or value > held.value:  # the fullest GPU is the one that fails
                gpu[label][at] = Point(at, value, rec.where)
        elif rec.kind == Kind.STATS and isinstance(f.get("kv_usage"), (int, float)):
            kv.setdefault(f"KV cache{_on(rec)} (vLLM stats)", []).append(
                Point(rec.time, 100.0 * f["kv_usage"], rec.where))
        elif rec.kind == Kind.METRIC and f.get("name") == "kv_cache_usage" and isinstance(f.get("value"), (int, float)):
            kv.setdefault("KV cache (/metrics scrape)", []).append(Point(rec.time, 100.0 * f["value"], rec.where))
        elif rec.kind == Kind.TORCH_OOM and f.get("capacity_bytes") and f.get("free_bytes") is not None:
            ooms.append(Point(rec.time, 100.0 * (f["capacity_bytes"] - f["free_bytes"]) / f["capacity_bytes"],
                              rec.where))
    out = [Series(label, "gpu_memory", sorted(pts.values(), key=lambda p: p.time), nodes[label])
           for label, pts in sorted(gpu.items())]
    out += [Series(label, "kv_cache", sorted(pts, key=lambda p: p.time)) for label, pts in sorted(kv.items())]
    if ooms:
        out.append(Series("GPU memory at each OOM (PyTorch message)", "oom", _dedupe(ooms)))
    for s in out:
        s.points = _thin(s.points)
    return out


def _on(rec: Evidence) -> str:
    node = node_of(rec)
    return f", {node}" if node else ""


def build_chart(evidence: EvidenceSet, markers: Sequence[Marker] = (), title: str = "",
                budget: float | None = None) -> Chart:
    """`budget`: the engine's gpu_memory_utilization, drawn as a line on the GPU-memory panel."""
    series = [s for s in collect_series(evidence) if s.points]
    if not series:
        return Chart([], list(markers), None,
                     "no GPU memory or KV-cache readings in the evidence (attach nvidia-smi readings, "
                     "/metrics scrapes or the vLLM log with its stats lines)")
    times = [p.time for s in series for p in s.points] + [m.time for m in markers]
    start, end = min(times), max(times)
    if end <= start:
        end = start + timedelta(minutes=1)
    panels = _panels(series, budget)
    svg = _svg(panels, list(markers), start, end, title)
    what = " and ".join(p.title.split(" (")[0] for p in panels)
    return Chart(series, list(markers), svg, f"{what}, {_hm(start)} to {_hm(end)} UTC")


@dataclass
class _Panel:
    title: str
    series: list[tuple[int, Series]]          # (colour index, series)
    low: float
    high: float = 100.0
    lines: list[tuple[float, str]] = field(default_factory=list)   # horizontal reference lines


def _panels(series: list[Series], budget: float | None) -> list[_Panel]:
    """GPU memory on its own scale (it lives at 90-100% under vLLM, where the story is), KV 0-100%."""
    indexed = list(enumerate(series))
    gpu = [(i, s) for i, s in indexed if s.kind in ("gpu_memory", "oom")]
    kv = [(i, s) for i, s in indexed if s.kind == "kv_cache"]
    out = []
    if gpu:
        lows = [p.value for _, s in gpu for p in s.points] + ([100 * budget] if budget else [])
        low = max(0.0, min(90.0, 10 * ((min(lows) - 2) // 10)))
        lines = [(100 * budget, f"engine budget {100 * budget:g}%")] if budget else []
        out.append(_Panel("GPU memory used (% of the card)", gpu, low, lines=lines))
    if kv:
        out.append(_Panel("KV-cache usage (% of the engine's KV cache)", kv, 0.0))
    return out


# -- drawing ----------------------------------------------------------------------------------

def _svg(panels: list[_Panel], markers: list[Marker], start: datetime, end: datetime, title: str) -> str:
    span = (end - start).total_seconds()
    plot_w = WIDTH - LEFT - RIGHT
    panel_h, gap = (PLOT_H if len(panels) == 1 else 150), 40
    axis_y = TOP + len(panels) * panel_h + (len(panels) - 1) * gap
    n_series = sum(len(p.series) for p in panels)
    height = axis_y + 54 + 18 * ((n_series + 1) // 2)

    def x(t: datetime) -> float:
        return LEFT + plot_w * (t - start).total_seconds() / span

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           f"<title>{escape(title or 'GPU memory and KV-cache usage')}</title>",
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>']
    legend: list[tuple[int, Series]] = []
    for n, panel in enumerate(panels):
        top = TOP + n * (panel_h + gap)
        grid, lines = _panel(panel, top, panel_h, x, plot_w)
        out += grid
        for t in _ticks(start, end):
            out.append(f'<line x1="{x(t):.1f}" y1="{top + panel_h}" x2="{x(t):.1f}" y2="{top + panel_h + 4}" '
                       'stroke="#000"/>')
            out.append(f'<text x="{x(t):.1f}" y="{top + panel_h + 16}" text-anchor="middle">'
                       f'{_tick_label(t, start, end)}</text>')
        for i, m in enumerate(markers):                 # impact start, detected, mitigated, resolved
            mx = x(m.time)
            out.append(f'<line x1="{mx:.1f}" y1="{top}" x2="{mx:.1f}" y2="{top + panel_h}" stroke="#777" '
                       'stroke-dasharray="2,3"/>')
            if n == 0:                                 # one row per marker; right-aligned near the right edge
                right = mx > LEFT + 0.7 * plot_w
                anchor = ' text-anchor="end"' if right else ""
                out.append(f'<text x="{mx - 3 if right else mx + 3:.1f}" y="{top + 10 + 11 * (i % 5)}" fill="#444" '
                           f'stroke="#fff" stroke-width="3" paint-order="stroke"{anchor}>{escape(m.label)}</text>')
        out += lines                                   # the data above the marker labels
        legend += panel.series
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{axis_y + 32}" text-anchor="middle">time (UTC)</text>')
    for k, (i, s) in enumerate(legend):
        colour = PALETTE[i % len(PALETTE)]
        lx, ly = LEFT + (k % 2) * (plot_w / 2), axis_y + 54 + 18 * (k // 2)
        if s.kind == "oom":
            out.append(_cross(lx + 9, ly - 4, colour))
        else:
            out.append(f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 18:.1f}" y2="{ly - 4}" stroke="{colour}" '
                       f'stroke-width="2"{_dash(s)}/>')
        out.append(f'<text x="{lx + 24:.1f}" y="{ly}">{escape(s.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _panel(panel: _Panel, top: float, height: float, x, plot_w: float) -> tuple[list[str], list[str]]:
    """(grid, axes and reference lines; the series), drawn apart so marker labels sit between."""
    def y(v: float) -> float:
        return top + height * (1 - (max(panel.low, min(panel.high, v)) - panel.low) / (panel.high - panel.low))

    out = [f'<text x="{LEFT}" y="{top - 6}" font-weight="bold">{escape(panel.title)}</text>']
    step = 5 if panel.high - panel.low <= 25 else 10 if panel.high - panel.low <= 50 else 20
    v = panel.low
    while v <= panel.high + 1e-9:
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + plot_w}" y2="{y(v):.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}%</text>')
        v += step
    for value, label in panel.lines:
        out.append(f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{LEFT + plot_w}" y2="{y(value):.1f}" '
                   'stroke="#b00" stroke-dasharray="6,3"/>')
        out.append(f'<text x="{LEFT + 4}" y="{y(value) - 3:.1f}" fill="#b00">{escape(label)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{top + height}" x2="{LEFT + plot_w}" y2="{top + height}" stroke="#000"/>')
    out.append(f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{top + height}" stroke="#000"/>')
    grid, out = out, []
    for i, s in panel.series:
        colour = PALETTE[i % len(PALETTE)]
        pts = [(x(p.time), y(p.value)) for p in s.points]
        if s.kind == "oom":
            out += [_cross(px, py, colour) for px, py in pts]
        elif len(pts) == 1:
            out.append(f'<circle cx="{pts[0][0]:.1f}" cy="{pts[0][1]:.1f}" r="3" fill="{colour}"/>')
        else:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{_dash(s)}/>')
    return grid, out


def _cross(px: float, py: float, colour: str) -> str:
    return (f'<path d="M{px - 4:.1f},{py - 4:.1f}L{px + 4:.1f},{py + 4:.1f}M{px - 4:.1f},{py + 4:.1f}'
            f'L{px + 4:.1f},{py - 4:.1f}" stroke="{colour}" stroke-width="2"/>')


def _dash(s: Series) -> str:
    return ' stroke-dasharray="5,3"' if s.kind == "kv_cache" else ""


_STEPS_MIN = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080)


def _ticks(start: datetime, end: datetime) -> list[datetime]:
    minutes = (end - start).total_seconds() / 60
    step = next((s for s in _STEPS_MIN if minutes / s <= 8), _STEPS_MIN[-1])
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    first = midnight + timedelta(minutes=step * -(-((start - midnight).total_seconds() / 60) // step))
    out, t = [], first
    while t <= end:
        out.append(t)
        t += timedelta(minutes=step)
    return out


def _tick_label(t: datetime, start: datetime, end: datetime) -> str:
    return t.strftime("%m-%d %H:%M") if start.date() != end.date() else t.strftime("%H:%M")


def _hm(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M")


def _thin(points: list[Point]) -> list[Point]:
    """At most MAX_POINTS: equal time buckets, each keeping its highest reading (peaks survive)."""
    if len(points) <= MAX_POINTS:
        return points
    start, end = points[0].time, points[-1].time
    width = (end - start).total_seconds() / MAX_POINTS or 1.0
    buckets: dict[int, Point] = {}
    for p in points:
        key = min(MAX_POINTS - 1, int((p.time - start).total_seconds() / width))
        if key not in buckets or p.value > buckets[key].value:
            buckets[key] = p
    return [buckets[k] for k in sorted(buckets)]


def _dedupe(points: Iterable[Point]) -> list[Point]:
    """One cross per failure: a message logged twice (prefixed, then by Python) is one event."""
    seen: dict[tuple[datetime, float], Point] = {}
    for p in sorted(points, key=lambda p: p.time):
        seen.setdefault((p.time, round(p.value, 1)), p)
    return list(seen.values())
