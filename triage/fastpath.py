"""The console entry point: `triage classify PATH... [--json]` without importing click.

click costs ~25 ms of a ~0.1 s start-up. The one invocation a runbook bot or an alert hook makes
on every page, `triage classify PATH... [--json]`, is recognised here from argv exactly, run
through the same code as the click command (triage/classify_cmd.py) and ended the way
`triage.cli.TriageGroup.invoke` ends it: the same masked streams, one-line errors and exit codes.
Anything else (another command or option, `-` for stdin, `--`, --help, shell completion) goes
to the click command line unchanged. tests/test_fastpath.py runs both paths and compares them.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

SIGPIPE_EXIT = 141


def main() -> None:
    from .rxcache import seed

    seed()        # the table of compiled patterns, before any module compiles its own (triage/rxcache.py)
    fast = fast_classify_args(sys.argv[1:])
    if fast is None or _completion_requested():
        from .cli import main as click_main

        click_main()
        return
    paths, as_json = fast
    exit_now(run_classify(paths, as_json=as_json))


def exit_now(code: int) -> None:
    """End the process once its output is out, without the interpreter's teardown.

    Tearing down ~180 modules (clearing their dictionaries, collecting what they held) costs
    about a tenth of a cold classify and does nothing for a process that has written its answer:
    the classify path leaves no file open, registers no exit handler and holds no temporary file.
    The streams are flushed first; a reader that went away gets the SIGPIPE exit, as on the
    click path. Should the flush fail otherwise (a full disk), the normal exit reports it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os._exit(SIGPIPE_EXIT)
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def fast_classify_args(args: Sequence[str]) -> tuple[list[str], bool] | None:
    """(PATHS, --json given) for exactly `classify PATH... [--json]` (--json anywhere after
    `classify`), PATHs not starting with `-`; None for anything else."""
    if len(args) < 2 or args[0] != "classify":
        return None
    paths: list[str] = []
    as_json = False
    for arg in args[1:]:
        if arg == "--json":
            as_json = True
        elif arg.startswith("-"):
            return None
        else:
            paths.append(arg)
    return (paths, as_json) if paths else None


def _completion_requested() -> bool:
    # click's shell completion is driven by _<PROG>_COMPLETE: leave it to click
    return any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)


def run_classify(paths: Sequence[str], *, as_json: bool) -> int:
    """What `triage classify PATHS [--json]` does under click (cli.classify inside
    TriageGroup.invoke, with masked streams), returning its exit code."""
    from .classify_cmd import classify_each, classify_incident, echo
    from .errors import ExitCode, TriageError
    from .output import masked_streams
    from .redact import mask_text

    with masked_streams():
        try:
            from .multi import incident_groups

            groups = incident_groups(paths)
            if len(groups) > 1:        # several incident bundles: one verdict each, never merged
                return classify_each(groups, paths, as_json=as_json, year=None, tz_name=None, max_bytes=None)
            if groups:
                paths = groups[0].paths    # a directory holding one bundle is that bundle
            return classify_incident(paths, as_json=as_json)
        except TriageError as exc:
            for line in mask_text(str(exc)).splitlines() or [""]:    # one line per input that failed
                echo(f"triage: {line}", err=True)
            return int(exc.exit_code)
        except SystemExit:
            raise
        except BrokenPipeError:
            # as cli.TriageGroup.invoke: the reader went away; exit as a writer killed by SIGPIPE
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return SIGPIPE_EXIT
        except KeyboardInterrupt:
            echo("triage: interrupted", err=True)
            return 130
        except Exception as exc:  # the contract: never a traceback without --debug
            click = sys.modules.get("click")
            if click is not None and isinstance(exc, click.ClickException):
                # nothing on this path raises one; should it, say it as click.main would
                exc.message = mask_text(exc.message)
                exc.show()
                return exc.exit_code
            echo(f"triage: internal error: {exc.__class__.__name__}: {mask_text(str(exc))} "
                 "(rerun with --debug for details)", err=True)
            return int(ExitCode.BAD_INPUT)

