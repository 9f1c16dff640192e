"""The /proc layer recovery and collect share: a process read whole, its cwd, environment and ids."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from triage.live import procs
from triage.recovery.privileges import Creds, read_creds


@pytest.fixture
def child(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=tmp_path,
                            env={**os.environ, "TRIAGE_PROCS_PROBE": "here"})
    yield proc
    proc.kill()
    proc.wait()


def test_a_process_is_read_with_its_identity_cwd_and_environment(child, tmp_path):
    info = procs.read_proc(child.pid)
    assert info is not None and info.ppid == os.getpid() and info.cmdline[0] == sys.executable
    assert info.same_process(procs.read_proc(child.pid)) and info.start_utc is not None
    assert procs.read_cwd(child.pid) == str(tmp_path)
    assert procs.read_environ(child.pid)["TRIAGE_PROCS_PROBE"] == "here"
    assert len(procs.read_environ(child.pid, 8)) <= 1          # only the first bytes were read
    assert [p.pid for p in procs.descendants(procs.read_proc(os.getpid()))].count(child.pid) == 1


def test_status_gives_the_ids_privileges_relaunch_with(child):
    fields = procs.read_status(child.pid)
    assert int(fields["Uid"][0]) == os.geteuid()
    assert read_creds(child.pid).same(Creds.mine())


def test_a_gone_process_reads_as_none_or_an_error(child):
    child.kill()
    child.wait()
    assert procs.read_proc(child.pid) is None and procs.read_cwd(child.pid) is None
    with pytest.raises(OSError):
        procs.read_environ(child.pid)
    assert "cannot read /proc" in read_creds(child.pid)
