"""Where inside a serving step the failed allocation was made, read from the failing stack.

A runtime OOM means something outside the budget the engine sized at start-up grew past what
profiling saw. The frames say which part it was (the sampler, a multi-modal encoder, the
prefix cache's own code, the model's forward pass), and so which setting bounds it. The
vocabulary is data: `runtime_sites` in triage/data/phase_frames.yaml, each site with why it
means what it means, its source and its lever.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple, Sequence

from ..classes import compiled
from .frames import Frame, FrameDataError


class Site(NamedTuple):
    name: str                         # encoder | prefix_cache | sampler | logits | forward
    why: str
    lever: str                        # the setting (or kind of step) that bounds it
    source: str
    functions: frozenset[str]
    function_substrings: tuple[str, ...]
    paths: tuple[str, ...]            # file-name endings
    path_parts: tuple[str, ...]

    def matches(self, frame: Frame) -> bool:
        path, func = str(frame[0]).replace("\\", "/"), str(frame[2])
        return (func in self.functions or any(s in func.lower() for s in self.function_substrings)
                or path.endswith(self.paths) or any(p in path for p in self.path_parts))


class FailureSite(NamedTuple):
    site: Site
    frame: Frame                      # the innermost frame of the site

    @property
    def name(self) -> str:
        return self.site.name

    @property
    def lever(self) -> str:
        return self.site.lever

    def where(self) -> str:
        """`function in dir/file.py:line`, as a person reads a traceback."""
        path = str(self.frame[0]).replace("\\", "/")
        short = "/".join(path.split("/")[-2:])
        line = f":{self.frame[1]}" if self.frame[1] not in (None, "") else ""
        return f"{self.frame[2]} in {short}{line}"


@lru_cache(maxsize=1)
def sites() -> tuple[Site, ...]:
    return parse_sites(compiled.load("phase_frames"))


def parse_sites(doc: Any, name: str = "phase_frames.yaml") -> tuple[Site, ...]:
    try:
        table = doc["runtime_sites"]
        out = []
        for entry in table:
            site = entry["name"]
            if not (entry.get("why") and entry.get("source") and entry.get("lever")):
                raise FrameDataError(f"{name}: runtime_sites.{site}: needs a why, a source and a lever")
            out.append(Site(site, str(entry["why"]), str(entry["lever"]), str(entry["source"]),
                            frozenset(entry.get("functions") or ()),
                            tuple(s.lower() for s in entry.get("function_substrings") or ()),
                            tuple(entry.get("paths") or ()), tuple(entry.get("path_parts") or ())))
    except (KeyError, TypeError, AttributeError) as exc:
        raise FrameDataError(f"{name}: missing or malformed runtime_sites {exc}") from None
    return tuple(out)


def failure_site(frames: Sequence[Frame]) -> FailureSite | None:
    """The first site (in the data file's order) with a frame in the failing stack, and its
    innermost such frame; None when no frame says where (a bare message, engine-loop frames only)."""
    for site in sites():
        hits = [f for f in frames if site.matches(f)]
        if hits:
            return FailureSite(site, hits[-1])
    return None
