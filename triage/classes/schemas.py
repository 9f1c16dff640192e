"""The schemas' class, cause and runbook enums, generated from the class registry.

triage/data/verdict.schema.json and fleet.schema.json are written by hand except for these
enums, which list what the registry knows: the classes, every cause a class spec names, and the
runbooks a verdict can name (from their `applies_to`). `python -m triage.classes.build` rewrites
them in place, keeping each file's own layout; tests/test_registry.py fails while a file and
the registry disagree.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from ..paths import data_file
from . import Registry
from .runbooks import verdict_runbooks

Pointer = tuple[str, ...]
WIDTH = 118

TARGETS: dict[str, dict[Pointer, Callable[[Registry], list[Any]]]] = {
    "verdict.schema.json": {
        ("properties", "verdict", "properties", "class", "enum"): lambda reg: list(reg.ids()),
        ("properties", "causes", "items", "properties", "id", "enum"): lambda reg: list(reg.cause_ids()),
        ("properties", "runbook", "enum"): lambda reg: [*verdict_runbooks(reg.specs), None],
    },
    "fleet.schema.json": {
        ("$defs", "class", "enum"): lambda reg: list(reg.ids()),
    },
}


class SchemaError(ValueError):
    """A schema file whose generated enum cannot be found (or is found twice) in its text."""


def disagreements(reg: Registry, directory: Path | None = None) -> list[str]:
    """`file: /pointer` for every generated enum that does not match the registry."""
    out = []
    for name, targets in TARGETS.items():
        doc = json.loads(_path(name, directory).read_text(encoding="utf-8"))
        for pointer, want in targets.items():
            if _at(doc, pointer) != want(reg):
                out.append(f"{name}: /{'/'.join(pointer)}")
    return out


def write(reg: Registry, directory: Path | None = None) -> list[Path]:
    """Rewrite the enums that disagree; the files that changed."""
    changed = []
    for name, targets in TARGETS.items():
        path = _path(name, directory)
        text = path.read_text(encoding="utf-8")
        new_text = text
        for pointer, want in targets.items():
            current = _at(json.loads(new_text), pointer)
            if current != want(reg):
                new_text = _replace(new_text, current, want(reg), f"{name}: /{'/'.join(pointer)}")
        if new_text != text:
            json.loads(new_text)            # still a JSON document
            path.write_text(new_text, encoding="utf-8")
            changed.append(path)
    return changed


def _path(name: str, directory: Path | None) -> Path:
    return (directory / name) if directory is not None else data_file(name)


def _at(doc: Any, pointer: Pointer) -> Any:
    for key in pointer:
        doc = doc[key]
    return doc


def _replace(text: str, old: list[Any], new: list[Any], where: str) -> str:
    """`text` with the JSON array `old` (however it is wrapped) written as `new`."""
    pattern = r"\[\s*" + r"\s*,\s*".join(re.escape(json.dumps(v)) for v in old) + r"\s*\]"
    found = list(re.finditer(pattern, text))
    if len(found) != 1:
        raise SchemaError(f"{where}: the enum {old} is found {len(found)} times in the file, not once")
    start = found[0].start()
    column = start - text.rfind("\n", 0, start) - 1
    return text[:start] + _array(new, column) + text[found[0].end():]


def _array(values: list[Any], column: int) -> str:
    """A JSON array starting at `column`, wrapped to WIDTH with continuation lines under its first
    element."""
    lines, line = [], " " * column + "["
    for i, value in enumerate(values):
        item = json.dumps(value) + ("," if i < len(values) - 1 else "]")
        joined = line + ("" if line.endswith("[") else " ") + item
        if len(joined) > WIDTH and not line.endswith("["):
            lines.append(line)
            line = " " * (column + 1) + item
        else:
            line = joined
    lines.append(line)
    return "\n".join(lines)[column:]
