"""The launch `triage collect` captured from the live server: `process:` in incident.yaml.

collect reads the server's own /proc/PID/cmdline (secrets masked) and the variables that change
how it uses GPU memory. When the server is gone, that command line is the best record of how it
was started: the logs only give vLLM's `non-default args`, from which a command is rebuilt. It
is still read from the bundle — whoever can write incident.yaml chose it — so, like every
command from the bundle, it runs only once the operator confirmed its digest (`trust.py`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..launch import MissingSecret, _masked_in_argv
from ..redact import MASK as MASK_MARK

MAX_ARGS = 4096


@dataclass(frozen=True)
class Captured:
    argv: list[str]
    env: dict[str, str]            # the variables collect kept, masked ones left out
    source: str                    # "incident.yaml process.argv (pid 4242, captured by triage collect)"
    needs: list[dict[str, Any]]    # secrets the capture masked: fill_secrets() takes them from launch.env


def captured_launch(data: dict[str, Any], engine: str) -> Captured | str | None:
    """The captured launch, why it cannot be used (one phrase), or None when there is none."""
    process = data.get("process")
    if process is None:
        return None
    argv = process.get("argv") if isinstance(process, dict) else None
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGS \
            or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in argv):
        return "incident.yaml process.argv is not a list of strings"
    words = [str(a) for a in argv]
    needs = [_need(m) for m in _masked_in_argv(words, engine)]
    if len(needs) < sum(MASK_MARK in w for w in words):
        return "incident.yaml process.argv has a masked value that is not a known secret flag"
    raw_env = process.get("env") if isinstance(process.get("env"), dict) else {}
    env = {str(k): str(v) for k, v in raw_env.items()
           if isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
           and MASK_MARK not in str(v)}
    pid = process.get("pid")
    who = f"pid {pid}, " if isinstance(pid, int) and not isinstance(pid, bool) else ""
    return Captured(words, env, f"incident.yaml process.argv ({who}captured by triage collect)", needs)


def _need(missing: MissingSecret) -> dict[str, Any]:
    return {"arg": missing.arg, "flag": missing.flag, "env": missing.env, "how": missing.how}
