"""The body of `triage classify PATH...` once its options are read, without click.

Shared by the click command (triage/cli.py) and the start-up fast path (triage/fastpath.py), so
the two cannot drift: both call `classify_incident` / `classify_each` and print through `echo`,
which writes exactly what click.echo would (a line and a flush, ANSI codes left to click).
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

from .errors import ExitCode
from .output import echo_json

PROGRESS_MIN_BYTES = 100 * 1024 * 1024


def echo(line: str, *, err: bool = False) -> None:
    """click.echo(line, err=err) for a str: one write with the newline, then a flush. Text with an
    escape character goes through click itself (it strips ANSI codes when not at a terminal)."""
    if "\x1b" in line:
        import click

        click.echo(line, err=err)
        return
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(line + "\n")
    stream.flush()


def warn(warnings: Sequence[str]) -> None:
    for w in warnings:
        echo(f"triage: warning: {w}", err=True)


def classify_incident(paths: Sequence[str], *, as_json: bool, explain: bool = False, year: int | None = None,
                      tz_name: str | None = None, metrics_urls: Sequence[str] = (),
                      max_bytes: int | None = None) -> int:
    """One incident: the verdict on stdout, warnings on stderr; the exit code."""
    from .api import classify_paths

    with progress_bar(paths) as progress:
        verdict, evidence = classify_paths(paths, year=year, tz=tz_name, metrics_urls=metrics_urls, progress=progress,
                                           max_bytes=max_bytes)
    if as_json:
        from .report import to_json

        echo_json(to_json(verdict), indent=2, ensure_ascii=False)
    else:
        from .console import render_verdict

        render_verdict(verdict, evidence, explain=explain)
    warn(evidence.warnings)
    from .classes import registry

    return int(ExitCode.UNKNOWN if verdict.oom_class is registry().fallback.id else ExitCode.OK)


def classify_each(groups, paths: Sequence[str], *, as_json: bool, year: int | None, tz_name: str | None,
                  max_bytes: int | None) -> int:
    """`triage classify` of several bundles: a table (or JSON Lines), warnings and errors naming
    each bundle on stderr; the exit code of triage.multi.exit_code."""
    from .multi import classify_groups, exit_code, json_lines, table
    from .output import output_width

    outcomes = classify_groups(groups, year=year, tz=tz_name, max_bytes=max_bytes)
    if as_json:
        for doc in json_lines(outcomes):
            echo_json(doc, ensure_ascii=False)
    else:
        import textwrap

        base, width = (paths[0] if len(paths) == 1 else None), output_width()
        for line in textwrap.wrap(f"{len(groups)} incident bundles in {', '.join(paths)}: one verdict each", width,
                                  subsequent_indent="  ", break_on_hyphens=False) + table(outcomes, width, base):
            echo(line)
    for o in outcomes:
        if o.error:
            for line in o.error.splitlines():
                echo(f"triage: {line}", err=True)
        warn([f"{o.group.label}: {w}" for w in o.warnings])
    return exit_code(outcomes)


class progress_bar:
    """A rich progress bar on stderr for large inputs when stderr is a terminal; else nothing."""

    def __init__(self, paths: Sequence[str]):
        self.paths = paths
        self.bar = None

    def __enter__(self) -> Callable[[int], None] | None:
        total = total_size(self.paths)
        if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        self.bar = Progress("reading", BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task("read", total=total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def total_size(paths: Sequence[str]) -> int:
    total = 0
    for p in paths:
        if p == "-":
            continue
        if os.path.isfile(p):
            total += os.path.getsize(p)
        elif os.path.isdir(p):
            for root, _, files in os.walk(p):
                total += sum(os.path.getsize(os.path.join(root, f)) for f in files
                             if os.path.isfile(os.path.join(root, f)))
    return total
