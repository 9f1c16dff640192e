"""`triage sim serve MODEL [flags]`: the click face of the simulator.

The flags are vLLM's and are parsed by the simulator's argparse parser (triage.sim.args), so
this command passes them through untouched; `triage sim serve --help` shows argparse's help.
Register with `cli.add_command(sim)` in triage/cli.py.
"""
from __future__ import annotations

import click


@click.group(name="sim")
def sim() -> None:
    """Simulate a vLLM server on loopback (drills, demos, end-to-end tests; no GPU needed)."""


@sim.command(name="serve", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def serve(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Start the simulator: MODEL, vLLM flags, and --scenario (see --help)."""
    from .server import serve as run_server

    # argparse's usage line and errors name the command as the user typed it (`triage sim serve`).
    raise SystemExit(run_server(list(args), prog=ctx.command_path))
