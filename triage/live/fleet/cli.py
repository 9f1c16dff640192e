"""`triage classify --prometheus URL`: the options turned into a fleet report, printed as a table
(rich) or as `triage.fleet/v1` JSON. Imported only when --prometheus is given.

Exit codes: see `triage.live.fleet.fleet` (0 classified, 1 server unusable or nothing matched, 3 every
instance unknown). Warnings (TLS verification off, credentials over plain http, series that
could not be read) go to stderr, one line each.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ...classes import registry
from ...output import echo_json
from ...paths import data_file
from .fleet import UNDECIDED, FleetReport, Window, classify_fleet, selector_matchers, to_json
from .lifetimes import clock, utc
from .promapi import CA_BUNDLE_ENV, PromClient

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_DEADLINE_S = 60.0
DEFAULT_PARALLEL = 8
SCHEMA_FILE = data_file("fleet.schema.json")


def schema_path() -> Path:
    return SCHEMA_FILE


def run(prometheus: str, *, selector: str | None = None, since: str | None = None, start: str | None = None,
        end: str | None = None, step: str | None = None, timeout: float | None = None, deadline: float | None = None,
        parallel: int | None = None, insecure: bool | None = None, as_json: bool = False) -> int:
    """The CLI's options (None: the default) -> printed report; the exit code."""
    try:
        window = Window.make(since, start, end, step)
        selector_matchers(selector)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    parallel = parallel or DEFAULT_PARALLEL
    client = PromClient(prometheus, timeout_s=timeout or DEFAULT_TIMEOUT_S, insecure=bool(insecure), pool=parallel)
    try:
        if insecure:
            warn(f"TLS certificates of {client.url} are not verified (--insecure); prefer {CA_BUNDLE_ENV}")
        if client.sends_credentials_in_clear:
            warn(f"credentials are sent to {client.url} over plain http")
        report = classify_fleet(client, selector or "", window, parallel=parallel,
                                deadline_s=deadline or DEFAULT_DEADLINE_S)
    finally:
        client.close()
    if as_json:
        echo_json(to_json(report), indent=2, ensure_ascii=False)
    else:
        render(report)
    for line in report.warnings:
        warn(line)
    return int(report.exit_code)


def warn(message: str) -> None:
    click.echo(f"triage: warning: {message}", err=True)


def render(report: FleetReport, console: Any = None) -> None:
    """The fleet table, what to pull for the instances the series do not settle, the summary."""
    from rich.table import Table
    from rich.text import Text

    from ...console import Console, hang, item

    out = console or Console(highlight=False)
    w = report.window
    hang(out, f"{len(report.instances)} instances from {report.url}, {_stamp(w.start)} to {_stamp(w.end)} UTC, "
              f"step {w.step:g}s", 2, "")
    table = Table(expand=False)
    for name, kwargs in (("instance", {"overflow": "fold"}), ("class", {}), ("conf.", {"justify": "right"}),
                         ("deciding series", {"overflow": "fold"})):
        table.add_column(name, **kwargs)
    colours = registry().colours()
    for v in report.instances:
        colour = colours.get(v.oom_class, "white")
        table.add_row(v.instance, Text(v.oom_class, style=f"bold {colour}"), f"{v.verdict.confidence:.2f}",
                      _deciding(v))
    out.print(table)
    pulls = [(v.instance, v.verdict.attach[0]) for v in report.instances
             if v.oom_class == UNDECIDED.value and v.verdict.attach]
    if pulls:
        out.print("[bold]To settle the unknown ones, pull[/bold]")
        for instance, what in pulls:
            item(out, "•", f"{instance}: {what}")
    out.print(Text.assemble(("Summary: ", "bold"), report.summary))


def _deciding(v: Any) -> str:
    if v.error:
        return v.error
    e = v.deciding
    shown = e.fields.get("reading") if e is not None else None
    if shown is None:
        return v.verdict.summary
    note = e.text[len(shown.text()):].strip()
    # The row names the instance: its own series need no labels here.
    reading = shown.text(clock).replace(f'{{instance="{v.instance}"}}', "", 1)
    return reading + (f" {note}" if note else "")


def _stamp(t: float) -> str:
    return utc(t).strftime("%Y-%m-%d %H:%M:%S")
