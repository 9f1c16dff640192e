"""The parser modules, in the order they bid for an input, and the bidding itself.

Content decides, not the file name: each parser sniffs the first 64 KiB and the best score wins;
ties go to the earlier module. The log parser bids 1 for any text, so it is the fallback.
"""
from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Sequence

from .base import InputFile

PARSER_MODULES: tuple[str, ...] = (
    "prometheus", "memory_stats", "nvidia_smi", "kubernetes", "alertmanager", "logs",
)


def parsers() -> list[ModuleType]:
    mods = []
    for name in PARSER_MODULES:
        try:
            mods.append(import_module(f".{name}", __package__))
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(name):
                continue  # a parser module not present in this build
            raise
    return mods


def pick_parser(src: InputFile, mods: Sequence[ModuleType]) -> ModuleType:
    head = src.head()
    best, best_score = None, 0
    for mod in mods:
        try:
            score = mod.sniff(head, src.name)
        except Exception:  # a sniffer must never sink the run
            score = 0
        if score > best_score:
            best, best_score = mod, score
    assert best is not None
    return best
