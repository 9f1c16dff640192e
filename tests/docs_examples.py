"""The example outputs in the docs are generated, so they cannot drift from what the tool prints.

Each fenced block that follows a comment `<!-- example: COMMAND -->` in README.md (or another
file of DOCS) is COMMAND's stdout. COMMAND is a shell command run with bash in the repository
root, where `triage` and `python` are this interpreter's (`python -m triage`), in a fixed
environment: 90 columns, no colour, not a terminal, UTC, C.UTF-8, a fresh empty HOME and TMPDIR
(so no audit key, lock or state of this host's is read or written). `$TMPDIR` in a command is that
fresh directory, and its path is printed as `/tmp` in the output; trailing spaces are dropped.
Append `2>&1` to show stderr too. A command's output that depends on the clock, this host or
PIDs has no place in an example: choose a bundled sample, or a command whose output does not.

    python -m tests.docs_examples            # check every block: a diff and exit 1 when one drifted
    python -m tests.docs_examples --update   # rewrite the blocks in place (only the blocks)
    python -m tests.docs_examples abridge    # stdin: a triage.verdict/v1 JSON; stdout: its short form

`tests/test_docs_examples.py` runs the check. Other engineers' changes to what a command prints
(wording, widths, advice) show up there; rerun `--update` after merging them.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "samples/README.md", "benchmarks/README.md")
WIDTH = 90
TIMEOUT_S = 120

# The comment, the opening fence (any info string) and the block up to its closing fence.
_BLOCK = re.compile(r"^<!-- example: (?P<cmd>.+?) -->\n(?P<fence>```[^\n]*)\n(?P<body>.*?)^```[ \t]*$",
                    re.MULTILINE | re.DOTALL)
_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)


@dataclass(frozen=True)
class Example:
    doc: str          # path relative to the repository root
    line: int         # 1-based line of the marker comment
    command: str
    body: str         # the block's current text (lines ending in \n)
    start: int        # offsets of the body in the file's text
    end: int


def examples(doc: str, text: str | None = None) -> list[Example]:
    text = (ROOT / doc).read_text(encoding="utf-8") if text is None else text
    return [Example(doc, text.count("\n", 0, m.start()) + 1, m.group("cmd").strip(), m.group("body"),
                    m.start("body"), m.end("body")) for m in _BLOCK.finditer(text)]


def all_examples() -> Iterator[Example]:
    for doc in DOCS:
        if (ROOT / doc).exists():
            yield from examples(doc)


def run(command: str) -> str:
    """COMMAND's stdout in the fixed environment, normalised (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="docs-examples-") as scratch:
        base = Path(scratch)
        bindir, home, tmpdir = base / "bin", base / "home", base / "tmp"
        for d in (bindir, home, tmpdir):
            d.mkdir()
        for name, argv in (("triage", f'"{sys.executable}" -m triage'), ("python", f'"{sys.executable}"')):
            shim = bindir / name
            shim.write_text(f'#!/bin/sh\nexec {argv} "$@"\n', encoding="utf-8")
            shim.chmod(0o755)
        env = {"PATH": f"{bindir}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
               "HOME": str(home), "TMPDIR": str(tmpdir), "XDG_STATE_HOME": str(home / ".local/state"),
               "XDG_RUNTIME_DIR": str(tmpdir), "COLUMNS": str(WIDTH), "LINES": "60", "NO_COLOR": "1",
               "TERM": "dumb", "TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
               "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, encoding="utf-8", errors="replace",
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"example `{command}` did not finish in {TIMEOUT_S} s") from None
        out = done.stdout.replace(str(tmpdir), "/tmp")
        if not out.strip():
            raise RuntimeError(f"example `{command}` printed nothing (exit {done.returncode}): "
                               f"{done.stderr.strip()[-2000:]}")
        out = _TRAILING.sub("", out).rstrip("\n")
        return out + "\n"


def render(ex: Example) -> str:
    return run(ex.command)


def drift(ex: Example, fresh: str) -> str:
    """A unified diff of the block as written against what the command prints now ('' if equal)."""
    if fresh == ex.body:
        return ""
    return "".join(difflib.unified_diff(ex.body.splitlines(True), fresh.splitlines(True),
                                        f"{ex.doc}:{ex.line} (as written)", f"`{ex.command}` (now)"))


def update(doc: str) -> int:
    """Rewrite every example block of `doc` in place; the number of blocks changed."""
    path = ROOT / doc
    text = path.read_text(encoding="utf-8")
    changed = 0
    for ex in reversed(examples(doc, text)):       # from the end, so earlier offsets stay valid
        fresh = render(ex)
        if fresh != ex.body:
            text = text[:ex.start] + fresh + text[ex.end:]
            changed += 1
    if changed:
        path.write_text(text, encoding="utf-8")
    return changed


# --- the short form of a verdict the README shows --------------------------------------------------

KEEP_WHOLE = {"command", "schema", "source", "at", "kind", "parser", "setting", "basis", "id", "class", "runbook"}
SHORT = 40
LINE = 110


def abridge(value: Any, key: str | None = None) -> Any:
    """Long texts cut to their lead and `...`, lists of objects to their first item, a launch argv
    to its first three words: the shape and the real values, short enough to read."""
    if isinstance(value, dict):
        return {k: abridge(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "argv" and len(value) > 3:
            return value[:3] + ["..."]
        if value and isinstance(value[0], (dict, list)):
            return [abridge(value[0])]
        return [abridge(v) for v in value]
    if isinstance(value, str) and key not in KEEP_WHOLE and len(value) > SHORT:
        head, sep, _ = value.partition(": ")
        if sep and len(head) <= SHORT - 8:
            return f"{head}: ..."
        cut = value[:SHORT - 8].rsplit(" ", 1)[0]
        return f"{cut} ..."
    return value


def format_compact(doc: dict[str, Any]) -> str:
    """One top-level key a line; an object too long for a line is wrapped after its `{`."""
    def dump(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, separators=(", ", ": "))

    lines = ["{"]
    keys = list(doc)
    for i, k in enumerate(keys):
        comma = "," if i < len(keys) - 1 else ""
        head = f'  "{k}": '
        whole = head + dump(doc[k]) + comma
        if len(whole) <= LINE or not isinstance(doc[k], dict) or not doc[k]:
            lines.append(whole)
            continue
        items = [f"{dump(ik)}: {dump(iv)}" for ik, iv in doc[k].items()]
        pad = " " * (len(head) + 1)
        cur = head + "{"
        for j, item in enumerate(items):
            piece = item + (", " if j < len(items) - 1 else "}" + comma)
            if len(cur) + len(piece.rstrip()) > LINE and cur.strip() not in ("", head.strip() + "{"):
                lines.append(cur.rstrip())
                cur = pad
            cur += piece
        lines.append(cur.rstrip())
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["abridge"]:
        sys.stdout.write(format_compact(abridge(json.load(sys.stdin))))
        return 0
    if args not in ([], ["--update"], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    if args == ["--update"]:
        for doc in DOCS:
            if (ROOT / doc).exists():
                n = update(doc)
                print(f"{doc}: {n} example block(s) rewritten")
        return 0
    bad = 0
    for ex in all_examples():
        diff = drift(ex, render(ex))
        if diff:
            bad += 1
            sys.stdout.write(diff)
    if bad:
        print(f"{bad} example block(s) drifted: run `python -m tests.docs_examples --update`", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
