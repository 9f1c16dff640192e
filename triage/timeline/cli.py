"""`triage note` and `triage timeline`: the click face of the timeline.

Only click is imported here; the timeline (and pandas) load when a command runs. Registered in
triage/cli.py next to the simulator.
"""
from __future__ import annotations

import click

from .model import MOMENT_NAMES


@click.command(name="note")
@click.argument("incident")
@click.argument("text")
@click.option("--at", "at", metavar="TIME",
              help="When it happened: 14:19, 14:19:30 (on the incident's date), 2026-03-12 14:19 "
                   "(incident zone), or ISO 8601 with Z / an offset. Default: now.")
@click.option("--moment", type=click.Choice(MOMENT_NAMES), metavar="NAME",
              help=f"This note sets a key moment by hand ({', '.join(MOMENT_NAMES)}).")
@click.option("--author", metavar="NAME", help="Who noted it (default: the current user).")
def note(incident: str, text: str, at: str | None, moment: str | None, author: str | None) -> None:
    """Append a note to INCIDENT/notes.jsonl (a timeline entry; secrets are masked)."""
    from ..output import echo, wrap_plain
    from ..redact import mask_text
    from .incident import load_incident
    from .notes import append_note

    record = append_note(incident, text, at=at, moment=moment, author=author)
    broken = load_incident(incident, strict=False).yaml_error
    if broken:       # the note is kept; the rest of the tooling needs the file fixed
        echo(f"triage: warning: {broken}", err=True)
    marks = f" (sets {record['moment']})" if record.get("moment") else ""
    # Wrapped to the output width (triage.output.output_width) with a hanging indent; masked whole first.
    echo(wrap_plain(mask_text(f"noted at {record['time']}{marks}: {record['text']}"), indent=2))
    if record.get("at_note"):
        echo(wrap_plain(mask_text(f"  --at {record['at_note']}"), indent=4))


@click.command(name="timeline")
@click.argument("incident")
@click.option("--json", "as_json", is_flag=True, help="Print the triage.timeline/v1 JSON object.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the events as CSV (one row per event, UTC).")
def timeline(incident: str, as_json: bool, as_csv: bool) -> None:
    """The incident's timeline from every source in INCIDENT: events, key moments, TTD/TTR/TTM.

    Problems (events out of order, corrupt notes or audit lines) and missing parts are listed,
    never silently dropped.
    """
    from ..output import echo, echo_json
    from ..packed import unpacked
    from .build import build_timeline

    if as_json and as_csv:
        raise click.UsageError("--json and --csv are exclusive")
    tl = build_timeline(unpacked(incident))
    if as_json:
        from .render import to_json

        echo_json(to_json(tl), indent=2, ensure_ascii=False)
    elif as_csv:
        from .render import to_csv

        echo(to_csv(tl), nl=False)
    else:
        from .render import render_timeline

        render_timeline(tl)
        return
    for problem in tl.problems:      # machine output stays clean; people still hear about it
        echo(f"triage: warning: {problem}", err=True)
