"""`triage watch`: the click face of the live watch (triage/live/watch/loop.py and friends).

Only click is imported here; the watch's modules (rich, prometheus-client, NVML) load when the
command runs. The JSON it prints is documented in triage/live/watch/readings.py (triage.watch/v1).

Exit codes: 0 when the watch ended normally (SIGTERM, or --once with at least one source read);
1 (ExitCode.BAD_INPUT, "a failed step") for --once when no source at all could be read: every
server unreachable and no GPU reading; the JSON reading is still printed, and one line on stderr
says so. 130 on Ctrl-C, as every triage command. 2 for usage errors.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Sequence

import click

_GPUS = re.compile(r"^(?P<url>.+)=(?P<gpus>\d+(?:,\d+)*)$")


@click.command(name="watch")
@click.option("--vllm-url", "urls", multiple=True, metavar="URL[=GPUS]",
              help="A vLLM server's base URL; repeatable. URL=0,1 names the GPUs (NVML indexes) it runs on "
                   "(default: every GPU when one server is watched).")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, metavar="S",
              help="Seconds between readings; each source must answer within 0.8 of it (at most 10 s).")
@click.option("--incident", type=click.Path(file_okay=False), metavar="DIR",
              help="Append raised and cleared warnings to DIR/notes.jsonl (the incident's timeline), once each; "
                   "with --act also every decision and action (created if missing).")
@click.option("--exporter", "exporter_port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve the readings as Prometheus gauges (triage_*) on PORT (0: any free port, printed).")
@click.option("--exporter-host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="Address the exporter listens on (0.0.0.0 to let another host scrape it).")
@click.option("--hooks-dir", "hooks_dirs", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
              help="triage.hooks dump directory of a server (its TRIAGE_HOOKS_DIR), one per --vllm-url in the "
                   "same order; default $TRIAGE_HOOKS_DIR when one server is watched.")
@click.option("--once", is_flag=True, help="Take one reading, print it and exit.")
@click.option("--json", "as_json", is_flag=True,
              help="Print triage.watch/v1 JSON: one object with --once, else one line per reading.")
@click.option("--nvml/--no-nvml", default=True, show_default=True, help="Read GPU memory through NVML.")
@click.option("--act", is_flag=True,
              help="Sidecar: when an OOM precursor (a leak trend, fragmentation, NVML memory outside the engine's "
                   "budget; never KV saturation or a queue) holds for --hold, run a drained restart of that server "
                   "through the recovery executor. A dry run (the plan, in --incident) unless --execute.")
@click.option("--execute", is_flag=True, help="With --act: really drain, stop and relaunch the server.")
@click.option("--hold", "hold_s", type=click.FloatRange(min=0), default=120.0, show_default=True, metavar="S",
              help="With --act: seconds a precursor must last, every reading, before acting.")
@click.option("--max-actions", type=click.IntRange(min=1), default=1, show_default=True, metavar="N",
              help="With --act: at most N actions (dry-run plans included) per server per --action-window.")
@click.option("--action-window", "window_s", type=click.FloatRange(min=1), default=3600.0, show_default=True,
              metavar="S", help="With --act: the rate limit's window, seconds.")
@click.option("--leak-horizon", "leak_horizon_s", type=click.FloatRange(min=0), default=86400.0, show_default=True,
              metavar="S", help="With --act: act on a leak only when, at its slope, it fills the card within S seconds "
                                "(the time to your next scheduled restart); a slower one waits for that restart.")
@click.option("--fleet-share", type=click.FloatRange(min=0, max=1), default=0.25, show_default=True, metavar="F",
              help="With --act: act on at most this share of the watched servers per --action-window (at least "
                   "one server).")
@click.option("--allow-remote", is_flag=True,
              help="With --act: accept a --vllm-url that is not loopback (the server must still run on this host).")
@click.option("--readings", type=click.IntRange(min=1), default=None, hidden=True,
              help="Stop after N readings (drills and tests).")
def watch(urls: Sequence[str], interval: float, incident: str | None, exporter_port: int | None, exporter_host: str,
          hooks_dirs: Sequence[str], once: bool, as_json: bool, nvml: bool, act: bool, execute: bool, hold_s: float,
          max_actions: int, window_s: float, leak_horizon_s: float, fleet_share: float, allow_remote: bool,
          readings: int | None) -> None:
    """Watch running vLLM servers and their GPUs for the early signs of each OOM class.

    Per server: KV-cache usage, running / waiting, preemption and success rates, prefix-cache hit
    rate, the engine's memory budget against NVML (the discrepancy), allocator fragmentation from
    triage.hooks dumps; per GPU the memory trend. An "OOM risk" line names the class it is heading
    for and why, judged with the classifier's thresholds. Ctrl-C stops it.
    """
    from ...errors import ExitCode

    specs = _servers(urls, hooks_dirs)
    if not specs and not nvml:
        raise click.UsageError("nothing to watch: give --vllm-url URL, or leave NVML on")
    if once and exporter_port is not None:
        raise click.UsageError("--exporter serves a running watch: leave out --once")
    actor = _actor(specs, incident, once, as_json, act, execute, allow_remote,
                   dict(hold_s=hold_s, max_actions=max_actions, window_s=window_s, leak_horizon_s=leak_horizon_s,
                        fleet_share=fleet_share))
    if incident and not os.path.isdir(incident):
        raise click.BadParameter(f"Directory {incident!r} does not exist.", param_hint="'--incident'")
    from ...output import echo, echo_json
    from .watcher import Watcher

    watcher = Watcher(specs, interval, nvml=nvml)
    try:
        if once:
            reading = watcher.read()
            if as_json:
                echo_json(reading.to_json(), indent=2, ensure_ascii=False)
            else:
                from ...console import Console
                from .dashboard import render

                Console(highlight=False).print(render(reading))
            if incident:        # the warnings of this one reading, each once
                from .incident_notes import IncidentNotes
                from .loop import Publisher

                Publisher(None, IncidentNotes(incident), _warn).publish(reading)
            if not reading.any_source_ok():
                echo("triage: nothing could be read: every server unreachable and no GPU reading", err=True)
                sys.exit(int(ExitCode.BAD_INPUT))
            return
        _loop(watcher, incident, exporter_port, exporter_host, as_json, actor, readings)
    finally:
        watcher.close()


def _actor(specs, incident: str | None, once: bool, as_json: bool, act: bool, execute: bool, allow_remote: bool,
           policy: dict):
    """The --act sidecar (triage/live/watch/act.py), or None; its options checked first."""
    if not act:
        if execute:
            raise click.UsageError("--execute acts on a server: give --act too")
        return None
    if once:
        raise click.UsageError("--act watches for a precursor that lasts: leave out --once")
    if not specs:
        raise click.UsageError("--act needs the server: give --vllm-url URL")
    if not incident:
        raise click.UsageError("--act records what it does: give --incident DIR")
    from ...errors import TriageError
    from ...safedir import HeldDir
    from .act import Actor, Policy, loopback_problem

    if not allow_remote:
        for spec in specs:
            problem = loopback_problem(spec.url)
            if problem:
                raise click.BadParameter(f"{problem}; --act acts on loopback servers unless --allow-remote",
                                         param_hint="--vllm-url")
    try:
        HeldDir.open(incident, create=True).close()      # created here, never through a link
    except TriageError as exc:
        raise click.BadParameter(str(exc), param_hint="'--incident'") from None
    from ...output import echo

    return Actor(Policy(execute=execute, **policy), incident, lambda line: echo(line, err=as_json))


def _loop(watcher, incident: str | None, exporter_port: int | None, exporter_host: str, as_json: bool,
          actor=None, readings: int | None = None) -> None:
    from ...output import echo, echo_json
    from .exporter import Exporter
    from .incident_notes import IncidentNotes
    from .loop import JsonLinesView, LinesView, LiveView, Publisher, run

    exporter = Exporter(exporter_host, exporter_port) if exporter_port is not None else None
    if exporter is not None and actor is not None:
        exporter.add_act(actor)
    extra = f"; exporter {exporter.url}" if exporter else ""
    publisher = Publisher(exporter, IncidentNotes(incident) if incident else None, _warn)
    if as_json:
        view = JsonLinesView(lambda doc: echo_json(doc, ensure_ascii=False))
    elif sys.stdout.isatty():
        view = LiveView(extra)
    else:
        view = LinesView(echo)
    if actor is not None:
        p = actor.policy
        extra += (f"; act: {'EXECUTE' if p.execute else 'dry run'}, hold {p.hold_s:g} s, at most {p.max_actions} "
                  f"per {p.window_s:g} s and {p.fleet_limit(len(watcher.servers))} of {len(watcher.servers)} "
                  f"server(s) per window, leaks filling the card within {p.leak_horizon_s:g} s")
    if not isinstance(view, LiveView):
        echo(f"triage watch: every {watcher.interval_s:g} s{extra}; Ctrl-C to stop", err=True)
    try:
        run(watcher, view, publisher, after=actor.observe if actor is not None else None, readings=readings)
    finally:
        view.close()
        if exporter is not None:
            exporter.close()


def _warn(text: str) -> None:
    from ...output import echo

    echo(f"triage: warning: {text}", err=True)


def _servers(urls: Sequence[str], hooks_dirs: Sequence[str]):
    from .scrape import BadUrl, Endpoint
    from .watcher import ServerSpec

    if hooks_dirs and len(hooks_dirs) != len(urls):
        raise click.UsageError(f"--hooks-dir: give one per --vllm-url ({len(urls)}), in the same order "
                               f"(got {len(hooks_dirs)})")
    if not hooks_dirs and len(urls) == 1 and os.environ.get("TRIAGE_HOOKS_DIR"):
        hooks_dirs = [os.environ["TRIAGE_HOOKS_DIR"]]
    specs = []
    for n, given in enumerate(urls):
        m = _GPUS.match(given)
        url, gpus = (m["url"], tuple(int(g) for g in m["gpus"].split(","))) if m else (given, None)
        try:
            Endpoint(url)
        except BadUrl as exc:
            raise click.BadParameter(str(exc), param_hint="--vllm-url") from None
        specs.append(ServerSpec(url, gpus, hooks_dirs[n] if hooks_dirs else None))
    if len({s.url for s in specs}) != len(specs):
        raise click.UsageError("--vllm-url: each server once")
    return specs
