"""GPU memory and KV-cache usage over the incident, as a small hand-written SVG line chart.

Why SVG by hand and not a plotting library: the chart is one panel of percentages over time;
a few hundred lines of markup do it, render in any Markdown viewer, and come out byte-identical
on every run (a golden file can hold them), with no font cache, backend or extra dependency.

Series come from the Evidence records the parsers already produced:
  GPU memory  `gpu_memory` readings (nvidia-smi, NVML, DCGM framebuffer): used / total, the
              fullest GPU of a node at each reading; `torch_oom` messages as crosses
              (capacity - free) / capacity at the moment of the failure
  KV cache    vLLM stats lines (`kv_usage`) and /metrics scrapes (`kv_cache_usage`)

What the drawing promises a reader (the legend under the plot says it too):
- a line joins only readings at a series' usual interval: a gap longer than GAP_FACTOR times the
  median interval is left blank, and a reading with no neighbour (or a series of one or two
  readings: no interval to judge by) is a dot;
- every reading is on the axis: GPU memory gets a zoomed scale (90-100% under vLLM, where the
  story is), and readings under RELEASED % of the card (memory released: a crash, a restart)
  are drawn on a 0% line below an axis break instead of being left off the scale;
- labels have a white box behind them sized from the text (no `paint-order` halo, which
  renderers other than browsers paint over the text), so the chart reads in cairosvg, rsvg,
  Inkscape as in a browser;
- dotted verticals are the key moments, named in a band above the plot (never over the data or
  each other) and listed with their times below;
- the time axis is at least MIN_SPAN_S wide with a margin at each end, and its ticks go down to
  seconds: a drill over in seconds still gets time labels and readings spread out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape
from statistics import median_low
from typing import Iterable, Sequence

from ..evidence.kinds import Kind
from ..model import Evidence, EvidenceSet

WIDTH = 820
LEFT, RIGHT, TOP, PLOT_H = 56, 20, 44, 250
MAX_POINTS = 240                      # per series: enough for the shape, small enough to diff
GAP_FACTOR = 3                        # a gap over this many usual intervals breaks a series' line
RELEASED = 5.0                        # GPU memory under this % of the card: released (crash, restart)
STRIP = 24                            # px under the axis break where released readings sit
NOTE_ROW = 16                         # px per line of the legend's notes
LABEL_ROW = 13                        # px per row of moment labels, in their band above the plot
MIN_SPAN_S = 20.0                     # the time axis is never narrower (a drill can be over in seconds)
MARGIN = 0.03                         # of the span, left blank at each end of the time axis
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
    legend: str = ""                  # how to read it (moments, gaps, axis break): for the caption


def node_of(rec: Evidence) -> str | None:
    """The node a record belongs to, named exactly as the timeline names it."""
    from ..timeline.from_evidence import node_of as timeline_node

    return timeline_node(rec)


def collect_series(evidence: EvidenceSet, released: bool = False) -> list[Series]:
    """`released`: keep GPU-memory readings of 0 bytes used (memory released by a crash or a
    restart). The chart draws them; the early-signal checks leave them out (a reload after a
    restart is not a trend)."""
    gpu: dict[str, dict[datetime, Point]] = {}
    kv: dict[str, list[Point]] = {}
    nodes: dict[str, str | None] = {}
    ooms: list[Point] = []
    for rec in evidence:
        if rec.time is None:
            continue
        f = rec.fields
        used = f.get("used_bytes")
        if rec.kind == Kind.GPU_MEMORY and f.get("total_bytes") and (used or (released and used == 0)):
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
    series = [s for s in collect_series(evidence, released=True) if s.points]
    if not series:
        return Chart([], list(markers), None,
                     "no GPU memory or KV-cache readings in the evidence (attach nvidia-smi readings, "
                     "/metrics scrapes or the vLLM log with its stats lines)")
    times = [p.time for s in series for p in s.points] + [m.time for m in markers]
    start, end = _window(min(times), max(times))
    panels = _panels(series, budget)
    svg = _svg(panels, list(markers), start, end, title)
    what = " and ".join(p.title.split(" (")[0] for p in panels)
    return Chart(series, list(markers), svg, f"{what}, {_hm(start)} to {_hm(end)} UTC", _caption(panels, markers))


def _window(first: datetime, last: datetime) -> tuple[datetime, datetime]:
    """The time axis: the readings and moments with a margin, so nothing sits on the frame, and
    at least MIN_SPAN wide, so a drill over in seconds is spread out rather than a dot on the axis."""
    span = max((last - first).total_seconds(), MIN_SPAN_S)
    middle = first + (last - first) / 2
    half = timedelta(seconds=span * (0.5 + MARGIN))
    return middle - half, middle + half


def _caption(panels: list[_Panel], markers: Sequence[Marker]) -> str:
    """How to read the chart, for the text under it (the SVG's own legend says the same)."""
    out = []
    if markers:
        names = ", ".join(dict.fromkeys(m.label for m in markers))
        out.append(f"Dotted vertical lines mark the key moments ({names}).")
    out.append(f"Gaps in the readings are left blank: a line joins only readings at the series' usual "
               f"interval (a gap of more than {GAP_FACTOR}x that interval breaks it), and a lone reading is a dot.")
    if any(p.released for p in panels):
        out.append(f"GPU memory released to under {RELEASED:g}% of the card (a crash, a restart) is drawn on "
                   "the 0% line below the axis break.")
    return " ".join(out)


@dataclass
class _Panel:
    title: str
    series: list[tuple[int, Series]]          # (colour index, series)
    low: float
    high: float = 100.0
    lines: list[tuple[float, str]] = field(default_factory=list)   # horizontal reference lines
    released: bool = False                    # readings below `low`: drawn on a 0% line under an axis break


def _panels(series: list[Series], budget: float | None) -> list[_Panel]:
    """GPU memory on its own scale (it lives at 90-100% under vLLM, where the story is), KV 0-100%.
    GPU-memory readings under RELEASED % (memory released) do not pull the scale down to 0: they
    go on a 0% line below an axis break, so the zoom survives and the release still shows."""
    indexed = list(enumerate(series))
    gpu = [(i, s) for i, s in indexed if s.kind in ("gpu_memory", "oom")]
    kv = [(i, s) for i, s in indexed if s.kind == "kv_cache"]
    out = []
    if gpu:
        values = [p.value for _, s in gpu for p in s.points]
        lows = ([v for v in values if v >= RELEASED] or values) + ([100 * budget] if budget else [])
        low = max(0.0, min(90.0, 10 * ((min(lows) - 2) // 10)))
        lines = [(100 * budget, f"engine budget {100 * budget:g}%")] if budget else []
        out.append(_Panel("GPU memory used (% of the card)", gpu, low, lines=lines,
                          released=any(v < low for v in values)))
    if kv:
        out.append(_Panel("KV-cache usage (% of the engine's KV cache)", kv, 0.0))
    return out


def segments(points: list[Point]) -> list[list[Point]]:
    """A series cut where its readings stop: a gap over GAP_FACTOR times the median interval starts
    a new piece. One or two readings give no interval to judge by: each is a piece of its own."""
    if len(points) < 3:
        return [[p] for p in points]
    gaps = [(b.time - a.time).total_seconds() for a, b in zip(points, points[1:])]
    positive = [g for g in gaps if g > 0]
    usual = median_low(positive) if positive else 0.0
    out = [[points[0]]]
    for p, g in zip(points[1:], gaps):
        if usual and g > GAP_FACTOR * usual:
            out.append([p])
        else:
            out[-1].append(p)
    return out


# -- drawing ----------------------------------------------------------------------------------

def _svg(panels: list[_Panel], markers: list[Marker], start: datetime, end: datetime, title: str) -> str:
    span = (end - start).total_seconds()
    plot_w = WIDTH - LEFT - RIGHT
    panel_h, gap = (PLOT_H if len(panels) == 1 else 150), 40

    def x(t: datetime) -> float:
        return LEFT + plot_w * (t - start).total_seconds() / span

    # The moments' names sit in a band of their own above the first panel: never on the data,
    # never on each other (moments seconds apart take rows one under the other).
    placed = _place_labels([(x(m.time), m.label) for m in markers], plot_w)
    band = (max(row for _, row, _, _ in placed) + 1) * LABEL_ROW + 4 if placed else 0
    top0 = TOP + band
    axis_y = top0 + len(panels) * panel_h + (len(panels) - 1) * gap
    legend = [entry for p in panels for entry in p.series]
    notes = _notes(panels, markers, start, end, plot_w - 24)
    notes_y = axis_y + 54 + 18 * ((len(legend) + 1) // 2)
    height = notes_y + NOTE_ROW * sum(len(lines) for _, lines in notes) - 4

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           f"<title>{escape(title or 'GPU memory and KV-cache usage')}</title>",
           f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
           f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>']
    ticks = _ticks(start, end)
    if placed:
        out.append(f'<line x1="{LEFT}" y1="{top0}" x2="{LEFT + plot_w}" y2="{top0}" stroke="#e0e0e0"/>')
    for mx, row, right, label in placed:               # impact start, detected, mitigated, resolved
        ly = TOP + 10 + LABEL_ROW * row
        out.append(_moment_line(mx, ly + 2, top0))
        out += _label(mx - 3 if right else mx + 3, ly, label, right, "#444")
    for n, panel in enumerate(panels):
        top = top0 + n * (panel_h + gap)
        grid, lines = _panel(panel, top, panel_h, x, plot_w, title_y=(TOP - 6) if n == 0 else None)
        out += grid
        for t in ticks:
            out.append(f'<line x1="{x(t):.1f}" y1="{top + panel_h}" x2="{x(t):.1f}" y2="{top + panel_h + 4}" '
                       'stroke="#000"/>')
            out.append(f'<text x="{x(t):.1f}" y="{top + panel_h + 16}" text-anchor="middle">'
                       f'{_tick_label(t, start, end, ticks)}</text>')
        for m in markers:
            out.append(_moment_line(x(m.time), top, top + panel_h))
        out += lines
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{axis_y + 32}" text-anchor="middle">time (UTC)</text>')
    for k, (i, s) in enumerate(legend):
        colour = PALETTE[i % len(PALETTE)]
        lx, ly = LEFT + (k % 2) * (plot_w / 2), axis_y + 54 + 18 * (k // 2)
        if s.kind == "oom":
            out.append(_cross(lx + 9, ly - 4, colour))
        elif all(len(piece) == 1 for piece in segments(s.points)):
            out.append(f'<circle cx="{lx + 9:.1f}" cy="{ly - 4}" r="3" fill="{colour}"/>')
        else:
            out.append(f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 18:.1f}" y2="{ly - 4}" stroke="{colour}" '
                       f'stroke-width="2"{_dash(s)}/>')
        out.append(f'<text x="{lx + 24:.1f}" y="{ly}">{escape(s.label)}</text>')
    ny = notes_y
    for sample, lines in notes:                        # how to read it: moments, gaps, the axis break
        out.append(_sample(sample, LEFT, ny))
        for line in lines:
            out.append(f'<text x="{LEFT + 24}" y="{ny}" fill="#444">{escape(line)}</text>')
            ny += NOTE_ROW
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _place_labels(moments: list[tuple[float, str]], plot_w: float) -> list[tuple[float, int, bool, str]]:
    """(x, row, right-aligned, label) per moment: each on the first row where its box clears the
    others by 8 px (right-aligned, ending at its line, in the right part of the plot)."""
    rows: list[list[tuple[float, float]]] = []
    out = []
    for mx, label in moments:
        right = mx > LEFT + 0.7 * plot_w
        w = _text_width(label) + 4
        box = (mx - 1 - w, mx - 1) if right else (mx + 1, mx + 1 + w)
        row = next((r for r, taken in enumerate(rows) if all(box[1] + 8 < a or box[0] > b + 8 for a, b in taken)),
                   len(rows))
        if row == len(rows):
            rows.append([])
        rows[row].append(box)
        out.append((mx, row, right, label))
    return out


def _notes(panels: list[_Panel], markers: list[Marker], start: datetime, end: datetime,
           width: float) -> list[tuple[str, list[str]]]:
    """The legend's notes, each (sample to draw, its text wrapped to `width` px)."""
    out = []
    if markers:
        fmt = "%m-%d %H:%M:%S" if start.date() != end.date() else "%H:%M:%S"
        listed = ", ".join(f"{m.label} {m.time.strftime(fmt)}" for m in markers)
        out.append(("moment", f"dotted vertical line: a key moment, named at its top: {listed}"))
    out.append(("gap", f"a gap in a series' readings (over {GAP_FACTOR}x its usual interval) is left blank, "
                       "not bridged by a line; a lone reading is a dot"))
    if any(p.released for p in panels):
        out.append(("break", f"axis break: GPU memory under {RELEASED:g}% of the card (released: a crash, a "
                             "restart) is drawn on the 0% line below it"))
    return [(sample, _wrap(text, width)) for sample, text in out]


def _sample(kind: str, lx: float, ly: float) -> str:
    if kind == "moment":
        return _moment_line(lx + 9, ly - 11, ly + 2)
    if kind == "gap":
        return (f'<path d="M{lx},{ly - 4}H{lx + 6}M{lx + 13},{ly - 4}H{lx + 18}" stroke="#444" '
                'stroke-width="1.5" fill="none"/>')
    return _axis_break(lx + 9, ly - 4)


def _moment_line(mx: float, y1: float, y2: float) -> str:
    return f'<line x1="{mx:.1f}" y1="{y1}" x2="{mx:.1f}" y2="{y2}" stroke="#777" stroke-dasharray="2,3"/>'


def _axis_break(bx: float, by: float) -> str:
    """Two slanted strokes across a vertical axis, the gap between them blanked."""
    return (f'<rect x="{bx - 6:.1f}" y="{by - 3:.1f}" width="12" height="6" fill="#ffffff"/>'
            f'<path d="M{bx - 6:.1f},{by - 1:.1f}L{bx + 6:.1f},{by - 5:.1f}M{bx - 6:.1f},{by + 5:.1f}'
            f'L{bx + 6:.1f},{by + 1:.1f}" stroke="#000" fill="none"/>')


def _label(tx: float, ty: float, text: str, end: bool, fill: str) -> list[str]:
    """Text on a white box sized from an estimate of its width: legible in every SVG renderer
    (a stroke halo with `paint-order` is painted over the text outside browsers)."""
    w = _text_width(text) + 4
    bx = tx - w + 2 if end else tx - 2
    anchor = ' text-anchor="end"' if end else ""
    return [f'<rect x="{bx:.1f}" y="{ty - 10:.1f}" width="{w:.1f}" height="13" fill="#ffffff"/>',
            f'<text x="{tx:.1f}" y="{ty:.1f}" fill="{fill}"{anchor}>{escape(text)}</text>']


def _text_width(text: str, size: float = 11.0) -> float:
    """Rough advance width in px, per character class of a wide sans-serif (DejaVu Sans): on the
    safe side for Helvetica and Arial, so a box sized from it holds the text."""
    em = 0.0
    for c in text:
        if c in "il.,:;|!'":
            em += 0.3
        elif c in " ftjr()[]{}/-":
            em += 0.4
        elif c in "mwMW%":
            em += 0.95
        elif c.isupper() or c.isdigit():
            em += 0.72
        else:
            em += 0.62
    return em * size


def _wrap(text: str, width: float) -> list[str]:
    lines = [""]
    for word in text.split():
        joined = f"{lines[-1]} {word}" if lines[-1] else word
        if lines[-1] and _text_width(joined) > width:
            lines.append(word)
        else:
            lines[-1] = joined
    return lines


def _panel(panel: _Panel, top: float, height: float, x, plot_w: float,
           title_y: float | None = None) -> tuple[list[str], list[str]]:
    """(grid, axes and reference lines; the series), drawn apart so that the data goes on top.
    `title_y`: where the title goes when not right above the plot (the moments' band is there)."""
    scale_h = height - (STRIP if panel.released else 0)

    def y(v: float) -> float:
        if panel.released and v < panel.low:
            return top + height                       # the 0% line under the axis break
        return top + scale_h * (1 - (max(panel.low, min(panel.high, v)) - panel.low) / (panel.high - panel.low))

    out = [f'<text x="{LEFT}" y="{top - 6 if title_y is None else title_y}" font-weight="bold">'
           f'{escape(panel.title)}</text>']
    if panel.released:
        out.append(f'<rect x="{LEFT}" y="{top + scale_h}" width="{plot_w}" height="{STRIP}" fill="#f4f4f4"/>')
    step = 5 if panel.high - panel.low <= 25 else 10 if panel.high - panel.low <= 50 else 20
    v = panel.low
    while v <= panel.high + 1e-9:
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + plot_w}" y2="{y(v):.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}%</text>')
        v += step
    if panel.released:
        out.append(f'<text x="{LEFT - 6}" y="{top + height + 4}" text-anchor="end">0%</text>')
    for value, label in panel.lines:
        out.append(f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{LEFT + plot_w}" y2="{y(value):.1f}" '
                   'stroke="#b00" stroke-dasharray="6,3"/>')
        out.append(f'<text x="{LEFT + 4}" y="{y(value) - 3:.1f}" fill="#b00">{escape(label)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{top + height}" x2="{LEFT + plot_w}" y2="{top + height}" stroke="#000"/>')
    out.append(f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{top + height}" stroke="#000"/>')
    if panel.released:
        out.append(_axis_break(LEFT, top + scale_h + STRIP / 2))
    grid, out = out, []
    first_release: tuple[float, float] | None = None
    for i, s in panel.series:
        colour = PALETTE[i % len(PALETTE)]
        if s.kind == "oom":
            out += [_cross(x(p.time), y(p.value), colour) for p in s.points]
            continue
        for piece in segments(s.points):
            pts = [(x(p.time), y(p.value)) for p in piece]
            if len(pts) == 1:
                out.append(f'<circle cx="{pts[0][0]:.1f}" cy="{pts[0][1]:.1f}" r="3" fill="{colour}"/>')
            else:
                path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
                out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{_dash(s)}/>')
        if panel.released:
            drop = next((b for a, b in zip(s.points, s.points[1:]) if a.value >= panel.low > b.value), None)
            if drop is not None and (first_release is None or x(drop.time) < first_release[0]):
                first_release = (x(drop.time), y(drop.value))
    if first_release is not None:                     # name the first release on the 0% line, under the data
        rx, ry = first_release
        right = rx > LEFT + 0.7 * plot_w
        out = _label(rx - 5 if right else rx + 5, ry - 4, "memory released", right, "#000") + out
    return grid, out


def _cross(px: float, py: float, colour: str) -> str:
    return (f'<path d="M{px - 4:.1f},{py - 4:.1f}L{px + 4:.1f},{py + 4:.1f}M{px - 4:.1f},{py + 4:.1f}'
            f'L{px + 4:.1f},{py - 4:.1f}" stroke="{colour}" stroke-width="2"/>')


def _dash(s: Series) -> str:
    return ' stroke-dasharray="5,3"' if s.kind == "kv_cache" else ""


# Tick steps in seconds: down to seconds, so an incident over in under a minute still has a time axis.
_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
            172800, 604800)


def _ticks(start: datetime, end: datetime) -> list[datetime]:
    seconds = (end - start).total_seconds()
    step = next((s for s in _STEPS_S if seconds / s <= 8), _STEPS_S[-1])
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    first = midnight + timedelta(seconds=step * -(-((start - midnight).total_seconds()) // step))
    out, t = [], first
    while t <= end:
        out.append(t)
        t += timedelta(seconds=step)
    return out


def _tick_label(t: datetime, start: datetime, end: datetime, ticks: Sequence[datetime] = ()) -> str:
    seconds = any(tick.second for tick in ticks)
    fmt = "%H:%M:%S" if seconds else "%H:%M"
    return t.strftime("%m-%d " + fmt) if start.date() != end.date() else t.strftime(fmt)


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
