"""`triage collect`: the click face of the collector (triage/live/collect/collect.py).

Only click is imported here; the collector loads when the command runs. Registered by name in
triage/cli.py (LAZY_COMMANDS).
"""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Sequence

import click

DEFAULT_URL = "http://127.0.0.1:8000"


@click.command(name="collect")
@click.option("-o", "--output", "output", required=True, metavar="INCIDENT",
              help="The bundle directory to write (must not exist, or be empty).")
@click.option("--vllm-url", "url", default=DEFAULT_URL, show_default=True, metavar="URL",
              help="The server's base URL: /metrics, /health, /v1/models, /version.")
@click.option("--log", "logs", multiple=True, metavar="FILE",
              help="The server's log file on this host (its tail is kept, masked); repeatable.")
@click.option("--kubectl", "kubectl", metavar="NS/POD",
              help="The server's pod: kubectl logs (and --previous after a restart), the pod JSON, its events.")
@click.option("--pid", type=click.IntRange(min=1), metavar="PID",
              help="The server's PID (default: the process listening on the URL's port, when it is on this host).")
@click.option("--scrapes", type=click.IntRange(0, 1000), default=3, show_default=True, metavar="N",
              help="How many /metrics scrapes to take.")
@click.option("--every", "every_s", type=click.FloatRange(0, 3600), default=5.0, show_default=True, metavar="S",
              help="Seconds between scrapes.")
@click.option("--deadline", "deadline_s", type=click.FloatRange(1, 3600), default=30.0, show_default=True,
              metavar="S", help="The whole collection ends within this many seconds; slow sources are cut off.")
@click.option("--tar", "tar", is_flag=True, help="Also write INCIDENT.tar.gz.")
@click.option("--log-max", "log_max", default="64MiB", show_default=True, metavar="SIZE",
              help="Keep at most this much of the end of each log.")
@click.option("--hooks-dir", "hooks_dirs", multiple=True, metavar="DIR",
              help="Also take the allocator dumps triage.hooks wrote under DIR (default: the server's "
                   "TRIAGE_HOOKS_DIR).")
def collect(output: str, url: str, logs: Sequence[str], kubectl: str | None, pid: int | None, scrapes: int,
            every_s: float, deadline_s: float, tar: bool, log_max: str, hooks_dirs: Sequence[str]) -> None:
    """Capture an incident bundle from a live host: GPU readings (NVML, else nvidia-smi), /metrics
    scrapes, /health, /v1/models, the log tail or the pod's logs, dmesg, the server's command line
    and environment (secrets masked) and triage.hooks dumps, with manifest.json.

    A source that is missing, denied or too slow is an entry in manifest.json with the reason;
    the rest is collected. Progress goes to stderr, one line per source.
    """
    from urllib.parse import urlsplit

    from ...errors import BadInput
    from ...output import echo
    from ...units import parse_size
    from .collect import Options, collect as run_collect
    from .kube_source import parse_target

    if logs and kubectl:
        raise click.UsageError("give --log or --kubectl, not both")
    target = parse_target(kubectl) if kubectl else None
    if kubectl and target is None:
        raise click.BadParameter(f"{kubectl!r} is not NAMESPACE/POD (e.g. inference/vllm-7d9f-abcde)",
                                 param_hint="--kubectl")
    try:
        parts = urlsplit(url)
        parts.port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{url!r} is not the server's base URL (like {DEFAULT_URL})", param_hint="--vllm-url")
    max_bytes = parse_size(log_max)
    if not max_bytes:
        raise click.BadParameter(f"{log_max!r} is not a size (e.g. 64MiB)", param_hint="--log-max")
    if not output.strip():
        raise click.BadParameter("empty name", param_hint="-o")

    options = Options(output=Path(output), url=url, logs=tuple(Path(p) for p in logs), kubectl=target, pid=pid,
                      scrapes=scrapes, every_s=every_s, deadline_s=deadline_s, tar=tar, log_max_bytes=max_bytes,
                      hooks_dirs=tuple(Path(d) for d in hooks_dirs))
    # SIGTERM (a timeout wrapper, a pod shutting down) ends the run like Ctrl-C: the half-written
    # bundle beside the target is removed on the way out.
    signal.signal(signal.SIGTERM, _terminated)
    result = run_collect(options, say=lambda line: echo(f"triage collect: {line}", err=True))
    missing = [r for r in result.runs if r.status != "ok"]
    echo(f"wrote {result.path} ({result.files} file{'s' if result.files != 1 else ''} in {result.duration_s:.1f} s; "
         f"{len(missing)} source{'s' if len(missing) != 1 else ''} not collected: see manifest.json)")
    if result.tarball is not None:
        echo(f"wrote {result.tarball}")
    if not result.files:
        raise BadInput(str(result.path), "nothing collected: every source failed or was skipped (see manifest.json)")


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
