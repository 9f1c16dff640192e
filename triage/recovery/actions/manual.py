"""`manual`: an instruction only a human can carry out (gateway limits, a ticket).

Asked at the prompt, the operator's "yes" is the confirmation. Under `--yes` nobody was asked:
the step is handed to a person (`handoff.HANDED`) and stays open until a note closes it."""
from __future__ import annotations

from typing import Any, Mapping

from ..context import Deadline, Outcome, RunbookStep, RunContext, failed, ok
from ..fill import render
from ..handoff import HANDED, MARKER, close_command
from ..plan import Plan
from .base import Action, Param


class Manual(Action):
    name = "manual"
    params = (Param("instruction", str),)     # may name the verdict's values (recovery.fill)

    def check(self, params: Mapping[str, Any]) -> tuple[str, str] | None:
        if not params.get("instruction"):
            return "instruction", "a manual step needs the instruction for the human"
        return None

    def describe(self, step: RunbookStep, plan: Plan) -> list[str]:
        return [str(step.params.get("instruction")),
                "the operator confirms before the plan goes on; under --yes it is handed to a person, open in the "
                f"timeline until a note says `{MARKER}{step.id}`"]

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        # The plan renders the verdict's values into the text; a step run without a plan is rendered here.
        instruction = render(str(step.params["instruction"]), ctx.verdict, step)
        ctx.options.say(f"  BY HAND: {instruction}")
        if ctx.options.yes:
            close = close_command(str(ctx.incident), step.id)
            return Outcome(HANDED, [f"instruction: {instruction}",
                                    "handed to a person: --yes confirms no step only a person can do; it stays "
                                    f"open in the timeline until a note closes it ({close})"],
                           {"handed_to": "a person", "instruction": instruction, "close_with": close},
                           by_hand=f"{instruction} — then close it: {close}")
        if ctx.options.confirm("Done?"):
            return ok(f"instruction: {instruction}", "confirmed by the operator", confirmed_by="operator")
        return failed(instruction, f"instruction: {instruction}", "not confirmed")


manual = Manual()
