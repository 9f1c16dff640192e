"""Kernel messages that decide "GPU OOM or not": NVIDIA Xid events and the host OOM killer.

`dmesg --time-format=iso` gives each line a full UTC-offset time the log reader understands; where
dmesg is missing, /dev/kmsg is read directly and its boot-relative times are turned into the same
form. Only the matching lines are kept (a ring buffer also holds unrelated and personal things),
the last MAX_LINES of them. kernel.dmesg_restrict=1 makes both unreadable without root: the
manifest then says so.
"""
from __future__ import annotations

import errno
import os
import re
from datetime import datetime, timezone

from ...redact import mask_text
from ..command import run as run_command
from ..procs import boot_time
from ..source import SourceRun

WANTED = re.compile(r"NVRM|Xid|oom-kill|[Oo]ut of memory|Killed process|oom_reaper|invoked oom-killer|"
                    r"Memory cgroup out of memory")
MAX_LINES = 5000
MAX_KMSG_RECORDS = 200_000
RESTRICTED = "permission denied (kernel.dmesg_restrict=1: run as root)"


def dmesg(run: SourceRun) -> None:
    done = run_command(["dmesg", "--time-format=iso"], run.left(), env={**os.environ, "LC_ALL": "C"})
    if done.ok:
        lines, source = done.stdout.decode("utf-8", errors="replace").splitlines(), "dmesg --time-format=iso"
    elif done.problem and "not found" in done.problem:
        lines, problem = _kmsg(run)
        if lines is None:
            run.fail(f"dmesg not found on PATH; /dev/kmsg: {problem}")
            return
        source = "/dev/kmsg"
    else:
        permission = "not permitted" in str(done.problem) or "denied" in str(done.problem)
        run.fail(RESTRICTED if permission else str(done.problem))
        return
    kept = [mask_text(line) for line in lines if WANTED.search(line)][-MAX_LINES:]
    if not kept:
        run.ok("no Xid or OOM-killer lines")
        return
    run.write("gpu/dmesg.log", ("\n".join(kept) + "\n").encode(), source)
    run.ok(f"{len(kept)} Xid / OOM-killer line{'s' if len(kept) != 1 else ''}")


def _kmsg(run: SourceRun) -> tuple[list[str] | None, str]:
    """The kernel ring buffer from /dev/kmsg, each line as `ISO-TIME message`."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        return None, RESTRICTED
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    boot = boot_time()
    lines: list[str] = []
    try:
        for _ in range(MAX_KMSG_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break                                 # all records read
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue                          # a record overwritten while reading: skip it
                if exc.errno in (errno.EPERM, errno.EACCES):
                    return None, RESTRICTED
                raise
            if not record:
                break
            line = _kmsg_line(record.decode("utf-8", errors="replace"), boot)
            if line is not None:
                lines.append(line)
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return lines, ""


def _kmsg_line(record: str, boot: float | None) -> str | None:
    """`6,1234,5678901234,-;text` -> `2026-03-12T14:17:03,123456+00:00 text` (dmesg's iso form)."""
    head, _, text = record.partition(";")
    fields = head.split(",")
    if len(fields) < 3 or not fields[2].isdigit():
        return None
    text = text.split("\n", 1)[0]                   # continuation lines (" KEY=value") are dropped
    if boot is None:
        return f"[{int(fields[2]) / 1e6:12.6f}] {text}"
    when = datetime.fromtimestamp(boot + int(fields[2]) / 1e6, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00 ") + text
