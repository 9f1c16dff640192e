"""Every example output in the docs is what its command prints today (tests/docs_examples.py).

A failure shows the diff; `python -m tests.docs_examples --update` rewrites the blocks.
"""
from __future__ import annotations

import json
import shutil

import pytest

from . import docs_examples as dx

EXAMPLES = list(dx.all_examples())

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="example commands run with bash")


def test_the_readme_has_examples_and_every_output_block_is_one():
    docs = {ex.doc for ex in EXAMPLES}
    assert "README.md" in docs
    commands = [ex.command for ex in EXAMPLES]
    assert "triage classify samples/startup-kv-blowout-v1" in commands          # the quick start
    assert any(c.startswith("triage classify samples/startup-kv-blowout-v1 --json") for c in commands)
    # A fenced block without an info string (or json/text) is output; it must be generated.
    text = (dx.ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    fence_open, outputs = False, []
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if not fence_open and line.strip() in ("```", "```json", "```text"):
                outputs.append(i)
            fence_open = not fence_open
    generated = {ex.line for ex in EXAMPLES if ex.doc == "README.md"}      # the marker is the line before
    # Drawings, not a command's output: the flowchart of "How it decides", the bundle layout.
    drawings = {i for i in outputs if lines[i + 1].startswith(("Is it a GPU OOM?", "INCIDENT/"))}
    missing = [i + 1 for i in outputs if i not in generated and i not in drawings]
    assert not missing, f"README.md output blocks without an <!-- example: ... --> marker at lines {missing}"


@pytest.mark.parametrize("ex", EXAMPLES, ids=[f"{ex.doc}:{ex.line}" for ex in EXAMPLES])
def test_example_output_is_current(ex):
    diff = dx.drift(ex, dx.render(ex))
    assert not diff, f"{ex.doc}:{ex.line} drifted; run `python -m tests.docs_examples --update`\n{diff}"


def test_abridge_keeps_the_shape_and_the_values_that_matter():
    doc = {"schema": "triage.verdict/v1",
           "verdict": {"class": "startup", "confidence": 0.97, "summary": "Start-up OOM: " + "x " * 40,
                       "evidence": [0]},
           "path": [{"question": "q1", "why": "a long reason that goes on and on and on and on"}, {"question": "q2"}],
           "facts": {"argv": ["vllm", "serve", "m", "--max-model-len", "8"]},
           "command": "vllm serve m --max-model-len 29216 --served-model-name a-very-long-served-model-name-x"}
    short = dx.abridge(doc)
    assert short["verdict"]["summary"] == "Start-up OOM: ..."
    assert len(short["path"]) == 1 and short["path"][0]["why"].endswith(" ...")
    assert short["facts"]["argv"] == ["vllm", "serve", "m", "..."]
    assert short["command"] == doc["command"]                  # the command is shown whole
    text = dx.format_compact(short)
    assert json.loads(text) == short                           # still valid JSON
    assert text.splitlines()[1] == '  "schema": "triage.verdict/v1",'


def test_update_rewrites_only_the_blocks(tmp_path, monkeypatch):
    doc = tmp_path / "DOC.md"
    doc.write_text("intro\n\n<!-- example: echo hello -->\n```\nstale\n```\n\ntail ```x```\n", encoding="utf-8")
    monkeypatch.setattr(dx, "ROOT", tmp_path)
    [ex] = dx.examples("DOC.md")
    assert ex.command == "echo hello" and ex.body == "stale\n" and ex.line == 3
    assert "+hello" in dx.drift(ex, dx.render(ex))
    assert dx.update("DOC.md") == 1
    assert doc.read_text(encoding="utf-8") == "intro\n\n<!-- example: echo hello -->\n```\nhello\n```\n\ntail ```x```\n"
    assert dx.update("DOC.md") == 0
