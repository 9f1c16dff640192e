"""Human output with rich: the verdict, the walk, the evidence, the changes to make.

The only module (besides the CLI's progress bar) that imports rich, and only when a human is
reading: `--json` never loads it. Everything printed is masked (`triage.redact`) before rich lays
it out, so a wrapped line never splits a secret into pieces no pattern recognises.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Iterable

import rich.console
from rich.cells import cell_len
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .classes import registry
from .model import EvidenceSet, Verdict
from .output import output_width
from .paths import runbooks_dir
from .redact import mask_text, redact_output
from .report import iso, same_fact


class Console(rich.console.Console):
    """rich's Console, except that
    * everything printed is masked first: text, markup, and the cells and titles of tables and
      panels;
    * a closed pipe (`triage classify ... | head`) raises BrokenPipeError, which the CLI turns
      into the SIGPIPE exit status, instead of rich's own SystemExit(1), which would read as
      "bad input";
    * its width follows the one rule of `triage.output.output_width`: COLUMNS when set, else the
      terminal's width on a terminal, else 80 (a pipe, a file, a pager, a CI log) -- not the width
      of whichever other stream happens to be a terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("width") is None:
            stream = kwargs.get("file") or (sys.stderr if kwargs.get("stderr") else sys.stdout)
            kwargs["width"] = output_width(stream)
        super().__init__(*args, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(self._masked(o, kwargs) for o in objects), **kwargs)

    def _masked(self, item: Any, kwargs: dict[str, Any]) -> Any:
        if isinstance(item, str):
            if mask_text(item) == item:
                return item
            # Markup first, then mask the text it shows (a mask must not cut a tag in half).
            item = self.render_str(item, markup=kwargs.get("markup"), highlight=kwargs.get("highlight"),
                                   emoji=kwargs.get("emoji"))
        if isinstance(item, Text):
            return masked_text(item)
        if isinstance(item, Panel):
            item.renderable = self._masked(item.renderable, {})
            item.title = self._masked(item.title, {}) if item.title is not None else None
            return item
        if isinstance(item, Table):
            item.title = self._masked(item.title, {}) if item.title is not None else None
            for column in item.columns:
                column.header = self._masked(column.header, {})
                column._cells = [self._masked(cell, {}) for cell in column._cells]
            return item
        return item

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def masked_text(text: Text) -> Text:
    """`text` with secrets masked; unchanged (styles and all) when it holds none."""
    plain = mask_text(text.plain)
    if plain == text.plain:
        return text
    return Text(plain, style=text.style, justify=text.justify, overflow=text.overflow, no_wrap=text.no_wrap,
                end=text.end)

# The class's colour, as its spec gives it (watch's dashboard and the fleet table use the same).
_COLOURS = registry().colours()


def render_verdict(verdict: Verdict, evidence: EvidenceSet, *, explain: bool = False,
                   console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    verdict = redact_output(verdict)        # before any text is cut short or wrapped
    cls = verdict.oom_class.value
    colour = _COLOURS.get(cls, "white")
    head = Text.assemble((f" {cls.upper()} ", f"bold black on {colour}"),
                         (f"  confidence {verdict.confidence:.2f}", "bold"))
    out.print(Panel(Text.assemble(head, "\n", verdict.summary), title="triage verdict", border_style=colour))

    refs = _Refs()
    out.print("[bold]Flowchart[/bold]")
    for i, step in enumerate(verdict.path, 1):
        cites = refs.cite(step.evidence)
        item(out, f"{i}.", Text.from_markup(f"{escape(step.question)} [bold]{escape(step.answer)}[/bold] — "
                                            f"{escape(step.why)}{cites}"))
    refs.cite(verdict.evidence)

    if verdict.causes:
        out.print("\n[bold]Causes[/bold]")
        for c in verdict.causes:
            detail = f": {escape(c.detail)}" if c.detail else ""
            item(out, "•", Text.from_markup(f"[{colour}]{escape(c.id)}[/{colour}] {escape(c.title)}{detail}"
                                            f"{refs.cite(c.evidence)}"))

    if refs.items:
        out.print("\n[bold]Evidence[/bold]")
        for n, e in enumerate(refs.items, 1):
            when = (iso(e.time) or "").replace("T", " ").rstrip("Z")
            # The citation's parts wrap between each other, never inside a path or a time.
            flow(out, [Text(e.where, style="bold"), when, Text(e.kind, style=colour)],
                 first=Text.assemble("  ", (f"[{n}]", "dim"), " "), indent=6)
            hang(out, Text(_short(e.text), style="dim"), 6)

    if verdict.recommendations:
        # A list, not a table: the reason is a sentence, and a four-column table squeezes it
        # into a two-character column on an 80-column terminal (or a pager, or a CI log).
        out.print("\n[bold]Recommended changes[/bold]")
        for r in verdict.recommendations:
            tag = " (env)" if r.env else " (by hand)" if getattr(r, "manual", False) else ""
            flow(out, [Text.assemble((r.setting + tag, "bold"),
                                     f": {_v(r.from_value)} → ", (_v(r.to_value), "bold")),
                       Text(f"[{r.basis.replace('_', ' ')}]", style="dim")], first="  • ", indent=6)
            hang(out, Text(r.why), 6)
    if verdict.command:
        out.print("[bold]New command[/bold]")
        command(out, verdict.command, 4, first="  ", style="bold")
        _launch_notes(out, verdict)
    elif verdict.recommendations:
        hang(out, Text("No launch command in the evidence: apply the changes above to your own command "
                       "(attach the 'non-default args' line or the command to get it rewritten).", style="dim"), 0)
    if verdict.runbook and (runbooks_dir() / f"{verdict.runbook}.yaml").exists():
        out.print(f"[bold]Runbook[/bold]  {verdict.runbook}")
    if verdict.attach:
        out.print("\n[bold]To settle it, attach[/bold]")
        for a in verdict.attach:
            item(out, "•", Text(a))
    sources = redact_output(evidence.sources)
    notes = [s.time_note for s in sources if s.time_note]
    if notes:
        out.print()
        # An input and its (kind, records) stay on one line.
        inputs = [f"{s.path} ({s.kind}, {s.records})" for s in sources]
        flow(out, [Text(f"Times: {notes[0]}. Inputs:", style="dim"),
                   *(Text(i + ("," if n < len(inputs) else ""), style="dim") for n, i in enumerate(inputs, 1))],
             indent=0, sep=" ")
    if explain:
        _explain(out, evidence)


def _launch_notes(out: Console, verdict) -> None:
    """Where the command came from, and every argument it could not carry as logged."""
    from .advice import launch_changes

    launch = verdict.facts.get("launch") or {}
    changed = bool(launch_changes(verdict))
    if launch.get("source"):
        how = "only the changes above differ" if changed else "unchanged (the changes above are by hand)"
        hang(out, Text(f"every launch argument of {launch['source']} kept; {how}", style="dim"), 4, first="  ")
    for flag in launch.get("kept_as_written") or ():
        hang(out, Text(f"kept as written: {flag} (not in triage's flag table: check it)", style="dim"), 4, first="  ")
    for d in launch.get("dropped") or ():
        hang(out, Text(f"dropped: {d.get('arg')}: {d.get('why')}", style="yellow"), 4, first="  ")
    for need in launch.get("needs") or ():
        what = "the API key" if need.get("arg") == "api_key" else f"the value of {str(need.get('flag')).lstrip('-')}"
        hang(out, Text(f"needs: {what} (the log masks it): {need.get('how')} "
                       "(recovery refuses to relaunch without it)", style="yellow"), 4, first="  ")


def render_plan(plan, console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    v = plan.verdict
    out.print(Panel(Text.assemble((f" {v.oom_class.value.upper()} ", "bold black on white"),
                                  f"  {v.confidence:.2f}  ", v.summary),
                    title=f"recovery plan: runbook {plan.runbook.id} (dry run: nothing will be changed)"))
    hang(out, Text(plan.runbook.summary.strip(), style="dim"), 0)
    for note in plan.notes:
        hang(out, Text(note, style="yellow"), 6, first=Text("note: ", style="yellow"))
    manual = list(getattr(plan, "manual", ()))
    if manual:                 # said once for all of them, not once per change
        changes = "this change" if len(manual) == 1 else f"these {len(manual)} changes"
        hang(out, Text(f"by hand: a relaunch cannot make {changes}; do {'it' if len(manual) == 1 else 'them'} "
                       "separately", style="yellow"), 9, first="")
    for setting, old, new, why in manual:
        hang(out, Text(f"{setting}: {old} -> {new}: {why}", style="yellow"), 4, first="  • ")
    for ps in plan.steps:
        out.print()
        _step_head(out, f"{ps.number}. ", ps.step)
        for line in ps.details:
            _detail(out, line)
        _detail(out, f"verified by: {ps.step.verify}", style="dim")


def _step_head(out: Console, number: str, s) -> None:
    """`N. title  [action, timeout, on failure]`, wrapped under the title."""
    flow(out, [Text(s.title, style="bold"), f"[{s.action}, timeout {s.timeout_s:.0f} s, on failure: {s.on_failure}]"],
         first=Text(number, style="bold"), indent=len(number))


# A detail line's label, padded to the plan's value column ("new:     ", "runs as: ", "leave:  ").
_LABEL = re.compile(r"[a-z][a-z ]{0,10}: +")
_DETAIL_AT = 5          # detail lines start at this column, under the step's title
_COMMAND_LABELS = ("current:", "new:", "command:", "run:")    # their value is a shell command


def _detail(out: Console, line: str, style: str = "") -> None:
    """A step's detail line at column 5; wrapped lines hang under its value when it starts with a
    label (`new:     vllm serve ...`), else two columns in."""
    m = _LABEL.match(line)
    label = m.group(0) if m and (m.end() <= 9 or line.startswith("verified by: ")) else ""
    if label.rstrip() in _COMMAND_LABELS:
        command(out, line[len(label):], _DETAIL_AT + len(label), first=Text(" " * _DETAIL_AT + label, style=style),
                style=style)
        return
    hang(out, Text(line[len(label):], style=style), _DETAIL_AT + (len(label) or 2),
         first=Text(" " * _DETAIL_AT + label, style=style))


# -- layout: every line fits the console, wraps at spaces only, and keeps its hanging indent --------
#
# rich's own wrapping (a long `out.print(...)`, a table cell) starts continuation lines at column 0
# and a squeezed table column cuts paths, node names and numbers into pieces or behind an ellipsis.
# Everything below lays lines out itself: `flow` packs whole units (a path, a `key value` field, a
# word) onto lines no wider than the console, breaking only between units; a unit wider than a whole
# line is broken at its spaces, and only a single word wider than a line is folded (never cut).

def flow(out: Console, units: Iterable[Text | str], *, first: Text | str = "", indent: int = 2,
         sep: str = "  ") -> None:
    """`first` then `units`, `sep` apart, wrapped between units; continuation lines start at
    column `indent`. Each unit is masked whole before it is placed (a line break never splits a
    secret out of a pattern's sight). No line ends in blanks."""
    tokens = [(masked_text(Text(u) if isinstance(u, str) else u), sep) for u in units]
    _place(out, [t for t in tokens if t[0].plain], first, indent)


def hang(out: Console, body: Text | str, indent: int, first: Text | str | None = None,
         tail: Text | str | None = None) -> None:
    """`body` wrapped at its spaces, the first line after `first` (default: `indent` blanks), every
    later line indented by `indent`: a hanging indent. `tail` follows the body two spaces on and is
    kept whole ("×4, until 14:16:00")."""
    body = masked_text(Text(body) if isinstance(body, str) else body)
    tokens = _words(body)
    if tail is not None and str(tail):
        tail = masked_text(Text(tail) if isinstance(tail, str) else tail)
        if tokens:
            tokens[-1] = (tokens[-1][0], "  ")
        tokens.append((tail, ""))
    _place(out, tokens, " " * indent if first is None else first, indent)


# A shell word: runs of unquoted characters and quoted strings (a quote left open is a character).
_SHELL_WORD = re.compile(r"""(?:[^\s'"]+|'[^']*'|"(?:[^"\\]|\\.)*"|['"])+""")


def command(out: Console, cmd: str, indent: int, first: Text | str = "", style: str = "") -> None:
    """A shell command wrapped between its words with a hanging indent, an option kept on the same
    line as its value (`--max-model-len 8192`, never `--max-model-len` / `8192`)."""
    words = _SHELL_WORD.findall(mask_text(cmd))
    units: list[str] = []
    for word in words:
        if units and units[-1].startswith("-") and " " not in units[-1] and "=" not in units[-1] \
                and not word.startswith("-"):
            units[-1] += " " + word
        else:
            units.append(word)
    flow(out, [Text(u, style=style) for u in units], first=first, indent=indent, sep=" ")


def item(out: Console, mark: str, body: Text | str) -> None:
    """`  mark body`, the body's wrapped lines aligned under its first word."""
    prefix = f"  {mark} "
    hang(out, body, len(prefix), prefix)


# A number and the unit after it ("30 s", "79.35 GiB") are one word for wrapping.
MAX_WORD_CHARS = 4000           # one unbroken word shown in full up to this many characters
_WORD = re.compile(r"((?:[(\[]?[-+]?\d[\d.,]*\s+(?:ms|s|min|h|[KMGT]i?B|B|%)(?=[\s,;:.)\]]|$)[,;:.)\]]*)|\S+)(\s*)")


def _words(text: Text) -> list[tuple[Text, str]]:
    """(word, the blanks after it) for each run of non-blanks in `text`, styles kept. The text is
    divided once at every word's ends (slicing it word by word costs the whole text each time)."""
    matches = list(_WORD.finditer(text.plain))
    if not matches:
        return []
    pieces = text.divide([at for m in matches for at in (m.start(1), m.end(1))])
    return [(pieces[2 * i + 1], m.group(2)) for i, m in enumerate(matches)]


def _place(out: Console, tokens: list[tuple[Text, str]], first: Text | str, indent: int) -> None:
    width = max(out.width, indent + 20)
    lines: list[Text] = []
    line = Text(first) if isinstance(first, str) else first.copy()
    empty = True                # nothing placed after `first` / the indent yet
    gap = ""

    def fits(unit: Text) -> bool:
        return "\n" not in unit.plain and line.cell_len + (0 if empty else len(gap)) + unit.cell_len <= width

    def new_line() -> None:
        nonlocal line, empty
        lines.append(line)
        line, empty = Text(" " * indent), True

    def fold(unit: Text) -> None:
        nonlocal line
        if len(unit.plain) > MAX_WORD_CHARS:        # a blob, not a word: its head, and how much more
            unit = unit[:MAX_WORD_CHARS] + Text(f"… ({len(unit.plain) - MAX_WORD_CHARS:,} characters more; "
                                                "--json has all of it)")
        cuts, at, room = [], 0, width - line.cell_len
        plain = unit.plain
        while room > 0 and cell_len(plain[at:]) > room:
            n = room
            while n > 1 and cell_len(plain[at:at + n]) > room:     # wide characters take two columns
                n -= 1
            at += n
            cuts.append(at)
            room = width - indent
        pieces = unit.divide(cuts)                  # one pass over the text, however many lines
        for piece in pieces[:-1]:
            line.append_text(piece)
            new_line()
        line.append_text(pieces[-1])

    def pack(units: list[tuple[Text, str]]) -> None:
        nonlocal gap, empty
        for unit, after in units:
            if not empty and ("\n" in gap or not fits(unit)):
                new_line()           # (a line break in the text itself is kept, at the indent)
            if fits(unit):
                if not empty:
                    line.append(gap)
                line.append_text(unit)
                empty = False
            elif len(words := _words(unit)) > 1 or "\n" in unit.plain:
                pack(words)          # wider than a whole line: break it at its own spaces
            else:                    # one word wider than a line: fold it, never cut it
                fold(unit)
                empty = False
            gap = "\n" if "\n" in after else " " * len(after)

    pack(tokens)
    lines.append(line)
    for text in lines:
        text.rstrip()
        out.print(text, soft_wrap=True)


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a space, ending in `…`: an excerpt never ends
    inside a number, a path or a name (a hard cut only for one word longer than half the limit)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    if cut < limit // 2:
        cut = limit - 1
    return text[:cut].rstrip() + "…"


def _explain(out: Console, evidence: EvidenceSet) -> None:
    # One block per record rather than a table: the fields are long, and a table column of them
    # wraps mid-number at 80 columns. Fields wrap between "key=value" items.
    out.print("\n[bold]Every record read[/bold]")
    for e in evidence:
        flow(out, [Text(mask_text(e.where), style="bold"), iso(e.time) or "—", Text(e.kind, style="cyan")],
             first="  ", indent=6)
        fields = [f"{k}={v}" for k, v in redact_output(dict(e.fields)).items()
                  if k not in ("frames", "args") and v is not None]
        line = mask_text("  ".join(fields))         # masked whole, then cut
        hang(out, Text(shorten(line, 800), style="dim"), 6)


class _Refs:
    """Numbers evidence records in order of first citation."""

    def __init__(self) -> None:
        self.items: list = []
        self._index: dict[tuple, int] = {}

    def cite(self, evidence) -> str:
        nums = []
        for e in evidence:
            key = same_fact(e)
            if key not in self._index:
                self.items.append(e)
                self._index[key] = len(self.items)
            nums.append(self._index[key])
        return f" [dim][{', '.join(map(str, dict.fromkeys(nums)))}][/dim]" if nums else ""


def _short(text: str, limit: int = 220) -> str:
    return shorten(text, limit)


def _v(value) -> str:
    return "—" if value is None else str(value)


class RecoverConsole:
    """Progress of `triage recover --execute` on stderr; the closing summary on stdout."""

    _STYLE = {"ok": "green", "skipped": "yellow", "failed": "red", "timeout": "red", "aborted": "red",
              "not run": "yellow", "handed": "yellow"}

    def __init__(self, quiet: bool = False) -> None:
        self.err = Console(stderr=True, highlight=False)
        self.out = Console(highlight=False)
        self.quiet = quiet
        self.total = 0

    def say(self, line: str) -> None:
        hang(self.err, line, 2, first="")

    def header(self, plan) -> None:
        v = plan.verdict
        self.total = len(plan.steps)
        self.err.print(Panel(Text.assemble((f" {v.oom_class.value.upper()} ", "bold black on white"),
                                           f"  {v.confidence:.2f}  ", v.summary),
                             title=f"recovery: runbook {plan.runbook.id} (EXECUTING)"))
        for note in plan.notes:
            hang(self.err, note, 6, first="note: ")

    def step(self, ps) -> None:
        self.err.print()
        _step_head(self.err, f"[{ps.number}/{self.total}] ", ps.step)
        for line in ps.details:
            _detail(self.err, line, style="dim")

    def result(self, r) -> None:
        style = self._STYLE.get(r.result, "white")
        self.err.print(Text.assemble(("  -> ", ""), (r.result.upper(), f"bold {style}")))
        for line in r.lines:
            _detail(self.err, line)
        if r.by_hand and r.result not in ("ok", "skipped"):
            _detail(self.err, "by hand: " + r.by_hand, style="bold")

    def report(self, report) -> None:
        if self.quiet:
            return
        done = ", ".join(f"{s.step_id} {s.result}" for s in report.steps) or "no step run"
        style = "green" if report.ok else "red"
        hang(self.out, Text.assemble(("recovery " + report.result.upper(), f"bold {style}"),
                                     f"  run {report.run_id}, runbook {report.runbook}: {done}"), 2, first="")
        for s in report.steps:
            if s.result == "handed" and s.by_hand:    # done by nobody yet: said again where it is read last
                hang(self.out, Text(f"open, for a person: {s.step_id}: {s.by_hand}", style="yellow"), 4, first="  ")
        serving = any("serves again" in line for s in report.steps for line in s.lines)
        if serving:
            hang(self.out, Text("the server serves: nothing was changed (use --force to run the plan anyway)",
                                style="dim"), 2, first="")
        elif not report.ok:
            hang(self.out, Text("re-run the same command to resume after the last completed step; "
                                "`triage audit verify INCIDENT` checks the trail", style="dim"), 2, first="")
