"""The classifier's own data files on the cold path: their compiled JSON form when it is current.

The frame vocabulary, the Xid table, the look-alike causes, the engines' setting names, the
known engine bugs and the runbooks' `applies_to` are read on every classify. Importing a YAML parser and parsing them
would cost a small classify more than the rest of its work, so `python -m triage.classes.build`
writes them into one JSON file, each stamped with its source's CRC (triage/datastamp.py). An entry that is stale
or missing falls back to the YAML (slower, never wrong), and tests/test_registry.py fails until
the file is rebuilt.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..datastamp import stamp
from ..paths import data_file, runbooks_dir

COMPILED = data_file("classes.compiled.json")
SOURCES = {name: data_file(f"{name}.yaml")
           for name in ("phase_frames", "xids", "lookalikes", "engine_settings", "known_bugs",
                         "known_bugs_upstream")}
RUNBOOKS = "runbooks"


def load(name: str) -> Any:
    """The content of data file `name` (or of the runbooks' applies_to, for RUNBOOKS)."""
    entry = _compiled().get(name)
    if isinstance(entry, dict) and entry.get("stamp") == digest(name):
        return entry["data"]
    return parse(name)


def parse(name: str) -> Any:
    """The content read from the source itself (the YAML parser's C loader where it exists)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if name == RUNBOOKS:
        out = []
        for path in _runbook_files():
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
            if isinstance(doc, dict) and isinstance(doc.get("id"), str) and isinstance(doc.get("applies_to"), list):
                out.append({"id": doc["id"], "applies_to": [str(a) for a in doc["applies_to"]]})
        return out
    return yaml.load(SOURCES[name].read_text(encoding="utf-8"), Loader=loader)


def digest(name: str) -> str:
    if name == RUNBOOKS:
        return stamp(path.name.encode() + b"\0" + path.read_bytes() + b"\0" for path in _runbook_files())
    return stamp([SOURCES[name].read_bytes()])


def stale() -> list[str]:
    """The sources whose compiled form is missing or out of date."""
    names = [*SOURCES, RUNBOOKS]
    return [n for n in names if not isinstance(_compiled().get(n), dict) or _compiled()[n].get("stamp") != digest(n)]


def build(out: Path = COMPILED) -> Path:
    """Write every source's compiled form (callers check the content first: see build.py)."""
    doc = {name: {"stamp": digest(name), "data": parse(name)} for name in [*SOURCES, RUNBOOKS]}
    out.write_text(json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n",
                   encoding="utf-8")
    _compiled.cache_clear()
    return out


@lru_cache(maxsize=1)
def _compiled() -> dict[str, Any]:
    try:
        doc = json.loads(COMPILED.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _runbook_files() -> list[Path]:
    directory = Path(runbooks_dir())
    return [directory / name for name in sorted(os.listdir(directory)) if name.endswith(".yaml")]
