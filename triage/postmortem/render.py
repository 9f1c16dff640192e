"""Jinja2 rendering: bundled or user templates, validated before use, written atomically.

The environment uses StrictUndefined, so a misspelt variable is an error and never a blank.
A user template is checked before rendering: its syntax, every top-level variable it reads,
and the first attribute under each (`impact.duration`, `incident.title`); deeper mistakes are
caught while rendering and reported with the template's line number.
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from pathlib import Path
from typing import Any, Iterable

from ..errors import BadInput, TriageError
from ..paths import templates_dir
from ..redact import mask_text
from . import views

BUNDLED = {"google": "postmortem-google.md.j2", "atlassian": "postmortem-atlassian.md.j2"}
DEFAULT = "google"
CITE_MAX = 3


class PostmortemError(TriageError):
    """A template that cannot be used, or an output that cannot be written."""


@dataclasses.dataclass(frozen=True)
class Template:
    search: tuple[Path, ...]          # loader path: the template's own directory, then the bundled one
    name: str                         # name inside the loader
    shown: str                        # how errors name it


def resolve_template(spec: str | os.PathLike[str] | None) -> Template:
    """None or a bundled name (`google`, `atlassian`) -> a bundled template; anything else is a file."""
    bundled = templates_dir()
    key = str(spec) if spec is not None else DEFAULT
    if key in BUNDLED:
        return Template((bundled,), BUNDLED[key], f"templates/{BUNDLED[key]}")
    path = Path(key)
    if not path.is_file():
        raise PostmortemError(f"{path}: no such template file (or give one of: {', '.join(BUNDLED)})")
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PostmortemError(f"{path}: template is not UTF-8 text") from None
    except OSError as exc:
        raise PostmortemError(f"{path}: cannot read template: {exc.strerror or exc}") from None
    return Template((path.resolve().parent, bundled), path.name, str(path))


def environment(search: Iterable[Path]):
    import jinja2   # only postmortems need it
    from jinja2.sandbox import SandboxedEnvironment

    # Sandboxed: a template passed around a team can read the context, not Python's internals.
    env = SandboxedEnvironment(loader=jinja2.FileSystemLoader([str(p) for p in search]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(cite=cite, refs=refs, cell=cell, code=code, ucfirst=ucfirst)
    return env


def validate(template: Template) -> None:
    """Syntax, top-level variables, and first-level attributes, before anything is rendered."""
    import jinja2
    from jinja2 import meta, nodes

    env = environment(template.search)
    try:
        source = env.loader.get_source(env, template.name)[0]
        tree = env.parse(source, template.name)
        # Compiling finds what parsing does not: an unknown filter or test (`| cites`), a misplaced
        # `{% break %}`. TemplateAssertionError is a TemplateSyntaxError.
        undeclared = meta.find_undeclared_variables(tree)
    except jinja2.TemplateSyntaxError as exc:
        raise PostmortemError(f"{template.shown}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.TemplateNotFound as exc:
        raise PostmortemError(f"{template.shown}: template not found: {exc.name}") from None
    for node in tree.find_all(nodes.Test):             # compiled lazily by jinja: found here, not mid-render
        if node.name not in env.tests:
            raise PostmortemError(f"{template.shown}:{node.lineno}: template syntax error: "
                                  f"no test named {node.name!r}")
    known = {f.name for f in dataclasses.fields(views.Context)}
    unknown = sorted(undeclared - known - set(env.globals))
    if unknown:
        raise PostmortemError(f"{template.shown}: unknown variable(s) {', '.join(unknown)} (the variables are: "
                              f"{', '.join(sorted(known))}; see templates/README.md)")
    hints = typing.get_type_hints(views.Context)
    for node in tree.find_all(nodes.Getattr):
        if isinstance(node.node, nodes.Name) and node.node.name in known:
            owner = hints[node.node.name]
            if dataclasses.is_dataclass(owner) and node.attr not in {f.name for f in dataclasses.fields(owner)}:
                fields = ", ".join(f.name for f in dataclasses.fields(owner))
                raise PostmortemError(f"{template.shown}:{node.lineno}: {node.node.name} has no field "
                                      f"{node.attr!r} (it has: {fields})")


def render(context: views.Context, template: Template) -> str:
    import jinja2

    validate(template)
    env = environment(template.search)
    try:
        text = env.get_template(template.name).render(**context.as_mapping())
        return re.sub(r"\n{3,}", "\n\n", text)       # macros and loops leave runs of blank lines
    except jinja2.TemplateError as exc:
        line = _template_line(exc, template)
        where = f"{template.shown}:{line}" if line else template.shown
        raise PostmortemError(f"{where}: {type(exc).__name__}: {exc}") from None


def _template_line(exc: BaseException, template: Template) -> int | None:
    """Jinja rewrites tracebacks so template frames carry template line numbers."""
    line = getattr(exc, "lineno", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(template.name):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


# -- filters --------------------------------------------------------------------------------------

def cite(sources: Iterable[str] | None, limit: int = CITE_MAX) -> str:
    """` (`a:1`, `b:2` +3 more)`; empty when there is nothing to cite."""
    items = list(dict.fromkeys(s for s in (sources or ()) if s))
    if not items:
        return ""
    shown = ", ".join(code(s) for s in items[:limit])
    more = f" +{len(items) - limit} more" if len(items) > limit else ""
    return f" ({shown}{more})"


def refs(sources: Iterable[str] | None, limit: int = CITE_MAX) -> str:
    """`a:1`, `b:2` +3 more — for a table column of its own."""
    return cite(sources, limit)[2:-1]


def ucfirst(value: Any) -> str:
    """Capitalise the first letter only (jinja's `capitalize` lowercases the rest: 'Oom')."""
    text = str(value)
    return text[:1].upper() + text[1:]


def cell(value: Any) -> str:
    """Safe inside a Markdown table cell: one line, pipes escaped."""
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def code(value: Any) -> str:
    """Inline code that survives backticks inside the value."""
    text = " ".join(str(value).split())
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# -- writing --------------------------------------------------------------------------------------

def write_atomic(path: Path, text: str) -> None:
    """Write beside the target, fsync, then rename over it: a reader sees the old file or the new one.
    The text is masked on the way (`triage.redact`), whoever rendered it. The directory is held open
    for both steps (`safedir.py`): swapping it, or a folder above it, for a link between the two
    cannot move the write elsewhere, and a link planted as the target is replaced, not followed."""
    from ..safedir import HeldDir

    text = mask_text(text)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise PostmortemError(f"{directory}: output directory does not exist")
    mode = _mode_for(path)
    try:
        with HeldDir.open(directory, follow=True) as held:
            held.write_atomic(path.name, text.encode("utf-8"), mode)
    except BadInput as exc:
        raise PostmortemError(f"{path}: cannot write: {exc.problem}") from None


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
