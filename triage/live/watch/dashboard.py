"""The rich face of a reading: one panel per server, a table of GPUs, each source's state.

Built fresh from each reading (a few small tables: cheap at one reading a second). Values at or
past a threshold are coloured as the risk rules judge them, with the threshold's name beside
the number, so what is on the screen can be checked against triage/thresholds.py.
"""
from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ...console import _COLOURS
from ...timestamps import rfc3339
from ...units import format_bytes
from .readings import GpuView, Reading, ServerView, Source
from .risk import LIMITS, Limits


def render(reading: Reading, limits: Limits = LIMITS, extra: str = "") -> Group:
    head = Text.assemble(("triage watch", "bold"), f"  {rfc3339(reading.time)}  every {reading.interval_s:g} s "
                         f"(timeout {reading.timeout_s:.2g} s){extra}", style="")
    parts: list[Any] = [head]
    gpus = reading.gpu_map()
    parts += [_server(s, gpus, limits) for s in reading.servers]
    parts.append(_gpus(reading, limits))
    return Group(*parts)


def _server(s: ServerView, gpus: dict[int, GpuView], lim: Limits) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    kv = s.kv_cache_usage
    grid.add_row("KV cache", _level(_pct(kv), kv, lim.kv_high, lim.kv_critical,
                                    f" (kv_high {lim.kv_high:.0%}, kv_critical {lim.kv_critical:.0%})"))
    queue = Text(f"running {_num(s.running)}   waiting ")
    queue.append(_num(s.waiting), style="yellow" if (s.waiting or 0) >= lim.waiting_high else "")
    queue.append(f"   preemptions {_rate(s.preemptions_per_s)}   successes {_rate(s.request_success_per_s)}")
    grid.add_row("requests", queue)
    grid.add_row("prefix cache", _prefix(s, lim))
    grid.add_row("budget", _budget(s, gpus, lim))
    grid.add_row("fragmentation", _fragmentation(s, lim))
    grid.add_row("sources", _sources(s.sources))
    grid.add_row("OOM risk", _risks(s))
    state, colour = (("serving", "green") if s.healthy else ("engine not healthy", "red") if s.reachable
                     else ("unreachable", "red"))
    return Panel(grid, title=Text.assemble((s.url, "bold"), "  ", (state, colour)), title_align="left",
                 border_style=_COLOURS.get(s.risks[0].oom_class, "white") if s.risks else "dim")


def _prefix(s: ServerView, lim: Limits) -> Text:
    if s.prefix_caching is False:
        return Text("off")
    out = Text("on" if s.prefix_caching else "?")
    hit = s.prefix_hit_ratio_window
    if hit is not None:
        out.append(", hit rate ")
        out.append(f"{hit:.0%}", style="yellow" if hit < lim.prefix_hit_low else "")
        out.append(f" {s.hit_window} (prefix_hit_low {lim.prefix_hit_low:.0%})")
    return out


def _budget(s: ServerView, gpus: dict[int, GpuView], lim: Limits) -> Text:
    if s.gpu_memory_utilization is None:
        return Text("gpu_memory_utilization unknown", style="dim")
    out = Text(f"gpu_memory_utilization {s.gpu_memory_utilization:g}")
    for i in s.gpus:
        gap = s.discrepancy(gpus[i]) if i in gpus else None
        if gap is None:
            continue
        used = gpus[i].used_share or 0.0
        out.append(f"   GPU {i}: NVML {used:.1%} used, ")
        flagged = gap > 100 * lim.discrepancy
        out.append(f"{gap:+.1f} points", style="bold red" if flagged else "")
        if flagged:
            out.append(f" (over discrepancy {100 * lim.discrepancy:.0f})", style="red")
    if not s.gpus:
        out.append("   (no GPU reading to compare)", style="dim")
    return out


def _fragmentation(s: ServerView, lim: Limits) -> Text:
    f = s.fragmentation
    if f is None:
        hooks = s.sources.get("hooks")
        return Text(hooks.detail if hooks else "no hooks dumps (set TRIAGE_HOOKS_DIR or --hooks-dir)", style="dim")
    out = Text()
    out.append(f"{f.ratio:.0%}", style="yellow" if f.ratio >= lim.inactive_split_share else "")
    out.append(f" inactive_split / reserved ({format_bytes(f.inactive_split_bytes)} of "
               f"{format_bytes(f.reserved_bytes)}; inactive_split_share {lim.inactive_split_share:.0%})")
    age = f"{f.age_s / 60:.0f} min old" if f.age_s is not None else "time unknown"
    out.append(f"  {f.file}, {age}" + ("" if f.current else ", its process is gone"), style="dim")
    return out


def _sources(sources: dict[str, Source]) -> Text:
    out = Text()
    for name, src in sources.items():
        if out:
            out.append("   ")
        if src.ok:
            out.append(f"{name} ok" + (f" {src.took_s * 1000:.0f} ms" if src.took_s is not None else ""), style="green")
        else:
            out.append(f"{name}: {src.detail}", style="red")
    return out


def _risks(s: ServerView) -> Text:
    if not s.risks and s.risk_unknown:
        return Text(f"unknown: {s.risk_unknown}", style="yellow")
    if not s.risks:
        return Text("none seen", style="green")
    out = Text()
    for n, r in enumerate(s.risks):
        if n:
            out.append("\n")
        out.append(f" {r.oom_class.upper()} ", style=f"bold black on {_COLOURS.get(r.oom_class, 'white')}")
        out.append(f" {r.level}: ", style="bold red" if r.level == "critical" else "bold yellow")
        out.append("; ".join(r.reasons))
    return out


def _gpus(reading: Reading, lim: Limits) -> Any:
    if reading.nvml is None:
        return Text("GPUs: not read (--no-nvml)", style="dim")
    if not reading.gpus:
        return Text.assemble(("GPUs: ", "bold"), (reading.nvml.detail, "red" if not reading.nvml.ok else "dim"))
    table = Table(title="GPUs (NVML)", title_justify="left", expand=False)
    for col in ("GPU", "name", "used", "of", "share", "trend"):
        table.add_column(col, justify="right" if col in ("used", "of", "share") else "left")
    for g in reading.gpus:
        share = g.used_share
        table.add_row(str(g.index), g.name, format_bytes(g.used_bytes), format_bytes(g.total_bytes),
                      _level(_pct(share, 1), share, lim.kv_high, lim.kv_critical), _trend(g, lim))
    if not reading.nvml.ok:
        table.caption = reading.nvml.detail
    return table


def _trend(g: GpuView, lim: Limits) -> Text:
    t = g.trend
    if t is None:
        return Text("collecting", style="dim")
    out = Text(f"{'+' if t.slope_bytes_per_hour >= 0 else '-'}{format_bytes(abs(t.slope_bytes_per_hour))}/h")
    out.append(f" over {t.span_s / 60:.0f} min, {t.points} points", style="dim")
    if t.span_s < lim.leak_min_span_s:
        out.append(f" (a leak needs {lim.leak_min_span_s / 3600:g} h)", style="dim")
    return out


def _level(text: str, value: float | None, high: float, critical: float, note: str = "") -> Text:
    style = "" if value is None else "bold red" if value >= critical else "yellow" if value >= high else ""
    return Text.assemble((text, style), (note, "dim"))


def _pct(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}/s"
