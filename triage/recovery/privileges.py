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

With no server process left to read (it crashed), the identity comes from what this host's key
authenticates: the user an earlier run relaunched this server as (recorded in full in
actions.jsonl). Failing that, a recovery running as root takes the owner of the incident
directory — never root for a directory root does not own: whoever wrote the bundle chose its
command, and root running it would hand them root. The plan says which it used.
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

from ..live.procs import read_status
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
        fields = read_status(pid)
    except OSError as exc:
        return f"cannot read /proc/{pid}/status ({exc.strerror or exc})"
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


def server_identity(pids: Iterable[int], fallback: RunAs | None = None) -> RunAs:
    """The identity every process about to be stopped shares, read before any is stopped;
    `fallback` (see identity_without_server) when no server process runs."""
    pids = list(pids)
    if not pids:
        return fallback or RunAs(None, f"the user running recovery ({Creds.mine().describe()}): no server process "
                                       "is running to take the user from")
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


def identity_without_server(records: Iterable[Mapping[str, object]], incident: str | os.PathLike[str],
                            me: Creds | None = None) -> RunAs:
    """Who relaunches a server no process of which is left: the identity an authenticated record says
    an earlier run relaunched it as (the newest), else (as root) the incident directory's owner."""
    me = me or Creds.mine()
    for rec in reversed(list(records)):
        creds = _recorded_creds(rec)
        if creds is not None:
            return RunAs(creds, f"actions.jsonl:{rec.get('seq')}: the user an earlier run relaunched this server as "
                                "(no server process is running)")
    if me.uid != 0:
        return RunAs(None, f"the user running recovery ({me.describe()}): no server process is running to take the "
                           "user from")
    try:
        owner = os.stat(incident, follow_symlinks=False).st_uid
    except OSError as exc:
        return RunAs(None, str(incident), f"no server process is running and the incident directory cannot be read "
                                          f"({exc.strerror or exc}): whose server this is is unknown")
    if owner == 0:
        return RunAs(None, "root: no server process is running, no authenticated record names another user, and the "
                           "incident directory is root's")
    creds = user_creds(owner)
    if creds is None:
        return RunAs(None, f"uid {owner}", f"no server process is running and the incident directory's owner, uid "
                                           f"{owner}, has no passwd entry: a relaunch would run as root")
    return RunAs(creds, f"the owner of the incident directory (no server process is running, and no authenticated "
                        "record names its user): never root for a bundle root does not own")


def _recorded_creds(rec: Mapping[str, object]) -> Creds | None:
    data = rec.get("data") if rec.get("phase") == "end" else None
    launched = data.get("launched") if isinstance(data, dict) else None
    if not isinstance(launched, dict) or launched.get("driver") != "process":
        return None
    uid, gid, groups = launched.get("uid"), launched.get("gid"), launched.get("groups")
    if not isinstance(uid, int) or isinstance(uid, bool) or uid < 0:
        return None
    if isinstance(gid, int) and not isinstance(gid, bool) and isinstance(groups, list) \
            and all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        return Creds(uid, gid, tuple(sorted(set(groups))))
    return user_creds(uid)                      # a record from before gid and groups were kept


def user_creds(uid: int) -> Creds | None:
    """A user's identity from the passwd and group databases, None without a passwd entry."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return None
    try:
        groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    except OSError:
        groups = (entry.pw_gid,)
    return Creds(uid, entry.pw_gid, groups)


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


__all__ = ["Creds", "Dropped", "RunAs", "cwd_problem", "exec_env", "identity_problem", "identity_without_server",
           "popen_identity", "read_creds", "relaunch_env", "run_uid", "server_identity", "user_creds"]
