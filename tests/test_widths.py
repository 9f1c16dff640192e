"""Human output reads whole at 80 and 120 columns and when stdout is not a terminal.

Every human command is run through the CLI with COLUMNS=80 and 120 over several samples, and once
with room for every line (COLUMNS=20000, "unwrapped"). Then:
* no line is wider than COLUMNS, and none ends in blanks;
* nothing is lost to the width: the narrow output holds exactly the characters of the unwrapped one
  (blanks and box-drawing aside), so no path, node name or number was cut behind an ellipsis;
* no `…` ends a piece of a file path or node name of the bundle, and every evidence path and node
  the output names appears whole;
* no number of three or more digits is split across a line break;
* a wrapped line keeps its indent, and lines that start with a mark (`•`, `1.`, `[2]`, `note:`)
  and a recovery plan's step details (`new:     vllm serve ...`) hang deeper than their first line.
"""
from __future__ import annotations

import re
import shutil
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from triage.cli import main
from triage.output import DEFAULT_WIDTH, output_width

from tests.conftest import CORPUS, sample

WIDTHS = (80, 120)
WIDE = 20000                # room for every line: the output unwrapped

# Kept to the samples that differ in layout (a fleet with nodes, an audit trail, several files,
# nvidia-smi readings, a host OOM, an unknown): the file runs in well under 30 s.
CLASSIFY = ("incident-a-multimodal-fleet", "prefix-cache-oom-b", "startup-other-tenant", "chronic-leak-nvidia-smi",
            "not-gpu-host-oom", "unknown-bare-oom", "startup-kv-blowout-v1")
TIMELINE = ("incident-a-multimodal-fleet", "prefix-cache-oom-b", "startup-other-tenant")
RECOVER = ("prefix-cache-oom-b", "startup-other-tenant", "chronic-fragmentation")

BOX = re.compile(r"[\u2500-\u257f]")                       # rich's panel and table borders
NUMBER = re.compile(r"\d[\d.,:]*\d")
MARKED = re.compile(r"\s*(•|\d+\.|\[\d+(/\d+)?\]|note:|by hand:) ")


@lru_cache(maxsize=None)
def _run(args: tuple[str, ...], width: int) -> str:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": str(width)})
    assert result.exit_code in (0, 1, 3), (args, result.exit_code, result.stderr, result.exception)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    return result.stdout


def _squash(text: str) -> str:
    return "".join(BOX.sub("", text).split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


@lru_cache(maxsize=None)
def _timeline(root: Path):
    from triage.timeline import build_timeline

    return build_timeline(root)


def _known_names(root: Path) -> set[str]:
    """Every file of the bundle (relative path), and every node the timeline finds in it for the
    samples whose timeline is built anyway."""
    names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    return names | (set(_timeline(root).nodes) if root.name in TIMELINE else set())


def check_output(args: tuple[str, ...], *, names: set[str] = frozenset(), whole: set[str] = frozenset(),
                 plan: bool = False) -> None:
    wide = _run(args, WIDE)
    assert wide.strip(), f"{args}: no output"
    for width in WIDTHS:
        text = _run(args, width)
        where = f"{' '.join(args)} at {width} columns"
        lines = text.splitlines()
        for line in lines:
            assert cell_len(line) <= width, f"{where}: a line of {cell_len(line)} columns:\n{line}"
            assert line == line.rstrip(), f"{where}: a line ends in blanks: {line!r}"
        # Nothing lost or cut behind an ellipsis: the same characters as the unwrapped output.
        assert _squash(text) == _squash(wide), f"{where}: content differs from the unwrapped output"
        # No number split across a line break.
        wanted = Counter(n for n in NUMBER.findall(wide) if sum(c.isdigit() for c in n) >= 3)
        found = Counter(NUMBER.findall(text))
        split = [n for n, count in wanted.items() if found[n] < count]
        assert not split, f"{where}: numbers split across lines: {split[:5]}"
        # Paths and node names whole; never a piece of one before an ellipsis.
        for name in whole:
            assert any(name in line for line in lines), f"{where}: {name!r} does not appear whole"
        for line in lines:
            for piece in re.findall(r"(\S+)…", line):
                cut = [n for n in names if n != piece and n.startswith(piece) and len(piece) > 2]
                assert not cut, f"{where}: {piece!r}… is a cut-off {cut[0]!r}"
        _check_indents(wide.splitlines(), lines, where, plan)


def _check_indents(wide: list[str], narrow: list[str], where: str, plan: bool) -> None:
    """Match each unwrapped line with the run of narrow lines it became; the run starts at the
    line's own indent and its continuation lines are indented at least as far (further after a
    mark or a label, and in a recovery plan's step details)."""
    j = 0
    for logical in wide:
        key = _squash(logical)
        if not key:
            continue
        run, got = [], ""
        while len(got) < len(key) and j < len(narrow):
            line = narrow[j]
            j += 1
            if _squash(line):
                run.append(line)
                got += _squash(line)
        assert got == key, f"{where}: could not match the wrapped lines of:\n{logical}\nwith:\n" + "\n".join(run)
        if BOX.search(logical) or len(run) == 1:
            continue
        first = _indent(logical)
        assert _indent(run[0]) == first, f"{where}: first line lost its indent:\n" + "\n".join(run)
        strict = bool(MARKED.match(logical)) or (plan and first == 5)
        for line in run[1:]:
            deeper = _indent(line) > first if strict else _indent(line) >= first
            assert deeper, f"{where}: a continuation line lost its (hanging) indent:\n" + "\n".join(run)


@pytest.mark.parametrize("name", CLASSIFY)
def test_classify(name):
    root = sample(name)
    logs = {p.relative_to(root).as_posix() for p in (root / "logs").rglob("*") if p.is_file()}
    assert logs
    check_output(("classify", str(root)), names=_known_names(root), whole=logs)      # listed under Inputs


@pytest.mark.parametrize("name", ("startup-other-tenant", "startup-kv-blowout-v1"))
def test_classify_explain(name):
    root = sample(name)
    check_output(("classify", "--explain", str(root)), names=_known_names(root))


@pytest.mark.parametrize("name", TIMELINE)
def test_timeline(name):
    root = sample(name)
    tl = _timeline(root)
    whole = set(tl.nodes) | {e.sources[0].rsplit(":", 1)[0] for e in tl.events}
    check_output(("timeline", str(root)), names=_known_names(root), whole=whole)


@pytest.mark.parametrize("name", RECOVER)
def test_recover_plan(name):
    root = sample(name)
    check_output(("recover", str(root)), names=_known_names(root), plan=True)
    plan = _run(("recover", str(root)), 80)
    assert re.search(r"^1\. ", plan, re.M) and "verified by:" in plan


def test_eval_tables(tmp_path):
    # A slice of the corpus (every fourth case) keeps it quick; the tables and the case list are the same layout.
    for case in sorted(CORPUS.glob("*.yaml"))[::4]:
        shutil.copy(case, tmp_path / case.name)
    check_output(("eval", "-v", str(tmp_path)))
    text = _run(("eval", "-v", str(tmp_path)), 80)
    assert "Per class" in text and "Per engine family" in text and "Cases" in text


def test_eval_long_case_names(tmp_path):
    """Case names too long for aligned columns at 80 go on a line of their own, whole."""
    src = next(p for p in sorted(CORPUS.glob("*.yaml")))
    shutil.copy(src, tmp_path / "a-case-name-that-is-much-longer-than-any-column-should-be.yaml")
    check_output(("eval", "-v", str(tmp_path)), whole={"a-case-name-that-is-much-longer-than-any-column-should-be"})


def test_runbooks_list():
    check_output(("runbooks",))
    lines = _run(("runbooks",), 80).splitlines()
    assert all(line.startswith(" " * 15) for line in lines if not line[:1].isalpha())   # under the title


def test_audit_verify_and_note(tmp_path):
    root = tmp_path / "incident"
    shutil.copytree(sample("prefix-cache-oom-b"), root)
    check_output(("audit", "verify", str(root)))
    assert "not authenticated: 12" in _run(("audit", "verify", str(root)), 80)
    text = ("rolled gpu-node-07 back to 0.6.2 with --gpu-memory-utilization 0.85 after logs/vllm.log.gz:3159 "
            "showed 245.61 MiB short; 10214 requests were in flight")
    result = CliRunner().invoke(main, ["note", str(root), text, "--at", "15:10"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines) and all(line.startswith("  ") for line in lines[1:])
    assert "".join(result.stdout.split()).find("".join(text.split())) >= 0
    for token in ("gpu-node-07", "logs/vllm.log.gz:3159", "245.61", "10214", "--gpu-memory-utilization"):
        assert any(token in line for line in lines), token


def test_postmortem_summary(tmp_path, monkeypatch):
    root = tmp_path / "incident"
    shutil.copytree(sample("incident-a-multimodal-fleet"), root)
    monkeypatch.chdir(tmp_path)
    for width in WIDTHS:
        result = CliRunner().invoke(main, ["postmortem", "incident", "-o", "pm.md"], env={"COLUMNS": str(width)})
        assert result.exit_code == 0, result.stderr
        assert all(len(line) <= width for line in result.stdout.splitlines())


def test_piped_output_is_80_columns_unless_COLUMNS_says_otherwise(monkeypatch):
    """The one width rule (triage.output.output_width): COLUMNS, else the terminal's width on a
    terminal, else 80 -- also when stdin or stderr is a terminal and stdout is a pipe."""
    import io
    import os

    class Tty(io.StringIO):
        def isatty(self):
            return True

        def fileno(self):
            return 1

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=None: os.terminal_size((150, 40)))
    assert output_width(io.StringIO()) == DEFAULT_WIDTH == 80
    assert output_width(Tty()) == 150
    monkeypatch.setenv("COLUMNS", "97")
    assert output_width(io.StringIO()) == output_width(Tty()) == 97
    monkeypatch.setenv("COLUMNS", "0")
    assert output_width(io.StringIO()) == 80

    result = CliRunner().invoke(main, ["timeline", str(sample("incident-a-multimodal-fleet"))], env={"COLUMNS": None})
    assert result.exit_code == 0
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    assert "gpu-node-07" in result.stdout and "gpu-nod…" not in result.stdout


@pytest.mark.parametrize("width", [80, 120])
def test_the_table_of_several_bundles_keeps_names_whole_and_numbers_with_their_units(width):
    from tests.conftest import SAMPLES

    result = CliRunner().invoke(main, ["classify", str(SAMPLES)], env={"COLUMNS": str(width)})
    lines = result.stdout.splitlines()
    assert all(len(line) <= width for line in lines)
    for bundle in (p.name for p in SAMPLES.iterdir() if (p / "incident.yaml").exists()):
        assert any(line.split()[:1] == [bundle] for line in lines), bundle      # whole, never cut
    # A number is never left at the end of a line without its unit.
    assert not any(re.search(r"\d$", line) and re.match(r"\s+(GiB|MiB|h|s)\b", nxt)
                   for line, nxt in zip(lines, lines[1:]))
