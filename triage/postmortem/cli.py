"""`triage postmortem`: the click command. The work is in the package; this parses and reports."""
from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import BadInput
from ..output import echo


@click.command()
@click.argument("incident", type=click.Path())      # a missing one is bad input (exit 1), as for timeline
@click.option("-o", "--output", metavar="FILE",
              help="Where to write the markdown (default INCIDENT/postmortem.md; a directory: postmortem.md in it; "
                   "DIR/ with a trailing slash is always a folder, created when absent; - for stdout, without the "
                   "chart). The chart goes beside it as <name>-memory.svg.")
@click.option("--template", metavar="FILE|NAME",
              help="google (default, Google SRE style), atlassian, or a Jinja2 template file "
                   "(checked before use; variables in templates/README.md).")
@click.option("--now", "now_text", metavar="TIME",
              help="The 'generated' time printed in the document (ISO 8601, UTC unless it has a zone). Default: the "
                   "incident's resolution time, else incident.yaml created, so a rebuild is byte-identical.")
def postmortem(incident: str, output: str | None, template: str | None, now_text: str | None) -> None:
    """Write the postmortem for INCIDENT: Markdown from the verdict, timeline, audit log and notes.

    Secrets and request prompts are masked; files are written atomically.
    """
    from . import DEFAULT_NAME, check_output, default_output, render_postmortem, write_postmortem
    from ..timeref import parse_iso

    if output is not None and not output.strip():
        raise click.BadParameter("empty file name (give a file, a directory, or - for stdout)", param_hint="-o")

    now = None
    if now_text is not None:
        now = parse_iso(now_text)
        if now is None:
            raise BadInput("--now", f"{now_text!r} is not an ISO 8601 time (e.g. 2026-03-12T15:00:00Z)")
    from ..packed import is_packed, stem, unpacked

    if not os.path.lexists(incident):
        raise BadInput(incident, "no such incident directory")

    to_stdout = output == "-"
    # a packed bundle stays as it is: the postmortem goes beside it (INCIDENT-postmortem.md)
    beside = Path(incident).with_name(f"{stem(incident)}-{DEFAULT_NAME}") if is_packed(incident) else None
    if beside is None and not Path(incident).is_dir():
        raise BadInput(incident, "not an incident directory (nor a packed bundle)")
    target = None if to_stdout else Path(output) if output else beside or default_output(incident)
    folder = None                                  # a folder to create once the postmortem is rendered
    if target is not None and output is not None and output.endswith(("/", os.sep)):
        # `-o DIR/` names a folder, whether or not it exists yet: never a file called DIR.
        folder = _new_folder(Path(output)) if not target.is_dir() else None
        target = target / DEFAULT_NAME
    elif target is not None and target.is_dir():
        target = target / DEFAULT_NAME
    if target is not None and folder is None:
        check_output(target)                       # before the bundle is read: fail fast, write nothing
    pm = render_postmortem(unpacked(incident), template=template, now=now, output=target)
    if target is None:
        echo(pm.markdown, nl=False)
        return
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(str(folder), f"cannot create the output folder: {exc.strerror or exc}") from None
        echo(f"created {folder}/")
    for path in write_postmortem(pm, target):
        echo(f"wrote {path}")


def _new_folder(folder: Path) -> Path:
    """`folder` (absent) when it can be created; else BadInput naming why, before anything is read."""
    ancestor = folder
    while not ancestor.exists():
        if ancestor.is_symlink():
            raise BadInput(str(ancestor), "a dangling symbolic link: -o DIR/ would not be created there")
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise BadInput(str(ancestor), f"exists and is not a directory: cannot create the output folder {folder}/")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise BadInput(str(ancestor), f"not writable: cannot create the output folder {folder}/")
    return folder
