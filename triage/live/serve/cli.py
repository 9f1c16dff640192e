"""`triage serve`: the click face of the Alertmanager webhook receiver.

Only click is imported at module level; the receiver loads when the command runs. Registered by
name in triage/cli.py (LAZY_COMMANDS). The process runs until SIGTERM or SIGINT: it then stops
accepting, gives the alerts in hand `--grace` seconds, and leaves the rest journaled under
INCIDENTS/.triage-serve/ for the next start.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import click

from ...errors import TriageError

TOKEN_ENV = "TRIAGE_SERVE_TOKEN"
DEFAULT_LISTEN = "127.0.0.1:9095"


class ServeRefused(TriageError):
    """The receiver will not start as configured (one line saying why)."""


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9095)", param_hint="--listen")
    host = host.strip("[]")
    return host, int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _http_url(value: str | None, option: str) -> str | None:
    from urllib.parse import urlsplit

    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{value!r} is not an http(s) URL", param_hint=option)
    return value


@click.command(name="serve")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help=f"Where to listen. Anything but loopback requires the bearer token in ${TOKEN_ENV}.")
@click.option("--prometheus", metavar="URL",
              help="Read the alert's instance series around startsAt from this Prometheus-compatible server "
                   "(credentials from $TRIAGE_PROMETHEUS_TOKEN, or $TRIAGE_PROMETHEUS_USER and "
                   "$TRIAGE_PROMETHEUS_PASSWORD; a private CA from $TRIAGE_PROMETHEUS_CA_BUNDLE).")
@click.option("--logs-from", "logs_from", metavar="DIR|kubectl",
              help="Where the server's log is: a directory of per-instance logs (matched by the alert's pod, "
                   "instance or host label), or `kubectl` (the alert's namespace/pod labels).")
@click.option("--incidents", default="incidents", show_default=True, metavar="DIR",
              help="Where incident bundles (and the receiver's journal, .triage-serve/) are written.")
@click.option("--post", metavar="URL", help="POST each verdict here as JSON (with a `text` field for chat).")
@click.option("--queue", "bound", type=click.IntRange(1, 100000), default=100, show_default=True, metavar="N",
              help="Alerts that may wait for a worker; a payload that does not fit is answered 429.")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True, metavar="N",
              help="Alerts worked on at once.")
@click.option("--rate", type=click.FloatRange(0.1, 10000), default=20.0, show_default=True, metavar="R",
              help="Requests per second allowed (bursts of twice that); more are answered 429.")
@click.option("--max-body", "max_body", default="1MiB", show_default=True, metavar="SIZE",
              help="Largest request body read; a larger one is answered 413.")
@click.option("--lookback", default="1h", show_default=True, metavar="DURATION",
              help="How far before startsAt the instance's series are read.")
@click.option("--after", "after", default="10m", show_default=True, metavar="DURATION",
              help="How far after startsAt (at most up to now) the series are read.")
@click.option("--step", metavar="DURATION",
              help="Query step of the instance's series (e.g. 1s). Default: follows the window "
                   "(--lookback + --after over about 4000 points, 1 s at least), fine enough for a server that "
                   "lived seconds.")
@click.option("--source-timeout", "source_timeout", type=click.FloatRange(1, 600), default=20.0,
              show_default=True, metavar="S", help="Time limit of each source (a log, kubectl, Prometheus).")
@click.option("--log-max", "log_max", default="64MiB", show_default=True, metavar="SIZE",
              help="Keep at most this much of the end of each log.")
@click.option("--grace", type=click.FloatRange(0, 600), default=30.0, show_default=True, metavar="S",
              help="On SIGTERM, how long the alerts in hand may take; the rest is journaled for the next start.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request.")
def serve(listen: str, prometheus: str | None, logs_from: str | None, incidents: str, post: str | None, bound: int,
          workers: int, rate: float, max_body: str, lookback: str, after: str, step: str | None,
          source_timeout: float, log_max: str, grace: float, verbose: bool) -> None:
    """Receive Alertmanager webhooks (POST /alertmanager, payload version 4): for each firing alert
    gather the instance's log and Prometheus series around startsAt, classify, write an incident
    bundle under --incidents and post the verdict with the commands to run next. A resolved alert
    closes its incident's timeline. Recovery is never executed.

    GET /healthz answers liveness probes; GET /metrics the receiver's own series.
    """
    from ...units import parse_size
    from ..fleet.fleet import MAX_POINTS, parse_duration

    host, port = parse_listen(listen)
    token = os.environ.get(TOKEN_ENV, "").strip() or None
    if not is_loopback(host) and token is None:
        raise ServeRefused(f"--listen {listen}: not a loopback address; set {TOKEN_ENV} to the bearer token that "
                           "callers must send (Alertmanager: http_config.authorization.credentials)")
    try:
        lookback_s, after_s = parse_duration(lookback, "--lookback"), parse_duration(after, "--after")
        step_s = parse_duration(step, "--step") if step is not None else None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if step_s is not None and (step_s <= 0 or (lookback_s + after_s) / step_s > MAX_POINTS):
        least = math.ceil((lookback_s + after_s) / MAX_POINTS)
        raise click.BadParameter(f"{step!r}: over --lookback {lookback} + --after {after} Prometheus allows "
                                 f"{MAX_POINTS:,} points per series: use a step of at least {least}s",
                                 param_hint="--step")
    body_limit, log_bytes = parse_size(max_body), parse_size(log_max)
    for value, given, option in ((body_limit, max_body, "--max-body"), (log_bytes, log_max, "--log-max")):
        if not value or value < 1024:
            raise click.BadParameter(f"{given!r} is not a size of at least 1KiB (e.g. 1MiB)", param_hint=option)
    source = None
    if logs_from is not None:
        from .alert_sources import LogsFrom

        if logs_from == "kubectl":
            source = LogsFrom(None)
        elif Path(logs_from).is_dir():
            source = LogsFrom(Path(logs_from).resolve())
        else:
            raise click.BadParameter(f"{logs_from!r} is neither a directory nor `kubectl`", param_hint="--logs-from")
    from .serve_run import Config, run

    run(Config(host, port, Path(incidents), source, _http_url(prometheus, "--prometheus"), _http_url(post, "--post"),
               bound, workers, rate, int(body_limit), lookback_s, after_s, source_timeout, int(log_bytes), grace,
               token, verbose, step_s))
