"""The stack-frame vocabulary of the lifecycle phases (triage/data/phase_frames.yaml), read once.

Which function names only run while a server starts, which belong to its serving loop, and the
narrower groups a cause or a recommendation reads (weight loading, CUDA-graph capture). The
data file says why each group means what it means and where the names come from.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, NamedTuple

from ..classes import compiled

Frame = tuple  # (path, line, function[, code]) as the log reader records a traceback frame


class FrameDataError(ValueError):
    """phase_frames.yaml breaks its own shape (a missing group, a name in two groups)."""


class FrameVocabulary(NamedTuple):
    startup: frozenset[str]                  # every start-up group together
    groups: dict[str, frozenset[str]]        # the start-up groups by name
    startup_substrings: tuple[str, ...]      # case-insensitive parts of weight-loading function names
    kv_cache_substrings: tuple[str, ...]     # case-insensitive parts of KV-cache allocation function names
    startup_paths: tuple[str, ...]
    constructors_under: tuple[str, ...]
    constructor_files: tuple[str, ...]
    idle_marker: str
    idle_not_startup: frozenset[str]
    runtime: frozenset[str]
    request_paths: tuple[str, ...] = ()    # files of HTTP/RPC request dispatch: a request was being answered
    file_functions: tuple[tuple[str, frozenset[str]], ...] = ()   # (file ending, its start-up-only functions)
    runtime_file_functions: tuple[tuple[str, frozenset[str]], ...] = ()   # (file ending, its request-only functions)
    memory_checks: frozenset[str] = frozenset()    # start-up checks that fail only for too little memory
    startup_leaning: frozenset[str] = frozenset()  # run at start-up and only now and then while serving
    host_paths: tuple[str, ...] = ()       # parts of the paths of code that runs on the host CPU only
    host_functions: tuple[str, ...] = ()   # parts of the names of functions that only tokenize or parse
    host_loggers: tuple[str, ...] = ()     # endings of the modules that log from host-only code
    device_paths: tuple[str, ...] = ()     # parts of the paths of device work (model, attention, worker)

    def handles_request(self, frame: Frame) -> bool:
        return _path(frame).endswith(self.request_paths)

    def is_runtime(self, frame: Frame) -> bool:
        """A frame of a serving loop, or of a function its file only runs for a request."""
        return frame[2] in self.runtime or any(frame[2] in names and _path(frame).endswith(ending)
                                               for ending, names in self.runtime_file_functions)

    def is_startup(self, frame: Frame) -> bool:
        path, func = _path(frame), frame[2]
        lowered = func.lower()
        if func in self.startup or any(s in lowered for s in self.startup_substrings + self.kv_cache_substrings):
            return True
        if path.endswith(self.startup_paths):
            return True
        if any(func in names and path.endswith(ending) for ending, names in self.file_functions):
            return True
        return func == "__init__" and (any(d in path for d in self.constructors_under)
                                       or path.endswith(self.constructor_files))

    def is_host(self, frame: Frame) -> bool:
        """A frame of code that runs on the host CPU only (API front end, parsers, grammars, tokenizers)."""
        path, func = _path(frame), str(frame[2]).lower()
        return any(part in path for part in self.host_paths) or any(part in func for part in self.host_functions)

    def is_device(self, frame: Frame) -> bool:
        """A frame of device work, or of the engine that relays it (model, attention, worker, engine loop)."""
        path = _path(frame)
        return any(part in path for part in self.device_paths)

    def in_group(self, frame: Frame, group: str) -> bool:
        return frame[2] in self.groups[group]

    def loads_weights(self, frame: Frame) -> bool:
        """A frame of vLLM's own weight loading, or of weight repacking."""
        return self.in_group(frame, "weights") or any(s in frame[2].lower() for s in self.startup_substrings)


# A call in a frame's source line: `x = Engine.from_engine_args(args)` calls from_engine_args
# (bounded, from a word start: linear on any line).
_CALL = re.compile(r"\b(\w{1,80})\s{0,8}\(")


def calls_in(frame: Frame) -> list[str]:
    """The functions a frame's source line calls (the first four), when the frame kept its line:
    in a stack cut before its exception, the call in progress is the step that failed."""
    return _CALL.findall(str(frame[3]))[:4] if len(frame) > 3 else []


def _path(frame: Frame) -> str:
    """A frame's file with forward slashes (a Windows traceback's too)."""
    return str(frame[0]).replace("\\", "/")


def _file_functions(section: dict) -> tuple[tuple[str, frozenset[str]], ...]:
    return tuple((str(ending), frozenset(map(str, names))) for ending, names in (section.get("file_functions") or {}).items())


@lru_cache(maxsize=1)
def frames() -> FrameVocabulary:
    return parse_vocabulary(compiled.load("phase_frames"))


def parse_vocabulary(doc: Any, name: str = "phase_frames.yaml") -> FrameVocabulary:
    try:
        start, run = doc["startup"], doc["runtime"]
        groups = {g: frozenset(entry["functions"]) for g, entry in start["groups"].items()}
        for g, entry in start["groups"].items():
            if not (entry.get("why") and entry.get("source")):
                raise FrameDataError(f"{name}: startup.groups.{g}: needs a why and a source")
        idle = start["idle_rank"]
        host = doc.get("host_code") or {}
        vocabulary = FrameVocabulary(
            startup=frozenset().union(*groups.values()), groups=groups,
            startup_substrings=tuple(s.lower() for s in start.get("function_substrings") or ()),
            kv_cache_substrings=tuple(s.lower() for s in start.get("kv_cache_substrings") or ()),
            startup_paths=tuple(start.get("paths") or ()), constructors_under=tuple(start["constructors_under"]),
            constructor_files=tuple(start["constructor_files"]), idle_marker=str(idle["marker"]),
            idle_not_startup=frozenset(idle["not_startup"]), runtime=frozenset(run["functions"]),
            request_paths=tuple(run.get("request_paths") or ()),
            file_functions=_file_functions(start), runtime_file_functions=_file_functions(run),
            memory_checks=frozenset((doc.get("memory_checks") or {}).get("functions") or ()),
            startup_leaning=frozenset((doc.get("startup_leaning") or {}).get("functions") or ()),
            host_paths=tuple(host.get("path_parts") or ()), host_loggers=tuple(host.get("logger_suffixes") or ()),
            host_functions=tuple(s.lower() for s in host.get("function_substrings") or ()),
            device_paths=tuple(host.get("device_path_parts") or ()))
    except (KeyError, TypeError, AttributeError) as exc:
        raise FrameDataError(f"{name}: missing or malformed {exc}") from None
    seen: dict[str, str] = {}
    for g, names in groups.items():
        for fn in names:
            if fn in seen:
                raise FrameDataError(f"{name}: {fn} is in both {seen[fn]} and {g}")
            seen[fn] = g
    both = vocabulary.startup & vocabulary.runtime
    if both:
        raise FrameDataError(f"{name}: {sorted(both)} in both startup and runtime")
    return vocabulary
