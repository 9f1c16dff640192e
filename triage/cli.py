"""The command line: parse options, call the library, render. Nothing else lives here.

Errors become one line on stderr and an exit code in one place (`TriageGroup.invoke`);
`--debug` re-raises instead, for a traceback.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

import click

from . import __version__
from .errors import ExitCode, TriageError
from .output import echo_json, masked_streams
from .redact import mask_text

SIGPIPE_EXIT = 141


# Commands that live with their feature, imported only when named: `triage classify` must not
# pay for the timeline, postmortem or simulator modules at start-up.
LAZY_COMMANDS = {
    "sim": "triage.sim.cli:sim",
    "note": "triage.timeline.cli:note",
    "timeline": "triage.timeline.cli:timeline",
    "postmortem": "triage.postmortem.cli:postmortem",
    "collect": "triage.live.collect.cli:collect",
    "watch": "triage.live.watch.cli:watch",
    "serve": "triage.live.serve.cli:serve",
    "plan": "triage.plan.cli:plan",
    "prove": "triage.prove.cli:prove",
}


class TriageGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and name not in self.commands:
            from importlib import import_module

            module, _, attr = LAZY_COMMANDS[name].partition(":")
            self.add_command(getattr(import_module(module), attr), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TriageError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            for line in mask_text(str(exc)).splitlines() or [""]:    # one line per input that failed
                click.echo(f"triage: {line}", err=True)
            ctx.exit(int(exc.exit_code))
        except click.ClickException as exc:
            exc.message = mask_text(exc.message)    # click prints it after the masked streams are gone
            raise
        except (click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except BrokenPipeError:
            # The reader went away (`triage classify ... | head`): nothing is wrong with the input,
            # so not exit 1. Exit as a writer killed by SIGPIPE would (128 + 13), the shell's
            # convention, with stdout pointed at /dev/null so the final flush cannot fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(SIGPIPE_EXIT)
        except KeyboardInterrupt:
            click.echo("triage: interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # the contract: never a traceback without --debug
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"triage: internal error: {exc.__class__.__name__}: {mask_text(str(exc))} "
                       "(rerun with --debug for details)", err=True)
            ctx.exit(int(ExitCode.BAD_INPUT))


@click.group(cls=TriageGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="triage")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Triage vLLM GPU out-of-memory incidents: classify, recover, write the postmortem;
    capture, watch and classify live servers and fleets; plan a deploy.

    Exit codes: 0 verdict reached (no_oom included), 1 bad input or failed step,
    2 usage error, 3 unknown (a failure the evidence cannot classify; it says what to attach),
    4 `plan` only: the model and flags will fail on that GPU.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if ctx.invoked_subcommand != "sim":     # the simulator's stderr is a vLLM log, written as vLLM writes it
        # Whatever any module prints, secrets are masked on the way out (see triage/output.py).
        ctx.with_resource(masked_streams())


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--metrics-url", "metrics_urls", multiple=True, metavar="URL",
              help="Also scrape a live /metrics endpoint (vLLM or DCGM exporter); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the triage.verdict/v1 JSON object.")
@click.option("--explain", is_flag=True, help="Also print every evidence record that was read.")
@click.option("--year", type=click.IntRange(1970, 2100), help="Year for vLLM's year-less timestamps.")
@click.option("--tz", "tz_name", metavar="ZONE", help="Zone of zone-less log times (default UTC, or incident.yaml).")
@click.option("--max-input-bytes", "max_input", metavar="SIZE",
              help="Most a compressed input may expand to (default 4GiB, or $TRIAGE_MAX_INPUT_BYTES), e.g. 16GiB.")
@click.option("--prometheus", metavar="URL", help="Classify every instance of a fleet from a Prometheus-compatible "
              "server's series instead (triage.fleet/v1 with --json); credentials only from $TRIAGE_PROMETHEUS_TOKEN "
              "or $TRIAGE_PROMETHEUS_USER and $TRIAGE_PROMETHEUS_PASSWORD, a private CA from $TRIAGE_PROMETHEUS_CA_BUNDLE.")
@click.option("--selector", metavar="SEL", help="With --prometheus: the fleet's targets, e.g. '{job=\"vllm\"}'.")
@click.option("--since", metavar="DURATION", help="With --prometheus: the window up to now (default 1h).")
@click.option("--start", metavar="TIME", help="With --prometheus: window start (RFC 3339 or unix seconds).")
@click.option("--end", metavar="TIME", help="With --prometheus: window end (default now).")
@click.option("--step", metavar="DURATION", help="With --prometheus: resolution (default: 15s, coarser for long windows).")
@click.option("--timeout", type=click.FloatRange(0.5, 600), help="With --prometheus: seconds per request (default 10).")
@click.option("--deadline", type=click.FloatRange(1, 3600), help="With --prometheus: seconds for the whole pull "
              "(default 60); instances not read by then are unknown.")
@click.option("--parallel", type=click.IntRange(1, 64), help="With --prometheus: requests at once (default 8).")
@click.option("--insecure", is_flag=True, default=None, help="With --prometheus: do not verify TLS certificates (warns).")
def classify(paths: Sequence[str], metrics_urls: Sequence[str], as_json: bool, explain: bool, year: int | None,
             tz_name: str | None, max_input: str | None, **fleet) -> None:
    """Classify the OOM in PATHS: log files (.gz, .bz2, .xz, .zst too), bundle directories (or a .tar.gz / .zip
    of one), scrapes, or - for stdin. A directory of several bundles gets one verdict per bundle. With
    --prometheus URL, every instance of a fleet instead, from its series: exit 3 only when every one is unknown."""
    from .units import parse_size

    if fleet["prometheus"]:
        if paths or metrics_urls or explain:
            raise click.UsageError("--prometheus classifies a fleet from its series: give no PATH, --metrics-url or "
                                   "--explain with it")
        from .live.fleet.cli import run

        sys.exit(run(as_json=as_json, **fleet))
    if any(value is not None for value in fleet.values()):
        raise click.UsageError("--selector, --since, --start, --end, --step, --timeout, --deadline, --parallel and "
                               "--insecure go with --prometheus")
    if not paths and not metrics_urls:
        raise click.UsageError("give at least one PATH (or - for stdin) or --metrics-url")
    max_bytes = parse_size(max_input) if max_input is not None else None
    if max_input is not None and not max_bytes:
        raise click.BadParameter(f"{max_input!r} is not a size (use bytes or e.g. 16GiB)", param_hint="--max-input-bytes")
    from .classify_cmd import classify_each, classify_incident
    from .multi import incident_groups

    groups = incident_groups(paths) if paths else []
    if len(groups) > 1:        # several incident bundles: one verdict each, never merged
        if metrics_urls or explain:
            raise click.UsageError(f"{'--metrics-url' if metrics_urls else '--explain'} is for one incident: "
                                   f"the PATHs hold {len(groups)} bundles; give one of them")
        sys.exit(classify_each(groups, paths, as_json=as_json, year=year, tz_name=tz_name, max_bytes=max_bytes))
    if groups:
        paths = groups[0].paths    # a directory holding one bundle is that bundle
    sys.exit(classify_incident(paths, as_json=as_json, explain=explain, year=year, tz_name=tz_name,
                               metrics_urls=metrics_urls, max_bytes=max_bytes))


@main.command(name="eval")
@click.argument("corpus", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="List every case with its answer.")
def eval_cmd(corpus: str, as_json: bool, verbose: bool) -> None:
    """Score the classifier on a labelled corpus (a directory of case YAML files)."""
    from .evaluate import evaluate_corpus

    report = evaluate_corpus(corpus)
    if as_json:
        from .output import echo_json

        echo_json(report.to_json(), indent=2)
    else:
        from .eval_render import render_eval

        render_eval(report, verbose=verbose)


@main.command()
@click.option("--fleet", is_flag=True, help="The fleet report's schema instead (triage.fleet/v1).")
def schema(fleet: bool) -> None:
    """Print the JSON Schema of the verdict object (triage.verdict/v1), or of the fleet report."""
    from .paths import verdict_schema_path

    if fleet:
        from .live.fleet.cli import schema_path

        click.echo(schema_path().read_text(encoding="utf-8"), nl=False)
        return
    click.echo(verdict_schema_path().read_text(encoding="utf-8"), nl=False)


@main.command()
@click.option("--dir", "dirs", multiple=True, type=click.Path(file_okay=False), help="Also load runbooks from DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print the runbooks as JSON.")
def runbooks(dirs: Sequence[str], as_json: bool) -> None:
    """List the recovery runbooks (bundled and --dir), validating every file strictly."""
    from pathlib import Path

    from .output import wrap_plain
    from .recovery.runbooks import load_runbooks

    books = load_runbooks([Path(d) for d in dirs])
    if as_json:
        from .output import echo_json

        echo_json({b.id: {"title": b.title, "applies_to": list(b.applies_to), "source": b.source,
                          "steps": [{"id": s.id, "action": s.action, "timeout_s": s.timeout_s,
                                     "on_failure": s.on_failure} for s in b.steps]}
                   for b in books.values()}, indent=2)
        return
    for book in books.values():
        click.echo(wrap_plain(f"{book.id:14s} {book.title}  ({len(book.steps)} steps: "
                              f"{', '.join(s.action for s in book.steps)})", indent=15))


@main.command()
@click.argument("incident", type=click.Path())      # a missing one is bad input (exit 1), as for timeline
@click.option("--runbook", "runbook_name", metavar="NAME", help="Use this runbook instead of the verdict's.")
@click.option("--runbook-dir", "runbook_dirs", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Also load runbooks from DIR (the folder `triage runbooks --dir DIR` lists and validates).")
@click.option("--param", "params", multiple=True, metavar="STEP.KEY=VALUE",
              help="Override a step's parameter or timeout_s (e.g. steady.window_s=30).")
@click.option("--execute", is_flag=True, help="Carry the plan out (default: print it and change nothing).")
@click.option("--yes", is_flag=True, help="With --execute: do not ask before each step.")
@click.option("--pid", "pids", multiple=True, type=click.IntRange(min=2), metavar="PID",
              help="A PID of the server (confirmed against its command line like the ones in the evidence).")
@click.option("--url", metavar="URL", help="The server's base URL (default: from its start-up log line).")
@click.option("--launch-command", metavar="CMD",
              help="The command the server was started with, when it is not running and the logs lack it.")
@click.option("--driver", type=click.Choice(["process", "systemctl", "kubectl"]),
              help="How to relaunch (default: the runbook's).")
@click.option("--unit", metavar="NAME", help="systemd unit (systemctl driver).")
@click.option("--deployment", metavar="NS/NAME", help="Kubernetes deployment (kubectl driver).")
@click.option("--allow-gpu-reset", is_flag=True, help="Permit nvidia-smi --gpu-reset on an idle GPU.")
@click.option("--force", is_flag=True, help="Act even if the server answers a real completion again.")
@click.option("--trust-bundle-launch", "trusted_launches", multiple=True, metavar="DIGEST",
              help="Run the command from the incident bundle whose digest the plan prints (--yes does not).")
@click.option("--prove", is_flag=True, help="End with `triage prove`: the server under the incident's own peak "
              "load (parameters: --param prove.duration_s=60 ...).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan (or the run report) as JSON.")
def recover(incident: str, runbook_name: str | None, runbook_dirs: Sequence[str], params: Sequence[str],
            execute: bool, yes: bool, pids: Sequence[int], url: str | None, launch_command: str | None,
            driver: str | None, unit: str | None, deployment: str | None, allow_gpu_reset: bool, force: bool,
            trusted_launches: Sequence[str], as_json: bool, prove: bool = False) -> None:
    """Recover INCIDENT with its runbook: a dry-run plan, or --execute it step by step.

    Without --execute nothing is signalled, restarted or written. With it, every step is
    confirmed (or --yes), time-boxed and recorded in INCIDENT/actions.jsonl; a re-run resumes
    after the last completed step. A relaunch command read from the bundle (not from the running
    server or --launch-command) runs only once confirmed at the prompt or by --trust-bundle-launch.
    """
    from .packed import unpacked
    from .recovery.session import NothingToRecover, open_session

    if not os.path.lexists(incident):
        from .errors import BadInput

        raise BadInput(incident, "no such incident directory")
    given = incident
    incident = unpacked(incident, writes="actions.jsonl (every step of --execute)" if execute else None)
    try:
        session = open_session(incident, runbook_name=runbook_name, runbook_dirs=runbook_dirs, params=params,
                               pids=pids, url=url, launch_command=launch_command, driver=driver,
                               deployment=deployment, prove=prove)
        click.get_current_context().call_on_close(session.close)
    except TriageError as exc:            # a packed bundle is named as given, not by its temporary copy
        exc.args = tuple(str(a).replace(incident, given) for a in exc.args)
        if not isinstance(exc, NothingToRecover):
            raise
        done = exc
        if as_json:
            v = done.verdict
            echo_json({"schema": "triage.recovery_plan/v1", "dry_run": not execute, "runbook": None,
                       "verdict": {"class": v.oom_class.value, "confidence": v.confidence, "summary": v.summary},
                       "nothing_to_recover": str(done), "steps": []}, indent=2)
        else:
            click.echo(str(done))
        return
    if not execute:
        from .recovery.context import ExecOptions as _Options
        from .recovery.executor import resume_point
        from .recovery.session import preflight

        problems = preflight(session, _Options(driver=driver, unit=unit, deployment=deployment),
                             resume_point(session.audit, session.plan)[1])
        if as_json:
            from .recovery.plan import plan_json

            echo_json({**plan_json(session.plan), "refused_by_preflight": problems}, indent=2)
        else:
            from .console import render_plan

            render_plan(session.plan)
        for problem in problems:
            click.echo(f"triage: warning: --execute would refuse to start: {problem}", err=True)
        return
    if yes is False and not sys.stdin.isatty():
        raise TriageError("--execute needs a terminal to confirm each step, or --yes")
    from .console import RecoverConsole
    from .recovery.context import ExecOptions
    from .recovery.session import execute as run_plan

    view = RecoverConsole(quiet=as_json)
    options = ExecOptions(yes=yes, allow_gpu_reset=allow_gpu_reset, driver=driver, unit=unit, deployment=deployment,
                          force=force, confirm=_ask, say=view.say, trusted_launches=tuple(trusted_launches))
    view.header(session.plan)
    try:
        report = run_plan(session, options, show_step=view.step, show_result=view.result)
    except KeyboardInterrupt:
        view.say("interrupted: the step in progress is recorded as interrupted in actions.jsonl; "
                 "re-run to resume after the last completed step")
        sys.exit(int(ExitCode.BAD_INPUT))
    view.report(report)
    if as_json:
        from .recovery.executor import report_json

        echo_json(report_json(report), indent=2)
    if not report.ok:
        sys.exit(int(ExitCode.BAD_INPUT))


def _ask(question: str) -> bool:
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        raise KeyboardInterrupt from None     # Ctrl-C at a prompt: end the run like Ctrl-C in a step


@main.group()
def audit() -> None:
    """The recovery audit trail (INCIDENT/actions.jsonl)."""


@audit.command(name="verify")
@click.argument("incident", type=click.Path(exists=True))
def audit_verify(incident: str) -> None:
    """Check the hash chain of INCIDENT/actions.jsonl (edits, deletions, reordering, truncation) and
    which records this host's key authenticates. Exit 1 when the chain is broken or any record is
    not authenticated by this host (recovery ignores those)."""
    from .recovery.audit import verify

    report = verify(incident, key=True)
    if not report.ok:
        for problem in report.problems:
            click.echo(f"triage: {problem}", err=True)
        sys.exit(int(ExitCode.BAD_INPUT))
    from .output import wrap_plain

    click.echo(wrap_plain(report.summary(), indent=4))     # to the output width, `label: N` kept whole
    if report.untrusted:
        shown = 20
        for line in report.untrusted[:shown]:
            click.echo(f"triage: {line}", err=True)
        if len(report.untrusted) > shown:
            click.echo(f"triage: ... and {len(report.untrusted) - shown} more", err=True)
        click.echo(f"triage: {len(report.untrusted)} record(s) not authenticated by this host's key: recovery "
                   "ignores them (PIDs, launches, resume points)", err=True)
        sys.exit(int(ExitCode.BAD_INPUT))
