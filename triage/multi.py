"""One incident per verdict: a PATH that holds several incident bundles is classified bundle by bundle.

`triage classify samples/` (a directory of bundles, each with its own incident.yaml) used to
read every file under it as one incident, mixing years and servers. Here each bundle is read
on its own (its incident.yaml sets its date and zone) and gets its own verdict: a table for
people, JSON Lines (one triage.verdict/v1 document per bundle, with `bundle`) under --json.
Files outside every bundle, and other PATHs given beside the bundles, are one more group of
their own; nothing is merged silently. A directory of loose files is one incident, as before.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .bundle import find_bundles, is_bundle, sorted_entries
from .errors import BadInput, ExitCode
from .lazyre import lazy


@dataclass
class Group:
    """The inputs of one incident bundle, classified together."""
    label: str                  # what the table and `bundle` call it: the bundle's path
    paths: list[str] = field(default_factory=list)


def incident_groups(paths: Sequence[str]) -> list[Group]:
    """The incidents PATHS hold: one group per bundle (a PATH that is one, or every bundle under a
    PATH that is none), and one group for everything else (loose files, stdin). A single group
    is one incident: the caller classifies it as one (a directory holding one bundle is that bundle)."""
    groups: list[Group] = []
    loose: list[str] = []
    for given in paths:
        p = Path(given)
        if given == "-" or not p.is_dir() or is_bundle(p):
            if given != "-" and p.is_dir():
                groups.append(Group(given, [given]))
            else:
                loose.append(given)
            continue
        inner = find_bundles(p)
        if not inner:
            loose.append(given)
            continue
        groups += [Group(str(b), [str(b)]) for b in inner]
        loose += _outside(p, inner)
    if len(groups) == 1 and not loose and not is_bundle(Path(paths[0])) and len(paths) == 1:
        return groups                        # a directory holding one bundle: that bundle
    if len(groups) < 2:
        return [Group(", ".join(paths), list(paths))]
    if loose:
        groups.append(Group("(other inputs: " + ", ".join(_short(x) for x in loose[:3])
                            + (", …" if len(loose) > 3 else "") + ")", loose))
    return groups


def _short(path: str) -> str:
    return path if len(path) <= 40 else "…" + path[-39:]


def _outside(root: Path, bundles: list[Path]) -> list[str]:
    """Evidence-looking files under `root` that lie in none of `bundles` (a README is not one)."""
    from .evidence import _NOT_EVIDENCE, _NOT_EVIDENCE_EXT, _derived

    inside = {os.path.realpath(b) for b in bundles}
    out: list[str] = []
    pending = [str(root)]
    while pending:
        here = pending.pop()
        if os.path.realpath(here) in inside:
            continue
        subdirs = []
        for entry in sorted_entries(here):
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.path)
                elif entry.is_file():
                    name = entry.name.lower()
                    if name not in _NOT_EVIDENCE and Path(name).suffix not in _NOT_EVIDENCE_EXT and not _derived(name):
                        out.append(entry.path)
            except OSError:
                continue
        pending.extend(reversed(subdirs))
    return out


@dataclass
class Outcome:
    """What classifying one bundle gave: its verdict, the warnings on its inputs, or why there is none."""
    group: Group
    verdict: object = None            # model.Verdict
    warnings: list[str] = field(default_factory=list)
    error: str | None = None          # no verdict: why (one line per input that failed)


def classify_groups(groups: Sequence[Group], *, year: int | None = None, tz: str | None = None,
                    max_bytes: int | None = None) -> list[Outcome]:
    """Each group classified on its own; one that cannot be read is an outcome with its error."""
    from .api import classify_paths

    out = []
    for group in groups:
        try:
            verdict, evidence = classify_paths(group.paths, year=year, tz=tz, max_bytes=max_bytes)
        except BadInput as exc:
            out.append(Outcome(group, error=str(exc)))
            continue
        out.append(Outcome(group, verdict, list(evidence.warnings)))
    return out


def exit_code(outcomes: Sequence[Outcome]) -> int:
    """0 every bundle got a verdict; 3 one is unknown or could not be read; 1 none could be read."""
    if not any(o.verdict is not None for o in outcomes):
        return int(ExitCode.BAD_INPUT)
    from .classes import registry

    undecided = registry().fallback.id
    if any(o.verdict is None or o.verdict.oom_class is undecided for o in outcomes):  # type: ignore[attr-defined]
        return int(ExitCode.UNKNOWN)
    return int(ExitCode.OK)


def json_lines(outcomes: Sequence[Outcome]) -> list[dict]:
    """One triage.verdict/v1 document per bundle that got a verdict, `bundle` naming it."""
    from .redact import redact_output
    from .report import to_json

    docs = []
    for o in outcomes:
        if o.verdict is None:
            continue
        doc = to_json(o.verdict)  # type: ignore[arg-type]
        docs.append({"schema": doc.pop("schema"), "bundle": redact_output(o.group.label), **doc})
    return docs


def table(outcomes: Sequence[Outcome], width: int, base: str | None = None) -> list[str]:
    """Bundle, class, confidence and summary, one row per bundle, fitted to `width` columns (the
    summary wraps under its own column). `base`: a directory the bundle paths are shown relative to."""
    import textwrap

    def name(o: Outcome) -> str:
        label = o.group.label
        if base and label.startswith(base.rstrip("/") + "/"):
            label = label[len(base.rstrip("/")) + 1:]
        return label

    width = max(60, width)
    names = [name(o) for o in outcomes]
    name_w = min(max([len("BUNDLE")] + [len(n) for n in names]), max(16, width // 3))
    class_w = max(len("CLASS"), *(len(o.verdict.oom_class.value) if o.verdict is not None else len("unreadable")  # type: ignore[attr-defined]
                                  for o in outcomes))
    summary_w = width - name_w - class_w - 4 - 6
    lines = [f"{'BUNDLE':<{name_w}}  {'CLASS':<{class_w}}  {'CONF':>4}  SUMMARY"]
    for o, label in zip(outcomes, names):
        if len(label) > name_w:
            lines.append(label)               # a long name on its own line, whole; the row below it
            label = ""
        if o.verdict is not None:
            v = o.verdict
            cls, conf, summary = v.oom_class.value, f"{v.confidence:.2f}", v.summary  # type: ignore[attr-defined]
        else:
            cls, conf, summary = "unreadable", "", (o.error or "").splitlines()[0]
        # A number stays with its unit ("16.00 GiB", "79.8 h"): glued by a stand-in for the space.
        glued = _UNIT_SPACE.sub(_GLUE, summary)
        wrapped = [w.replace(_GLUE, " ") for w in textwrap.wrap(glued, summary_w, break_on_hyphens=False)] or [""]
        if len(wrapped) > 3:
            wrapped = wrapped[:3]
            last = wrapped[-1]
            wrapped[-1] = (last if len(last) < summary_w else last[:last.rfind(" ")]) + "…"
        lines.append(f"{label:<{name_w}}  {cls:<{class_w}}  {conf:>4}  {wrapped[0]}")
        pad = " " * (name_w + class_w + 10)
        lines += [pad + more for more in wrapped[1:]]
    return lines


_GLUE = "\ue000"
_UNIT_SPACE = lazy(r"(?<=\d) (?=(?:GiB|MiB|KiB|GB|MB|KB|B|h|min|s|ms|tokens|requests)\b)")
