"""The README's exit-code tables, read and checked against what the commands really return.

Each case names a phrase of a table; the code the table gives that phrase (its row in the
general table, its column in the per-command one) must be the code the command exits with.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from triage.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text[text.index("### Exit codes"):text.index("### Secrets in output")]


def general_code(phrase: str) -> int:
    """The code of the general table's row that says `phrase`."""
    rows = re.findall(r"^\| (\d) \| (.*) \|$", _section(), re.MULTILINE)
    found = [int(code) for code, meaning in rows if phrase in meaning]
    assert len(found) == 1, f"{phrase!r} is in {len(found)} rows of the exit-code table"
    return found[0]


def command_code(command: str, phrase: str) -> int:
    """The code of the per-command table's column where `command`'s row says `phrase`."""
    section = _section()
    header = re.search(r"^\| command \| (.*) \|$", section, re.MULTILINE)
    codes = [int(c) for c in header.group(1).split(" | ")]
    row = re.search(rf"^\| `{re.escape(command)}`[^|]* \| (.*) \|$", section, re.MULTILINE)
    assert row, f"no row for {command} in the per-command exit-code table"
    cells = re.split(r"(?<!\\)\| ", row.group(1) + " ")
    found = [code for code, cell in zip(codes, cells) if phrase in cell]
    assert len(found) == 1, f"{phrase!r} is in {len(found)} cells of the {command} row"
    return found[0]


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "empty").mkdir()
    (tmp_path / "txt").mkdir()
    (tmp_path / "txt" / "notes.txt").write_text("lunch order: two coffees and a sandwich\n")
    return {"missing": str(tmp_path / "nothing-here.log"), "empty": str(tmp_path / "empty"),
            "txt": str(tmp_path / "txt"), "gone": str(tmp_path / "no-incident")}


@pytest.mark.parametrize("phrase, args", [
    ("a path that is not there", ["classify", "{missing}"]),
    ("a directory that holds no file", ["classify", "{empty}"]),
    ("an unrelated `.txt`", ["classify", "{txt}"]),
    ("an unknown option", ["classify", "{txt}", "--no-such-option"]),
])
def test_the_general_table(runner, paths, phrase, args):
    result = runner.invoke(main, [a.format(**paths) for a in args])
    assert result.exit_code == general_code(phrase), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command, phrase, args", [
    ("recover", "the bundle is not there", ["recover", "{gone}"]),
    ("postmortem", "the incident is not there", ["postmortem", "{gone}"]),
    ("note", "the incident is not there", ["note", "{gone}", "a note"]),
    ("timeline", "not an incident directory", ["timeline", "{gone}"]),
    ("timeline", "not an incident directory", ["timeline", "{empty}"]),
    ("watch --once", "no source could be read", ["watch", "--once", "--no-nvml", "--vllm-url", "http://127.0.0.1:9"]),
])
def test_the_per_command_table(runner, paths, command, phrase, args):
    result = runner.invoke(main, [a.format(**paths) for a in args])
    assert result.exit_code == command_code(command, phrase), result.output
    assert "Traceback" not in result.output


def test_a_missing_path_is_bad_input_but_where_click_checks_it():
    section = _section()
    assert "a path that is not there is bad input, 1, except for `audit verify` and `eval`" in section


@pytest.mark.parametrize("args", [["audit", "verify", "{gone}"], ["eval", "{gone}"]])
def test_the_commands_whose_path_click_checks_exit_2(runner, paths, args):
    result = runner.invoke(main, [a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
