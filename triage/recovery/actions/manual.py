"""`manual`: an instruction only a human can carry out (gateway limits, a ticket), confirmed."""
from __future__ import annotations

from ..context import Deadline, Outcome, RunContext, failed, ok
from ..fill import render
from ..runbooks import RunbookStep


def run(step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
    # The plan renders the verdict's values into the text; a step run without a plan is rendered here.
    instruction = render(str(step.params["instruction"]), ctx.verdict, step)
    ctx.options.say(f"  BY HAND: {instruction}")
    if ctx.options.yes:
        return ok(f"instruction: {instruction}", "acknowledged with --yes", confirmed_by="--yes")
    if ctx.options.confirm("Done?"):
        return ok(f"instruction: {instruction}", "confirmed by the operator", confirmed_by="operator")
    return failed(instruction, f"instruction: {instruction}", "not confirmed")
