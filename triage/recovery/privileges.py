"""Who a relaunch runs as, and which of its environment it may keep.

A relaunch never gains privileges:

* it runs as the stopped server's own uid, gid and supplementary groups, read from
  /proc/PID/status while the server still runs. A recovery running as root switches to them
  (root only when the server itself ran as root); any other user can only relaunch a server that
  ran as exactly itself, and is refused otherwise. Identities that cannot be read, or that differ
  between the server's processes, are refused too.
* environment variables that change which code a program loads (`triage/data/exec_env.yaml`)
  are carried only from the environment of the very user the relaunch runs as; one that came
  from the incident bundle never reaches a relaunch as root.
* a relaunch as root never runs in a working directory another user owns or can write.

With no server process left to read (it crashed), the relaunch runs as the user who runs
recovery, and the plan says so.
"""
from __future__ import annotations

import os
import pwd
import grp
import stat
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping

import yaml

from ..paths import data_file

EXEC_ENV_DATA = data_file("exec_env.yaml")


@dataclass(frozen=True)
class Creds:
    uid: int
    gid: int
    groups: tuple[int, ...]              # supplementary groups, sorted

    @classmethod
    def mine(cls) -> "Creds":
        return cls(os.geteuid(), os.getegid(), tuple(sorted(set(os.getgroups()))))

    def same(self, other: "Creds") -> bool:
        return (self.uid, self.gid, set(self.groups)) == (other.uid, other.gid, set(other.groups))

    def describe(self) -> str:
        groups = ",".join(str(g) for g in self.groups) or "none"
        return f"uid {self.uid} ({_user(self.uid)}), gid {self.gid} ({_group(self.gid)}), groups {groups}"


@dataclass(frozen=True)
class RunAs:
    """Who the relaunch runs as: `creds` None means the user running recovery (no server to read)."""
    creds: Creds | None
    source: str
    problem: str | None = None           # why no relaunch may run (unreadable, mixed users)


def read_creds(pid: int) -> Creds | str:
    """The process's uid, gid and groups, or why they cannot be used."""
    try:
        text = open(f"/proc/{pid}/status", encoding="utf-8", errors="replace").read()
    except OSError as exc:
        return f"cannot read /proc/{pid}/status ({exc.strerror or exc})"
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    try:
        uids = [int(v) for v in fields["Uid"]]
        gids = [int(v) for v in fields["Gid"]]
        groups = tuple(sorted({int(v) for v in fields.get("Groups", [])}))
    except (KeyError, ValueError):
        return f"/proc/{pid}/status has no readable Uid/Gid lines"
    if len(set(uids)) != 1 or len(set(gids)) != 1 or not uids or not gids:
        # A set-uid program (real and effective ids differ): which one to relaunch as is not ours to guess.
        return f"pid {pid} runs with mixed ids (uids {uids}, gids {gids})"
    return Creds(uids[0], gids[0], groups)


def server_identity(pids: Iterable[int]) -> RunAs:
    """The identity every process about to be stopped shares, read before any is stopped."""
    pids = list(pids)
    if not pids:
        return RunAs(None, f"the user running recovery ({Creds.mine().describe()}): no server process is running "
                           "to take the user from")
    seen: dict[int, Creds] = {}
    for pid in pids:
        creds = read_creds(pid)
        if isinstance(creds, str):
            return RunAs(None, f"pid {pid}", f"cannot tell whose server this is: {creds}")
        seen[pid] = creds
    first_pid, first = next(iter(seen.items()))
    for pid, creds in seen.items():
        if not creds.same(first):
            return RunAs(None, f"pid {first_pid}", f"the server's processes run as different users (pid {first_pid}: "
                                                   f"{first.describe()}; pid {pid}: {creds.describe()})")
    return RunAs(first, f"the stopped server (pid {first_pid})")


def identity_problem(run_as: RunAs | None, me: Creds | None = None) -> str | None:
    """Why this recovery cannot relaunch as `run_as`, or None."""
    if run_as is None:
        return None
    if run_as.problem:
        return run_as.problem + "; relaunch it by hand as its user"
    me = me or Creds.mine()
    if run_as.creds is None or me.uid == 0 or run_as.creds.same(me):
        return None
    return (f"the server runs as {run_as.creds.describe()} and this recovery as {me.describe()}: only root can "
            "relaunch it as its own user; run triage as that user (or as root)")


def run_uid(run_as: RunAs | None, me: Creds | None = None) -> int:
    me = me or Creds.mine()
    return run_as.creds.uid if run_as and run_as.creds else me.uid


def popen_identity(run_as: RunAs | None, me: Creds | None = None) -> dict[str, object]:
    """subprocess.Popen arguments that switch to the server's identity (root only; else nothing to switch)."""
    me = me or Creds.mine()
    if run_as is None or run_as.creds is None or me.uid != 0:
        return {}
    c = run_as.creds
    return {"user": c.uid, "group": c.gid, "extra_groups": list(c.groups)}


def cwd_problem(cwd: str | None, uid: int) -> str | None:
    """A relaunch as root only runs in a directory root owns and no one else can write:
    `python -m` puts the working directory first on sys.path."""
    if uid != 0 or not cwd:
        return None
    try:
        st = os.stat(cwd)
    except OSError as exc:
        return f"cannot check the working directory {cwd}: {exc.strerror or exc}"
    if st.st_uid != 0:
        return (f"the working directory {cwd} belongs to uid {st.st_uid} ({_user(st.st_uid)}): a relaunch as root "
                "there could run that user's files")
    if st.st_mode & 0o022:
        return (f"the working directory {cwd} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}): "
                "a relaunch as root there could run files anyone put there")
    return None


# -- environment --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExecEnv:
    names: frozenset[str]
    prefixes: tuple[str, ...]

    def matches(self, name: str) -> bool:
        return name in self.names or name.startswith(self.prefixes)


@lru_cache(maxsize=1)
def exec_env() -> ExecEnv:
    data = yaml.safe_load(EXEC_ENV_DATA.read_text(encoding="utf-8"))
    return ExecEnv(frozenset(map(str, data["names"])), tuple(map(str, data["prefixes"])))


@dataclass(frozen=True)
class Dropped:
    name: str
    why: str


def relaunch_env(base: Mapping[str, str], base_uid: int | None, overrides: Mapping[str, str],
                 from_bundle: Iterable[str], uid: int) -> tuple[dict[str, str], list[Dropped]]:
    """The relaunch's environment: `base` (whose owner is `base_uid`) plus `overrides`, minus the
    code-loading variables it may not carry into a process running as `uid`."""
    rules = exec_env()
    bundle = set(from_bundle)
    env: dict[str, str] = {}
    dropped: list[Dropped] = []
    for name, value in base.items():
        if rules.matches(name) and base_uid != uid:
            owner = "an unknown user" if base_uid is None else f"uid {base_uid}"
            dropped.append(Dropped(name, f"from the environment of {owner}, and the relaunch runs as uid {uid}"))
            continue
        env[name] = value
    for name, value in overrides.items():
        if rules.matches(name) and name in bundle and uid == 0:
            dropped.append(Dropped(name, "from the incident bundle, and the relaunch runs as root"))
            continue
        env[name] = value
    return env, dropped


def bundle_env_dropped(overrides: Mapping[str, str], from_bundle: Iterable[str]) -> list[str]:
    """For drivers that do not start the process (systemctl): the bundle's code-loading variables
    are never written, since the unit's own user, root maybe, runs them."""
    rules = exec_env()
    return [n for n in overrides if n in set(from_bundle) and rules.matches(n)]


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no passwd entry"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return "no group entry"


__all__ = ["Creds", "Dropped", "RunAs", "cwd_problem", "exec_env", "identity_problem", "popen_identity",
           "read_creds", "relaunch_env", "run_uid", "server_identity"]
