"""Human output with rich: the verdict, the walk, the evidence, the changes to make.

The only module (besides the CLI's progress bar) that imports rich, and only when a human is
reading: `--json` never loads it. Everything printed is masked (`triage.redact`) before rich lays
it out, so a wrapped line never splits a secret into pieces no pattern recognises.
"""
from __future__ import annotations

from typing import Any

import rich.console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .model import EvidenceSet, Verdict
from .paths import runbooks_dir
from .redact import mask_text, redact_output
from .report import iso, same_fact


class Console(rich.console.Console):
    """rich's Console, except that
    * everything printed is masked first: text, markup, and the cells and titles of tables and
      panels;
    * a closed pipe (`triage classify ... | head`) raises BrokenPipeError, which the CLI turns
      into the SIGPIPE exit status, instead of rich's own SystemExit(1), which would read as
      "bad input"."""

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

_COLOURS = {"startup": "yellow", "burst": "red", "chronic": "magenta", "prefix_cache": "cyan",
            "not_gpu_oom": "blue", "no_oom": "green", "unknown": "white"}


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
        _item(out, f"{i}.", Text.from_markup(f"{escape(step.question)} [bold]{escape(step.answer)}[/bold] — "
                                             f"{escape(step.why)}{cites}"))
    refs.cite(verdict.evidence)

    if verdict.causes:
        out.print("\n[bold]Causes[/bold]")
        for c in verdict.causes:
            detail = f": {escape(c.detail)}" if c.detail else ""
            _item(out, "•", Text.from_markup(f"[{colour}]{escape(c.id)}[/{colour}] {escape(c.title)}{detail}"
                                             f"{refs.cite(c.evidence)}"))

    if refs.items:
        out.print("\n[bold]Evidence[/bold]")
        for n, e in enumerate(refs.items, 1):
            when = (iso(e.time) or "").replace("T", " ").rstrip("Z")
            out.print(f"  [dim][{n}][/dim] [bold]{escape(e.where)}[/bold]  {when}  [{colour}]{e.kind}[/{colour}]")
            _hang(out, "", Text(_short(e.text), style="dim"), 6)

    if verdict.recommendations:
        # A list, not a table: the reason is a sentence, and a four-column table squeezes it
        # into a two-character column on an 80-column terminal (or a pager, or a CI log).
        out.print("\n[bold]Recommended changes[/bold]")
        for r in verdict.recommendations:
            out.print(Text.assemble("  • ", (r.setting + (" (env)" if r.env else ""), "bold"),
                                    f": {_v(r.from_value)} → ", (_v(r.to_value), "bold"),
                                    (f"  [{r.basis.replace('_', ' ')}]", "dim")))
            _hang(out, "", Text(r.why), 6)
    if verdict.command:
        out.print("[bold]New command[/bold]")
        out.print(Text("  " + verdict.command, style="bold"))
    elif verdict.recommendations:
        out.print("[dim]No launch command in the evidence: apply the changes above to your own command "
                  "(attach the 'non-default args' line or the command to get it rewritten).[/dim]")
    if verdict.runbook and (runbooks_dir() / f"{verdict.runbook}.yaml").exists():
        out.print(f"[bold]Runbook[/bold]  {verdict.runbook}")
    if verdict.attach:
        out.print("\n[bold]To settle it, attach[/bold]")
        for a in verdict.attach:
            _item(out, "•", Text(a))
    sources = redact_output(evidence.sources)
    notes = [s.time_note for s in sources if s.time_note]
    if notes:
        out.print()
        _hang(out, "", Text(f"Times: {notes[0]}. Inputs: "
                            + ", ".join(f"{s.path} ({s.kind}, {s.records})" for s in sources), style="dim"), 0)
    if explain:
        _explain(out, evidence)


def render_plan(plan, console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    v = plan.verdict
    out.print(Panel(Text.assemble((f" {v.oom_class.value.upper()} ", "bold black on white"),
                                  f"  {v.confidence:.2f}  ", v.summary),
                    title=f"recovery plan: runbook {plan.runbook.id} (dry run: nothing will be changed)"))
    out.print(Text(plan.runbook.summary.strip(), style="dim"))
    for note in plan.notes:
        out.print(Text(f"note: {note}", style="yellow"))
    for ps in plan.steps:
        s = ps.step
        out.print(Text.assemble((f"\n{ps.number}. {s.title}", "bold"),
                                f"  [{s.action}, timeout {s.timeout_s:.0f} s, on failure: {s.on_failure}]"))
        for line in ps.details:
            out.print(Text("     " + line))
        out.print(Text(f"     verified by: {s.verify}", style="dim"))


def _item(out: Console, mark: str, body: Text) -> None:
    """`  mark body`, the body's wrapped lines aligned under its first word."""
    prefix = f"  {mark} "
    _hang(out, prefix, body, len(prefix))


def _hang(out: Console, prefix: str, body: Text, indent: int) -> None:
    """`prefix` then `body` wrapped to the console, every line after the first indented by
    `indent` (a hanging indent), with no padding at the ends of lines: output piped to a file or
    pasted into a ticket has no trailing blanks."""
    for n, line in enumerate(body.wrap(out, max(20, out.width - indent), overflow="fold")):
        line.rstrip()
        out.print(Text(prefix.ljust(indent) if n == 0 else " " * indent) + line, soft_wrap=True)


def _explain(out: Console, evidence: EvidenceSet) -> None:
    # One block per record rather than a table: the fields are long, and a table column of them
    # wraps mid-number at 80 columns. Fields wrap between "key=value" items.
    out.print("\n[bold]Every record read[/bold]")
    for e in evidence:
        out.print(Text.assemble("  ", (mask_text(e.where), "bold"), f"  {iso(e.time) or '—'}  ", (e.kind, "cyan")))
        fields = [f"{k}={v}" for k, v in redact_output(dict(e.fields)).items()
                  if k not in ("frames", "args") and v is not None]
        line = mask_text("  ".join(fields))         # masked whole, then cut
        _hang(out, "", Text(line if len(line) <= 800 else line[:799] + "…", style="dim"), 6)


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
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _v(value) -> str:
    return "—" if value is None else str(value)


class RecoverConsole:
    """Progress of `triage recover --execute` on stderr; the closing summary on stdout."""

    _STYLE = {"ok": "green", "skipped": "yellow", "failed": "red", "timeout": "red", "aborted": "red",
              "not run": "yellow"}

    def __init__(self, quiet: bool = False) -> None:
        self.err = Console(stderr=True, highlight=False)
        self.out = Console(highlight=False)
        self.quiet = quiet
        self.total = 0

    def say(self, line: str) -> None:
        self.err.print(Text(line))

    def header(self, plan) -> None:
        v = plan.verdict
        self.total = len(plan.steps)
        self.err.print(Panel(Text.assemble((f" {v.oom_class.value.upper()} ", "bold black on white"),
                                           f"  {v.confidence:.2f}  ", v.summary),
                             title=f"recovery: runbook {plan.runbook.id} (EXECUTING)"))
        for note in plan.notes:
            self.say(f"note: {note}")

    def step(self, ps) -> None:
        s = ps.step
        self.err.print(Text.assemble((f"\n[{ps.number}/{self.total}] {s.title}", "bold"),
                                     f"  [{s.action}, timeout {s.timeout_s:.0f} s, on failure: {s.on_failure}]"))
        for line in ps.details:
            self.err.print(Text("     " + line, style="dim"))

    def result(self, r) -> None:
        style = self._STYLE.get(r.result, "white")
        self.err.print(Text.assemble(("  -> ", ""), (r.result.upper(), f"bold {style}")))
        for line in r.lines:
            self.err.print(Text("     " + line))
        if r.by_hand and r.result not in ("ok", "skipped"):
            self.err.print(Text("     by hand: " + r.by_hand, style="bold"))

    def report(self, report) -> None:
        if self.quiet:
            return
        done = ", ".join(f"{s.step_id} {s.result}" for s in report.steps) or "no step run"
        style = "green" if report.ok else "red"
        self.out.print(Text.assemble(("recovery " + report.result.upper(), f"bold {style}"),
                                     f"  run {report.run_id}, runbook {report.runbook}: {done}"))
        serving = any("serves again" in line for s in report.steps for line in s.lines)
        if serving:
            self.out.print(Text("the server serves: nothing was changed (use --force to run the plan anyway)",
                                style="dim"))
        elif not report.ok:
            self.out.print(Text("re-run the same command to resume after the last completed step; "
                                "`triage audit verify INCIDENT` checks the trail", style="dim"))
