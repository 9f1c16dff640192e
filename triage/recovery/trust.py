"""Commands from the incident bundle run only once the operator confirmed that very command.

A relaunch's command line comes from the running server (/proc), from `--launch-command`, or from
the bundle: the command an earlier run recorded, the last launch that served (rollback),
`launch:` in incident.yaml, the command line in the logs. Whoever can write the bundle chooses
the last kind, so `--yes` does not confirm it. It runs only when

* the operator answers yes at a prompt that shows the whole command (argv, environment, working
  directory; secrets masked), or
* `--trust-bundle-launch DIGEST` names it, DIGEST being what the dry run prints beside that
  command: a hash of exactly what will run, so a bundle changed after the plan was read no
  longer matches.

Refusals happen before the first step: a server is never stopped for want of a relaunch.
"""
from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from typing import Iterable

from ..errors import TriageError
from ..redact import redact
from .audit import canonical
from .context import BUNDLE, ExecOptions, LaunchSpec, PlannedStep, Prepared, relaunch_driver, rollback_spec
from .privileges import Creds, RunAs

DIGEST_CHARS = 16
FLAG = "--trust-bundle-launch"


@dataclass(frozen=True)
class BundleCommand:
    step: str                       # the runbook step that would run it
    number: int
    source: str                     # where in the bundle it was read
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)   # the overrides the relaunch sets
    cwd: str | None = None
    user: str = ""                  # who it runs as: part of what the operator confirms

    @property
    def digest(self) -> str:
        body = canonical({"argv": self.argv, "env": self.env, "cwd": self.cwd, "user": self.user})
        return hashlib.sha256(b"oom-triage bundle launch\0" + body).hexdigest()[:DIGEST_CHARS]

    def lines(self) -> list[str]:
        """The whole command, secrets masked."""
        out = [f"command: {shlex.join(str(a) for a in redact(list(self.argv)))}"]
        out += [f"env:     {k}={v}" for k, v in redact(dict(self.env)).items()]
        out.append(f"cwd:     {self.cwd or '(the directory triage runs in)'}")
        out.append(f"runs as: {self.user}")
        return out

    def json(self) -> dict[str, object]:
        return {"step": self.step, "source": self.source, "argv": redact(list(self.argv)),
                "env": redact(dict(self.env)), "cwd": self.cwd, "user": self.user, "digest": self.digest}


def bundle_commands(steps: Iterable[PlannedStep], prepared: Prepared, driver: str | None,
                    done: Iterable[str] = ()) -> list[BundleCommand]:
    """The commands from the bundle that the pending relaunch steps would run."""
    skip = set(done)
    out: list[BundleCommand] = []
    for ps in steps:
        step = ps.step
        if step.id in skip or step.action not in ("restart", "rollback"):
            continue
        if relaunch_driver(step, driver) == "kubectl":
            continue                   # kubectl reads the container args live; rollback undoes the rollout
        spec: LaunchSpec | None = prepared.launch
        if step.action == "rollback":
            spec = rollback_spec(prepared.known_good, prepared.launch) if prepared.known_good else None
        if spec is None or spec.origin != BUNDLE:
            continue
        env = {**spec.env, **{str(k): str(v) for k, v in (step.params.get("env") or {}).items()}}
        out.append(BundleCommand(step.id, ps.number, spec.source, list(spec.argv), env, spec.cwd,
                                 _runs_as(prepared.run_as)))
    return out


def _runs_as(run_as: RunAs | None) -> str:
    creds = run_as.creds if run_as is not None and run_as.creds is not None else Creds.mine()
    return f"uid {creds.uid}, gid {creds.gid}, groups {','.join(map(str, creds.groups)) or 'none'}"


def confirm(commands: list[BundleCommand], options: ExecOptions, incident: str) -> None:
    """Return when every command is confirmed; raise (nothing done yet) when one is not."""
    for cmd in commands:
        if cmd.digest in options.trusted_launches:
            continue
        where = f"step {cmd.number} ({cmd.step}) would run a command from the incident bundle ({cmd.source})"
        if options.trusted_launches:
            raise TriageError(f"{where}, and no {FLAG} given matches it (did the bundle change since you read the "
                              f"plan?): read the plan again (triage recover {incident}) — nothing was done")
        if options.yes:
            raise TriageError(f"{where}, which --yes does not confirm: read it in the plan (triage recover "
                              f"{incident}) and add {FLAG} with the digest printed there, or run without --yes to "
                              "confirm it at the prompt — nothing was done")
        options.say(f"{where}:")
        for line in cmd.lines():
            options.say(f"  {line}")
        if not options.confirm("Run this command from the bundle?"):
            raise TriageError(f"{where}: declined — nothing was done")


__all__ = ["BundleCommand", "FLAG", "bundle_commands", "confirm"]
