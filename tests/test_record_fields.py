"""A field of the wrong JSON type in an actions.jsonl or notes.jsonl record: that record is reported
with its file:line and left out; the timeline and the postmortem are built from the rest, in a
bundle directory and in the same bundle packed as .tar.gz or .zip."""
from __future__ import annotations

import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from triage.cli import main
from triage.errors import ExitCode
from triage.postmortem.audit_steps import read_steps
from triage.timeline import build_timeline
from triage.timeline.actions import ACTION_FIELDS
from triage.timeline.fields import wrong_field
from triage.timeline.notes import NOTE_FIELDS

from tests.conftest import sample

DRAIN_STEP_OBJECT = ('{"seq":1,"time":"2024-10-17T14:55:30Z","phase":"start","step":{"x":1},"action":"drain",'
                     '"run_id":"r"}\n')
GOOD_STEP = {"time": "2024-10-17T14:56:00Z", "run_id": "r", "step": "v", "action": "verify", "phase": "start"}
GOOD_END = {**GOOD_STEP, "time": "2024-10-17T14:56:10Z", "phase": "end", "result": "ok", "duration_s": 10}
# One value of every JSON type; each field is given each type it may not have.
VALUES = {"null": None, "boolean": True, "integer": 3, "number": 2.5, "string": "s", "array": [1], "object": {"x": 1}}


def _bundle(tmp_path: Path, actions: str | None = None, notes: str | None = None) -> Path:
    root = tmp_path / "INC"
    shutil.copytree(sample("prefix-cache-oom-b"), root)
    if actions is not None:
        (root / "actions.jsonl").write_text(actions)
    if notes is not None:
        (root / "notes.jsonl").write_text(notes)
    return root


def _packed(root: Path, how: str) -> Path:
    if how == "dir":
        return root
    if how == "tar.gz":
        out = root.parent / "inc.tar.gz"
        with tarfile.open(out, "w:gz") as tar:
            tar.add(root, arcname=root.name)
        return out
    out = root.parent / "inc.zip"
    with zipfile.ZipFile(out, "w") as zf:
        for path in sorted(root.rglob("*")):
            zf.write(path, path.relative_to(root.parent).as_posix())
    return out


def _wrong_values(allowed: frozenset[str]) -> list[object]:
    ok = set(allowed) | ({"integer"} if "number" in allowed else set())
    return [v for k, v in VALUES.items() if k not in ok]


ACTION_CASES = [(name, value) for name, allowed in ACTION_FIELDS.items() for value in _wrong_values(allowed)]
NOTE_CASES = [(name, value) for name, allowed in NOTE_FIELDS.items() for value in _wrong_values(allowed)]


@pytest.mark.parametrize("how", ["dir", "tar.gz", "zip"])
@pytest.mark.parametrize("command", [["timeline"], ["timeline", "--json"], ["timeline", "--csv"], ["postmortem"]])
def test_a_step_that_is_an_object_is_reported_not_an_internal_error(tmp_path, runner, how, command):
    target = _packed(_bundle(tmp_path, actions=DRAIN_STEP_OBJECT), how)
    args = command + [str(target)] + (["-o", str(tmp_path / "pm.md")] if command == ["postmortem"] else [])
    result = runner.invoke(main, args)
    assert "internal error" not in result.output, result.output
    assert result.exit_code == ExitCode.OK, result.output
    shown = result.stdout + result.stderr + ((tmp_path / "pm.md").read_text() if command == ["postmortem"] else "")
    assert "actions.jsonl:1: 'step' is an object, not a string or null" in shown
    if command[-1] == "--json":
        json.loads(result.stdout)


@pytest.mark.parametrize(("name", "value"), ACTION_CASES)
def test_an_action_field_of_the_wrong_type_leaves_out_that_record_only(tmp_path, name, value):
    bad = {**GOOD_STEP, "time": "2024-10-17T14:55:00Z", "step": "d", "action": "drain", name: value}
    lines = [bad, GOOD_STEP, GOOD_END]
    root = _bundle(tmp_path, actions="".join(json.dumps(r) + "\n" for r in lines))
    tl = build_timeline(root)
    cited = [p for p in tl.problems if p.startswith("actions.jsonl:1: ") and repr(name) in p]
    assert cited and "left out" in cited[0], tl.problems
    steps = [e for e in tl.events if e.sources[0].startswith("actions.jsonl")]
    assert [e.sources[0] for e in steps] == ["actions.jsonl:2"]
    audit = read_steps(root)
    assert [s.sources[0] for s in audit.steps] == ["actions.jsonl:2"]
    assert any(p.startswith("actions.jsonl:1: ") and repr(name) in p for p in audit.problems)


@pytest.mark.parametrize(("name", "value"), NOTE_CASES)
def test_a_note_field_of_the_wrong_type_leaves_out_that_note_only(tmp_path, name, value):
    good = {"time": "2024-10-17T14:49:00Z", "text": "looking", "author": "a", "recorded_at": "2024-10-17T14:49:00Z"}
    root = _bundle(tmp_path, notes="".join(json.dumps(r) + "\n" for r in [{**good, name: value}, good]))
    tl = build_timeline(root)
    assert any(p.startswith("notes.jsonl:1: ") and repr(name) in p for p in tl.problems), tl.problems
    assert [e.sources[0] for e in tl.events if e.kind == "note"] == ["notes.jsonl:2"]


def test_wrong_field_names_the_first_field_of_a_wrong_type():
    allowed = {"a": frozenset({"string", "null"}), "n": frozenset({"number"}), "i": frozenset({"integer"})}
    assert wrong_field({"a": None, "n": 3, "i": 4, "other": {}}, allowed) is None     # an integer is a number
    assert wrong_field({"a": {"x": 1}}, allowed) == "'a' is an object, not a string or null"
    assert wrong_field({"i": True}, allowed) == "'i' is a boolean, not an integer"     # JSON true is not 1
    assert wrong_field({"n": "1"}, allowed) == "'n' is a string, not a number"
