"""Help texts read whole at any terminal width: an environment variable's name is never cut in
two by the wrapping, and options that name the same folder say so."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from triage.cli import main

ROOT = Path(__file__).resolve().parent.parent
# Every TRIAGE_* variable the code reads: a piece of one in a help text is a name cut by wrapping.
KNOWN = set(re.findall(r"TRIAGE_[A-Z0-9_]*[A-Z0-9]", "\n".join(p.read_text(encoding="utf-8")
                                                                 for p in (ROOT / "triage").rglob("*.py"))))
COMMANDS = [["classify"], ["serve"], ["recover"], ["watch"], ["postmortem"], ["collect"], ["runbooks"]]


@pytest.mark.parametrize("width", [60, 80, 100])
@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_no_variable_name_is_cut_by_the_wrapping(runner, command, width):
    result = runner.invoke(main, [*command, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    names = set(re.findall(r"TRIAGE_[A-Z0-9_]*", result.output))
    assert names <= KNOWN, f"cut at {width} columns: {sorted(names - KNOWN)}"


def test_recover_runbook_dir_names_the_folder_runbooks_lists(runner):
    result = runner.invoke(main, ["recover", "--help"], terminal_width=200)
    assert "triage runbooks --dir DIR" in " ".join(result.output.split())
