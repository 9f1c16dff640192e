"""A step only a person can do (a `manual` step) under `recover --execute --yes`: handed to a
person, never recorded as done, and open in the timeline until a note closes it.

Real `triage` processes; the runbook touches no process (its health wait aims at a port nobody
listens on), so nothing here needs a server.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .simkit import incident_with_runbook

RUNBOOK = """
id: gateway
title: Shed load at the gateway, then check
applies_to: [gateway]
summary: Test runbook; touches no process.
steps:
  - id: shed-load
    title: Cap concurrency at the gateway
    action: manual
    params: {instruction: "Rate-limit this replica at the gateway to 8 requests"}
    timeout_s: 10
    on_failure: stop
    verify: the operator confirmed the gateway limits
  - id: wait
    title: Wait for a server that never answers
    action: wait_healthy
    params: {retries: 2, backoff_s: 0.1}
    timeout_s: 2
    on_failure: continue
    verify: it never answers
"""


def triage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triage", *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRIAGE_LOCK_FILE": str(tmp_path / "recover.lock"), "COLUMNS": "200"}


@pytest.fixture
def incident(tmp_path: Path) -> Path:
    return incident_with_runbook(tmp_path, "gateway", RUNBOOK)


def run_yes(incident: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return triage("recover", str(incident), "--execute", "--yes", "--runbook", "gateway", "--runbook-dir",
                  str(incident.parent / "books"), "--url", "http://127.0.0.1:9", env=env)


def timeline(incident: Path, env: dict[str, str]) -> dict:
    done = triage("timeline", str(incident), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_yes_hands_a_manual_step_to_a_person_and_the_timeline_keeps_it_open(incident, env):
    done = run_yes(incident, env)
    assert done.returncode == 0, done.stderr
    ends = [json.loads(line) for line in (incident / "actions.jsonl").read_text().splitlines()]
    manual = next(r for r in ends if r["step"] == "shed-load" and r["phase"] == "end")
    assert manual["result"] == "handed"
    assert "acknowledged" not in json.dumps(ends)
    assert "handed to a person" in manual["output_tail"]
    assert "open, for a person: shed-load" in done.stdout          # said again where the run ends
    assert "#done:shed-load" in done.stdout

    tl = timeline(incident, env)
    row = next(e for e in tl["events"] if "'shed-load'" in e["text"])
    assert "handed to a person, open" in row["text"] and "Rate-limit this replica" in row["text"]
    assert not row.get("until")
    assert any("'shed-load' was handed to a person" in m for m in tl["missing"])

    note = triage("note", str(incident), "#done:shed-load gateway capped at 8 per replica", env=env)
    assert note.returncode == 0, note.stderr
    tl = timeline(incident, env)
    row = next(e for e in tl["events"] if "'shed-load'" in e["text"])
    assert "handed to a person, done by notes.jsonl:1" in row["text"]
    assert "notes.jsonl:1" in row["sources"] and row["until"]
    assert not any("handed to a person" in m for m in tl["missing"])


def test_a_note_for_another_step_or_from_before_the_handoff_does_not_close_it(incident, env):
    early = triage("note", str(incident), "#done:shed-load done before anyone asked", "--at", "2020-01-01T00:00:00Z",
                   env=env)
    assert early.returncode == 0, early.stderr
    assert run_yes(incident, env).returncode == 0
    assert triage("note", str(incident), "#done:drain not this one", env=env).returncode == 0
    tl = timeline(incident, env)
    assert any("'shed-load' was handed to a person" in m for m in tl["missing"])

