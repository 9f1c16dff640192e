"""Human output of `triage eval`: the cases, a per-class and a per-engine table, the headline figures."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from .console import Console, flow, hang
from .evaluate import CONFIDENT, ENGINE_TABLE_MIN, UNDECIDED, EvalReport


def render_eval(report: EvalReport, *, verbose: bool = False, console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    if verbose:
        _render_cases(out, report)
    # Titles are lines of their own, not table titles: rich wraps a title to the table's width
    # and pads it with blanks.
    out.print(f"[bold]Per class ({report.total} cases)[/bold]")
    table = Table()
    for col in ("class", "n", "precision", "recall"):
        table.add_column(col, justify="right" if col != "class" else "left", no_wrap=True, overflow="fold")
    for cls, row in report.per_class().items():
        if cls == UNDECIDED:
            continue
        table.add_row(cls, str(row["support"]), _pct(row["precision"]), _pct(row["recall"]))
    out.print(table)
    out.print("[bold]Per engine family[/bold] (exact on in-scope, log-sufficient cases)")
    engines = Table()
    for col in ("engine", "cases", "scored", "exact", "acceptable"):
        engines.add_column(col, justify="right" if col != "engine" else "left", no_wrap=True, overflow="fold")
    for engine, row in report.per_engine().items():
        exact = _pct(row["exact"]) + ("" if row["held_to_target"] else " *")
        engines.add_row(engine, str(row["cases"]), str(row["scored"]), exact, _pct(row["acceptable"]))
    out.print(engines)
    out.print("[bold]Reliability[/bold] (named classes by confidence: how often right)")
    reliable = Table()
    for col in ("confidence", "named", "right", "right share", "mean confidence"):
        reliable.add_column(col, justify="right" if col != "confidence" else "left", no_wrap=True, overflow="fold")
    for row in report.reliability():
        if row["n"]:
            reliable.add_row(row["bin"], str(row["n"]), str(row["right"]), _pct(row["right_share"]),
                             f"{row['mean_confidence']:.2f}")
    out.print(reliable)
    unknowns = [c for c in report.cases if c.answer == UNDECIDED]
    # One statement per line, wrapped with a hanging indent; a figure stays with its label.
    for line in (f"* fewer than {ENGINE_TABLE_MIN} scored cases: listed, not held to the per-engine target",
                 f"answered unknown: {len(unknowns)} ({sum(c.acceptable for c in unknowns)} on cases marked "
                 "insufficient, where unknown is an acceptable answer)",
                 f"exact on in-scope, log-sufficient cases: {_pct(report.scored_accuracy)} of {len(report.scored)}"):
        hang(out, line, 2, first="")
    flow(out, [f"accuracy (exact label, all cases): {_pct(report.accuracy)}",
               f"acceptable (label, or unknown where insufficient): {_pct(report.acceptable_rate)}"],
         indent=2, sep="   ")
    flow(out, [f"GPU/not-GPU misroutes: {report.misroutes}", f"false alarms on healthy logs: {report.false_alarms}",
               f"confident wrong answers (confidence >= {CONFIDENT:g}): {report.wrong} (wrong at any confidence: "
               f"{report.wrong_any})"], indent=2, sep="   ")


def _render_cases(out: Console, report: EvalReport) -> None:
    """Every case on a line of aligned columns; where long case names would make the lines wider
    than the console, each name on a line of its own and its columns under it (a table squeezed
    the names behind an ellipsis)."""
    out.print("[bold]Cases[/bold]")
    rows = [(c.name, c.engine, c.label, c.answer, f"{c.confidence:.2f}",
             Text("ok", style="green") if c.correct else
             Text("allowed", style="yellow") if c.acceptable else Text("WRONG", style="red"))   # an allowed unknown
            for c in report.cases]
    head = ("case", "engine", "label", "answer", "conf", "ok")
    widths = [max([len(head[i])] + [len(str(r[i])) for r in rows]) for i in range(5)] + [len("allowed")]
    one_line = 2 + sum(widths) + 2 * (len(widths) - 1) <= out.width

    def cells(row, style=""):
        return [Text(str(v).rjust(w) if i == 4 else str(v).ljust(w), style=style) if isinstance(v, str) else v
                for i, (v, w) in enumerate(zip(row, widths))]

    for row, style in [(head, "bold"), *((r, "") for r in rows)]:
        if one_line:
            flow(out, cells(row, style), first="  ", indent=6)
        else:
            flow(out, [Text(row[0], style=style or "bold")], first="  ", indent=6)
            flow(out, cells(row, style)[1:], first="      ", indent=6)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"
