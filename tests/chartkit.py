"""Checks a postmortem chart the way a reader sees it: rendered to PNG by a non-browser renderer.

`check_chart(svg, name)` asserts what makes a chart readable — time labels on the x-axis, the
moment labels clear of each other, every reading inside the frame, and coloured data actually
painted in the plot — and writes the PNG to $TRIAGE_CHART_DIR (when set) for a person to look at.
"""
from __future__ import annotations

import io
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from triage.postmortem.chart import LEFT, PALETTE, RIGHT, WIDTH

SVG = "{http://www.w3.org/2000/svg}"
_TIME = re.compile(r"^(\d\d-\d\d )?\d\d:\d\d(:\d\d)?$")


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def render_png(svg: str) -> bytes:
    cairosvg = pytest.importorskip("cairosvg", reason="cairosvg renders the chart (pip install '.[test]')")
    return cairosvg.svg2png(bytestring=svg.encode("utf-8"))


def check_chart(svg: str, name: str) -> None:
    root = ET.fromstring(svg)
    texts = [(float(t.get("x", 0)), float(t.get("y", 0)), t.text or "") for t in root.iter(SVG + "text")]
    axis_y = next(y for _, y, text in texts if text == "time (UTC)") - 32
    ticks = [text for _, _, text in texts if _TIME.match(text)]
    assert len(set(ticks)) >= 3, f"{name}: the time axis has {len(set(ticks))} labels: {ticks}"

    boxes = [(float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height")))
             for r in root.iter(SVG + "rect") if r.get("height") == "13"]          # label boxes
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
            assert apart, f"{name}: two labels overlap: {a} and {b}"

    xs = [float(c.get("cx")) for c in root.iter(SVG + "circle") if float(c.get("cy")) < axis_y + 1]
    for line in root.iter(SVG + "polyline"):
        xs += [float(p.split(",")[0]) for p in line.get("points", "").split()]
    assert xs or root.find(f"{SVG}path[@stroke-width='2']") is not None, f"{name}: no reading drawn"
    assert all(LEFT < x < WIDTH - RIGHT for x in xs), f"{name}: a reading on or outside the frame"

    from PIL import Image

    png = render_png(svg)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = [_rgb(c) for c in PALETTE]
    painted = 0
    for y in range(0, min(image.height, int(axis_y))):
        for x in range(LEFT + 1, WIDTH - RIGHT):
            px = image.getpixel((x, y))
            if any(sum(abs(p - c) for p, c in zip(px, colour)) < 60 for colour in colours):
                painted += 1
    assert painted >= 20, f"{name}: only {painted} pixels of data are painted in the plot"
    keep = os.environ.get("TRIAGE_CHART_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{name}.png").write_bytes(png)
