"""`manual`: an instruction only a human can carry out (gateway limits, a ticket), confirmed."""
from __future__ import annotations

from typing import Any, Mapping

from ..context import Deadline, Outcome, RunbookStep, RunContext, failed, ok
from ..fill import render
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
        return [str(step.params.get("instruction")), "the operator confirms before the plan goes on"]

    def run(self, step: RunbookStep, ctx: RunContext, deadline: Deadline) -> Outcome:
        # The plan renders the verdict's values into the text; a step run without a plan is rendered here.
        instruction = render(str(step.params["instruction"]), ctx.verdict, step)
        ctx.options.say(f"  BY HAND: {instruction}")
        if ctx.options.yes:
            return ok(f"instruction: {instruction}", "acknowledged with --yes", confirmed_by="--yes")
        if ctx.options.confirm("Done?"):
            return ok(f"instruction: {instruction}", "confirmed by the operator", confirmed_by="operator")
        return failed(instruction, f"instruction: {instruction}", "not confirmed")


manual = Manual()
