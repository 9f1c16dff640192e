"""The command line: parse options, call the library, render. Nothing else lives here.

Errors become one line on stderr and an exit code in one place (`TriageGroup.invoke`);
`--debug` re-raises instead, for a traceback.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Sequence

import click

from . import __version__
from .errors import ExitCode, TriageError

PROGRESS_MIN_BYTES = 100 * 1024 * 1024


class TriageGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TriageError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"triage: {exc}", err=True)
            ctx.exit(int(exc.exit_code))
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("triage: interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # the contract: never a traceback without --debug
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"triage: internal error: {exc.__class__.__name__}: {exc} (rerun with --debug for details)",
                       err=True)
            ctx.exit(int(ExitCode.BAD_INPUT))


@click.group(cls=TriageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="triage")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Triage vLLM GPU out-of-memory incidents: classify, recover, write the postmortem.

    Exit codes: 0 verdict reached (no_oom included), 1 bad input or failed step,
    2 usage error, 3 unknown (a failure the evidence cannot classify; it says what to attach).
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--metrics-url", "metrics_urls", multiple=True, metavar="URL",
              help="Also scrape a live /metrics endpoint (vLLM or DCGM exporter); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the triage.verdict/v1 JSON object.")
@click.option("--explain", is_flag=True, help="Also print every evidence record that was read.")
@click.option("--year", type=click.IntRange(1970, 2100), help="Year for vLLM's year-less timestamps.")
@click.option("--tz", "tz_name", metavar="ZONE", help="Zone of zone-less log times (default UTC, or incident.yaml).")
def classify(paths: Sequence[str], metrics_urls: Sequence[str], as_json: bool, explain: bool, year: int | None,
             tz_name: str | None) -> None:
    """Classify the OOM in PATHS: log files (.gz too), bundle directories, scrapes, or - for stdin."""
    from .api import classify_paths

    if not paths and not metrics_urls:
        raise click.UsageError("give at least one PATH (or - for stdin) or --metrics-url")
    with _progress(paths) as progress:
        verdict, evidence = classify_paths(paths, year=year, tz=tz_name, metrics_urls=metrics_urls, progress=progress)
    if as_json:
        from .report import to_json

        click.echo(json.dumps(to_json(verdict), indent=2, ensure_ascii=False))
    else:
        from .console import render_verdict

        render_verdict(verdict, evidence, explain=explain)
    _warn(evidence.warnings)
    sys.exit(int(ExitCode.UNKNOWN if verdict.oom_class.value == "unknown" else ExitCode.OK))


@main.command(name="eval")
@click.argument("corpus", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="List every case with its answer.")
def eval_cmd(corpus: str, as_json: bool, verbose: bool) -> None:
    """Score the classifier on a labelled corpus (a directory of case YAML files)."""
    from .evaluate import evaluate_corpus

    report = evaluate_corpus(corpus)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        from .console import render_eval

        render_eval(report, verbose=verbose)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the verdict object (triage.verdict/v1)."""
    from .paths import verdict_schema_path

    click.echo(verdict_schema_path().read_text(encoding="utf-8"), nl=False)


@main.command()
@click.option("--dir", "dirs", multiple=True, type=click.Path(file_okay=False), help="Also load runbooks from DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print the runbooks as JSON.")
def runbooks(dirs: Sequence[str], as_json: bool) -> None:
    """List the recovery runbooks (bundled and --dir), validating every file strictly."""
    from pathlib import Path

    from .recovery.runbooks import load_runbooks

    books = load_runbooks([Path(d) for d in dirs])
    if as_json:
        click.echo(json.dumps({b.id: {"title": b.title, "applies_to": list(b.applies_to), "source": b.source,
                                      "steps": [{"id": s.id, "action": s.action, "timeout_s": s.timeout_s,
                                                 "on_failure": s.on_failure} for s in b.steps]}
                               for b in books.values()}, indent=2))
        return
    for book in books.values():
        click.echo(f"{book.id:14s} {book.title}  ({len(book.steps)} steps: "
                   f"{', '.join(s.action for s in book.steps)})")


@main.command()
@click.argument("incident", type=click.Path(exists=True))
@click.option("--runbook", "runbook_name", metavar="NAME", help="Use this runbook instead of the verdict's.")
@click.option("--runbook-dir", "runbook_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also load runbooks from DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def recover(incident: str, runbook_name: str | None, runbook_dirs: Sequence[str], as_json: bool) -> None:
    """Show the recovery plan for INCIDENT: every step, PID, command, flag change and timeout.

    This is a dry run: nothing is signalled, restarted or written.
    """
    from pathlib import Path

    from .api import classify_paths
    from .recovery.plan import build_plan
    from .recovery.runbooks import load_runbooks, select

    verdict, evidence = classify_paths([incident])
    name = runbook_name or verdict.runbook
    if not name:
        raise NoRunbook(f"{incident}: the verdict is {verdict.oom_class.value}; choose a runbook with --runbook "
                        "(triage runbooks lists them)")
    plan = build_plan(verdict, evidence, select(load_runbooks([Path(d) for d in runbook_dirs]), name))
    if as_json:
        from .recovery.plan import plan_json

        click.echo(json.dumps(plan_json(plan), indent=2))
    else:
        from .console import render_plan

        render_plan(plan)


@main.group()
def audit() -> None:
    """The recovery audit trail (INCIDENT/actions.jsonl)."""


@audit.command(name="verify")
@click.argument("incident", type=click.Path(exists=True))
def audit_verify(incident: str) -> None:
    """Check the hash chain of INCIDENT/actions.jsonl: edits, deletions, reordering, truncation."""
    from .recovery.audit import verify

    report = verify(incident)
    if report.ok:
        click.echo(report.summary())
        return
    for problem in report.problems:
        click.echo(f"triage: {problem}", err=True)
    sys.exit(int(ExitCode.BAD_INPUT))


class NoRunbook(TriageError):
    exit_code = ExitCode.UNKNOWN


def _register_sim() -> None:
    from .sim.cli import sim   # a click group only; the simulator loads when it runs

    main.add_command(sim)


_register_sim()


class _progress:
    """A rich progress bar on stderr for large inputs when stderr is a terminal; else nothing."""

    def __init__(self, paths: Sequence[str]):
        self.paths = paths
        self.bar = None

    def __enter__(self):
        total = _total_size(self.paths)
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


def _total_size(paths: Sequence[str]) -> int:
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


def _warn(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"triage: warning: {w}", err=True)
