"""Raw events: one per thing seen in one place, before duplicates are merged and repeats collapsed."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache


@dataclass
class Raw:
    time: datetime                  # UTC
    kind: str
    category: str
    text: str
    source: str                     # "file:line" (or "file" for whole-file facts)
    file: str                       # the file part of `source`
    node: str | None = None
    key: str = ""                   # identity beyond (kind, node): what makes two rows "the same event"
    order: int = 0                  # appearance order, the tie-break between equal times
    until: datetime | None = None   # end of a span (a recovery step's end record)
    extra_sources: tuple[str, ...] = ()   # more lines of the same record (a step's end record)
    weight: int = 1                 # lines it stands for (a bucket of preemption warnings read as one record)
    handoff: str | None = None      # a recovery step handed to a person, open until a note closes it


def where(source: str, line: int | None) -> str:
    return f"{source}:{line}" if line else source


# Tool prefixes in evidence file names ("nvidia-smi-gpu-node-05.csv" -> "gpu-node-05").
_TOOL_PREFIX = re.compile(r"^(?:nvidia[-_]smi|dcgm|dmesg|kern|kernel|kubectl|pod|pods|events|alerts?|metrics|logs?)"
                          r"(?:[-_.]|$)", re.I)
_EXTENSIONS = (".gz", ".log", ".txt", ".csv", ".json", ".jsonl", ".prom", ".out")
_STAMP = re.compile(r"\d{4}-?\d{2}-?\d{2}(?:[T_ ]?\d{2}[-:]?\d{2})?")


@lru_cache(maxsize=4096)        # called once per evidence record, for a handful of distinct files
def node_from_file(path: str) -> str | None:
    """A host or pod name carried in a file name (logs/gpu-node-07.log -> gpu-node-07), else None.

    Only names with a digit count ("vllm.log", "nvidia-smi.csv", "server.log" name no node) and a
    date/time stamp is not a node (metrics/2026-03-12T14-16-00Z.prom).
    """
    name = os.path.basename(path)
    changed = True
    while changed:
        changed = False
        for ext in _EXTENSIONS:
            if name.lower().endswith(ext) and len(name) > len(ext):
                name, changed = name[: -len(ext)], True
    while True:
        stripped = _TOOL_PREFIX.sub("", name, count=1)
        if stripped == name:
            break
        name = stripped
    name = name.strip("-_. ")
    if not name or not any(c.isdigit() for c in name) or _STAMP.search(name):
        return None
    return name
