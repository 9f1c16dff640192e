"""`triage postmortem`: an incident bundle -> a Markdown postmortem and a GPU-memory chart beside it.

    pm = render_postmortem("samples/incident-a-multimodal-fleet", now=None)
    write_postmortem(pm, Path("samples/incident-a-multimodal-fleet/postmortem.md"))

The document comes from the verdict (classify), the timeline (moments, TTD/TTM, events), the
audit log (recovery steps) and the notes; `templates/` holds the Jinja2 templates (Google SRE
style by default, Atlassian style as `atlassian`). Rendering reads no clock: `now` is the
"generated" time, and without it the timeline's resolution time (see context.py). Output is
redacted (secrets, request prompts) and written atomically.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import BadInput
from ..redact import redact_output

DEFAULT_NAME = "postmortem.md"


@dataclass(frozen=True)
class Postmortem:
    markdown: str
    chart_svg: str | None             # None: no readings to draw, or the markdown goes to stdout
    chart_name: str | None            # the chart's file name, beside the markdown
    context: object                   # the views.Context it was rendered from


def chart_name_for(output: Path) -> str:
    return f"{output.stem}-memory.svg"


def default_output(incident: str | Path) -> Path:
    return Path(incident) / DEFAULT_NAME


def render_postmortem(incident: str | Path, *, template: str | None = None, now: datetime | None = None,
                      output: Path | None = None, inputs=None) -> Postmortem:
    """`output`: where the markdown will be written (its chart goes beside it); None: stdout, no chart."""
    from .context import build_context, load_inputs
    from .render import render, resolve_template, validate

    chosen = resolve_template(template)
    validate(chosen)                                  # a bad template fails before any reading
    if inputs is None:
        bundle = Path(incident)
        if not bundle.is_dir():
            raise BadInput(str(incident), "not an incident directory")
        inputs = load_inputs(bundle)
    chart_name = chart_name_for(output) if output is not None else None
    context, chart = build_context(inputs, now=now, chart_link=chart_name)
    markdown = redact_output(render(context, chosen))  # a last pass: literal text in a user template too
    svg = redact_output(chart.svg) if chart.svg is not None and chart_name else None
    return Postmortem(markdown, svg, chart_name if svg else None, context)


def check_output(output: Path) -> None:
    """Refuse a target that cannot be written before anything is: nothing is left half-way."""
    from .render import PostmortemError

    directory = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise PostmortemError(f"{output}: is a directory (give a file name, e.g. {output / DEFAULT_NAME})")
    if not directory.is_dir():
        raise PostmortemError(f"{directory}: output directory does not exist")


def write_postmortem(pm: Postmortem, output: Path) -> list[Path]:
    """The chart first, then the markdown that links it; each written atomically."""
    from .render import write_atomic

    check_output(output)
    written = []
    if pm.chart_svg is not None and pm.chart_name:
        chart = output.parent / pm.chart_name
        write_atomic(chart, pm.chart_svg)
        written.append(chart)
    write_atomic(output, pm.markdown)
    return [output] + written


__all__ = ["BUNDLED", "DEFAULT_NAME", "Postmortem", "PostmortemError", "chart_name_for", "check_output",
           "default_output", "render_postmortem", "write_postmortem"]


def __getattr__(name: str):
    # The template machinery (jinja2, the view classes) loads only when a postmortem is made:
    # `triage classify` imports this package's click command and must stay fast.
    if name in ("BUNDLED", "PostmortemError", "resolve_template", "validate", "write_atomic"):
        from . import render

        return getattr(render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
