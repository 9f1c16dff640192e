"""`triage prove`: the click face of the proof (triage/prove/run.py). Only click is imported
here; aiohttp and the classifier load when the command runs.

Exit codes: 0 held; 1 failed under the load (the first failure is named), or nothing was sent
(bad input, a target refused or not confirmed, a server that does not answer /v1/models);
130 on Ctrl-C (the load stops at once; the partial result is still printed and recorded);
2 usage errors.
"""
from __future__ import annotations

import sys

import click


def _headroom(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from ..units import parse_size

    text = value.strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            raise click.BadParameter(f"{value!r} is not a share (e.g. 5%)") from None
        if not 0 <= share < 100:
            raise click.BadParameter(f"{value!r}: a share of the card from 0% to 100%")
        return text
    if parse_size(text) is None:
        raise click.BadParameter(f"{value!r} is not a size (e.g. 2GiB) or a share of the card (e.g. 5%)")
    return text


@click.command(name="prove")
@click.argument("source", required=False, metavar="[INCIDENT_DIR|LOG]")
@click.option("--url", required=True, metavar="URL", help="The server to load, e.g. http://127.0.0.1:8000 "
              "(loopback only, unless --allow-remote).")
@click.option("--concurrency", type=click.IntRange(1), metavar="N",
              help="Requests at once (default: the incident's peak running + waiting).")
@click.option("--prompt-tokens", type=click.IntRange(1), metavar="N",
              help="Prompt length (default: the incident's KV tokens per running request at its peak).")
@click.option("--output-tokens", type=click.IntRange(1), metavar="N", help="Output length (default 128).")
@click.option("--profile", "profile_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="A load profile (YAML/JSON: concurrency, prompt_tokens, output_tokens, duration_s, ramp_s) or a "
                   "`vllm bench serve` result JSON; flags override it.")
@click.option("--duration", type=click.FloatRange(0, 3600, min_open=True), default=300.0, show_default=True,
              metavar="S", help="Seconds to hold the full load.")
@click.option("--ramp", type=click.FloatRange(0, 3600), default=10.0, show_default=True, metavar="S",
              help="Seconds to ramp up to full concurrency.")
@click.option("--max-requests", type=click.IntRange(1, 1_000_000), default=20000, show_default=True, metavar="N",
              help="Never send more requests than this.")
@click.option("--request-timeout", type=click.FloatRange(0.1, 3600), default=300.0, show_default=True, metavar="S",
              help="A request not answered within this is a failure.")
@click.option("--model", metavar="NAME", help="Model name to send (default: what /v1/models names).")
@click.option("--min-headroom", callback=_headroom, metavar="SIZE|PCT%",
              help="Fail unless the card keeps this much free at its fullest (NVML), e.g. 2GiB or 5%.")
@click.option("--server-log", type=click.Path(dir_okay=False), metavar="FILE",
              help="The server's log: after a failure it is classified (does it fail like the incident?).")
@click.option("--allow-remote", is_flag=True, help="Permit a target that is not loopback (what will be sent is "
              "shown first, and confirmed at the prompt or by --yes).")
@click.option("--yes", is_flag=True, help="With --allow-remote: do not ask before sending.")
@click.option("--no-record", "no_record", is_flag=True, help="Do not write the run into INCIDENT_DIR/actions.jsonl.")
@click.option("--nvml/--no-nvml", default=True, show_default=True, help="Read GPU memory through NVML.")
@click.option("--dry-run", is_flag=True, help="Print what would be sent (and the `vllm bench serve` command that "
              "replays it) and send nothing.")
@click.option("--export-profile", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Also write the profile as a file --profile reads back.")
@click.option("--json", "as_json", is_flag=True, help="Print the triage.prove/v1 JSON object.")
def prove(source: str | None, url: str, concurrency: int | None, prompt_tokens: int | None,
          output_tokens: int | None, profile_file: str | None, duration: float, ramp: float, max_requests: int,
          request_timeout: float, model: str | None, min_headroom: str | None, server_log: str | None,
          allow_remote: bool, yes: bool, no_record: bool, nvml: bool, dry_run: bool, export_profile: str | None,
          as_json: bool) -> None:
    """Drive the server at URL with the incident's own peak load and say whether it holds.

    The peak (concurrency, prompt and output lengths) comes from INCIDENT_DIR or LOG, a --profile
    file or the flags. The load ramps up, holds for --duration and is watched through /metrics
    (KV usage, waiting, preemptions) and NVML (memory in use, headroom). Held or failed, with the
    first failure and its time, latency percentiles and requests served and failed; given an
    incident directory, the run is recorded in its actions.jsonl (the timeline shows it).
    """
    from ..errors import ExitCode
    from ..output import echo_json
    from .profile import Limits, profile_yaml, vllm_bench_argv
    from .run import ProveOptions, plan_lines, prepare, run_prove

    limits = Limits(max_requests=max_requests, duration_s=duration, ramp_s=ramp, request_timeout_s=request_timeout)
    opts = ProveOptions(url=url, source=source, profile_file=profile_file, concurrency=concurrency,
                        prompt_tokens=prompt_tokens, output_tokens=output_tokens, model=model, limits=limits,
                        allow_remote=allow_remote, server_log=server_log, record=not no_record, nvml=nvml)
    p = prepare(opts)
    if export_profile:
        _write(export_profile, profile_yaml(p.profile, p.limits))
    if dry_run:
        for line in plan_lines(p, model):
            click.echo(line)
        for note in p.profile.notes:
            click.echo(f"note: {note}")
        import shlex

        click.echo("replay with vllm bench serve: " + shlex.join(vllm_bench_argv(
            p.profile, p.target.url, model or p.profile.model or "MODEL", p.limits.max_requests)))
        return
    if min_headroom is not None:
        opts.min_headroom_bytes = _headroom_bytes(min_headroom, nvml)

    def say(line: str) -> None:
        click.echo(f"prove: {line}", err=True)

    def confirm(lines: list[str]) -> bool:
        for line in lines:
            click.echo(f"prove: will send: {line}", err=True)
        if yes:
            return True
        if not sys.stdin.isatty():
            raise click.UsageError("load against another host needs a terminal to confirm, or --yes")
        return click.confirm("Send this load?", default=False, err=True)

    if p.incident_dir and opts.record:
        from .record import recorded

        with recorded(p.incident_dir, {"url": p.target.url, "profile": p.profile.json(),
                                       "limits": {"duration_s": limits.duration_s, "ramp_s": limits.ramp_s,
                                                  "max_requests": limits.max_requests}}) as box:
            box.append(run_prove(opts, say=say, confirm=confirm, prepared=p))
        result = box[0]
        result.incident = {**(result.incident or {}), "recorded": True}
    else:
        result = run_prove(opts, say=say, confirm=confirm, prepared=p)
    if as_json:
        echo_json(result.json(), indent=2)
    else:
        for line in result.lines():
            click.echo(line)
    if result.result == "interrupted":
        sys.exit(130)
    if result.result != "held":
        sys.exit(int(ExitCode.BAD_INPUT))


def _headroom_bytes(text: str, nvml: bool) -> int:
    """A size now; a share of the card is turned into bytes once NVML names the card's total."""
    from ..errors import TriageError
    from ..live.nvml import NoNvml, read_gpus
    from ..units import parse_size

    if not text.endswith("%"):
        return int(parse_size(text) or 0)
    gpus = read_gpus(2.0) if nvml else NoNvml("--no-nvml")
    if isinstance(gpus, NoNvml) or not gpus:
        raise TriageError(f"--min-headroom {text}: a share of the card needs NVML ({gpus or 'no GPU'}); give a size")
    return int(float(text[:-1]) / 100.0 * max(g.total_bytes for g in gpus))


def _write(path: str, text: str) -> None:
    from ..errors import BadInput

    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise BadInput(path, f"cannot write the profile: {exc.strerror or exc}") from None
