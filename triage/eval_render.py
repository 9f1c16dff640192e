"""Human output of `triage eval`: the cases, a per-class and a per-engine table, the headline figures."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .evaluate import ENGINE_TABLE_MIN, EvalReport


def render_eval(report: EvalReport, *, verbose: bool = False, console: Console | None = None) -> None:
    out = console or Console(highlight=False)
    if verbose:
        cases = Table(title="Cases", title_justify="left")
        for col in ("case", "engine", "label", "answer", "conf", "ok"):
            cases.add_column(col)
        for c in report.cases:
            ok = "[green]ok[/green]" if c.correct else (
                "[yellow]unknown (allowed)[/yellow]" if c.acceptable else "[red]WRONG[/red]")
            cases.add_row(c.name, c.engine, c.label, c.answer, f"{c.confidence:.2f}", ok)
        out.print(cases)
    table = Table(title=f"Per class ({report.total} cases)", title_justify="left")
    for col in ("class", "n", "precision", "recall"):
        table.add_column(col, justify="right" if col != "class" else "left")
    for cls, row in report.per_class().items():
        if cls == "unknown":
            continue
        table.add_row(cls, str(row["support"]), _pct(row["precision"]), _pct(row["recall"]))
    out.print(table)
    engines = Table(title="Per engine family (exact on in-scope, log-sufficient cases)", title_justify="left")
    for col in ("engine", "cases", "scored", "exact", "acceptable"):
        engines.add_column(col, justify="right" if col != "engine" else "left")
    for engine, row in report.per_engine().items():
        exact = _pct(row["exact"]) + ("" if row["held_to_target"] else " *")
        engines.add_row(engine, str(row["cases"]), str(row["scored"]), exact, _pct(row["acceptable"]))
    out.print(engines)
    out.print(f"* fewer than {ENGINE_TABLE_MIN} scored cases: listed, not held to the per-engine target")
    unknowns = [c for c in report.cases if c.answer == "unknown"]
    out.print(f"answered unknown: {len(unknowns)} ({sum(c.acceptable for c in unknowns)} on cases marked "
              "insufficient, where unknown is an acceptable answer)")
    out.print(f"exact on in-scope, log-sufficient cases: {_pct(report.scored_accuracy)} of {len(report.scored)}")
    out.print(f"accuracy (exact label, all cases): {_pct(report.accuracy)}   "
              f"acceptable (label, or unknown where insufficient): {_pct(report.acceptable_rate)}")
    out.print(f"GPU/not-GPU misroutes: {report.misroutes}   false alarms on healthy logs: {report.false_alarms}   "
              f"confident wrong answers (confidence >= 0.5): {report.wrong} "
              f"(wrong at any confidence: {report.wrong_any})")


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"
