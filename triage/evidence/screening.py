"""Which inputs are not read, why, and how the skipped ones are summed up in warnings.

A file named on the command line that cannot be used is an error; one found in a directory is
skipped, with a warning when it is damaged rather than merely of another kind.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import BadInput
from ..model import EvidenceSet
from .base import InputFile, looks_binary

# Files in a bundle that are not evidence, and extensions no evidence comes in.
NOT_EVIDENCE_NAMES = {"incident.yaml", "incident.yml", "expected.yaml", "expected.yml", "readme.md", "notes.jsonl",
                      "actions.jsonl",
                      "manifest.json", "nvml.json",                      # written by `triage collect`
                      # a model's own files (`triage plan` reads them; samples/models/ holds some)
                      "config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
                      "preprocessor_config.json", "model.safetensors.index.json"}
NOT_EVIDENCE_EXTENSIONS = {".md", ".py", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".html", ".css", ".js",
                           ".zip", ".tar", ".tgz", ".whl", ".so", ".pyc", ".yaml", ".yml", ".toml", ".ini", ".cfg",
                           ".lock", ".pickle", ".pkl", ".pt", ".bin", ".safetensors"}

# Up to this many files of one kind of skip are named one per line; more are summarised in one
# line with a count and a few names (a directory of 100,000 unrelated files is one line, not 100,000).
LIST_SKIPPED = 5
# Files of a directory that were read as logs but held nothing: listed as inputs up to this many;
# beyond it they leave the list of inputs and are counted in one line.
LIST_EMPTY = 20
SKIP_EXAMPLES = 3


def is_derived(name: str) -> bool:
    """Files triage itself writes into a bundle (postmortem.md and its chart, timeline exports)."""
    lower = name.lower()
    return lower.startswith(("postmortem", "timeline")) and lower.endswith((".md", ".svg", ".csv", ".json"))


def is_bundle_metadata(src: InputFile) -> bool:
    """A bundle's own files (incident.yaml, README.md, what triage wrote): passed over without a word."""
    return not src.explicit and (src.name.lower() in NOT_EVIDENCE_NAMES or is_derived(src.name))


def skip_reason(src: InputFile) -> tuple[str | None, bool]:
    """(why the input is not read, whether that is damage rather than a file that is no evidence)."""
    name = src.name.lower()
    if not src.explicit:
        if name in NOT_EVIDENCE_NAMES or Path(name).suffix in NOT_EVIDENCE_EXTENSIONS:
            return "not an evidence file", False
    elif Path(name).suffix in NOT_EVIDENCE_EXTENSIONS - {".yaml", ".yml", ".zip", ".tar", ".tgz"}:
        return f"a {Path(name).suffix} file is not evidence (give a log, a scrape, or a bundle directory)", False
    try:
        size = src.size()
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}", True
    if size == 0:
        return "empty file", False
    try:
        head = src.head()
    except BadInput as exc:
        return exc.problem, True
    except PermissionError:
        return "not readable (permission denied)", True
    if not head.strip():
        return "empty file (only whitespace)", False
    if looks_binary(head):
        return "binary data, not a text log or JSON", False
    return None, False


def unclaimed_json(src: InputFile) -> str:
    """Why JSON that no structured parser claimed is not read (BadInput when it is not valid JSON)."""
    src.read_json()   # raises BadInput for truncated / invalid JSON
    return ("JSON of an unrecognised kind (expected torch memory_stats, kubectl pod/events, "
            "an Alertmanager payload, or NVML readings)")


def summarise_quiet(result: EvidenceSet, skipped: list[tuple[str, str]], found: set[str]) -> list[str]:
    """The warnings for files of a directory that gave nothing: skipped ones by reason, and (when
    there are many) the ones read as logs without a single record, which then leave result.sources."""
    by_reason: dict[str, list[str]] = {}
    for display, reason in skipped:
        by_reason.setdefault(reason, []).append(display)
    empty = [s.path for s in result.sources if s.records == 0 and s.kind == "log" and s.path in found]
    if len(empty) > LIST_EMPTY:
        gone = set(empty)
        result.sources = [s for s in result.sources if s.path not in gone]
        by_reason["nothing recognised in them"] = empty
    lines = []
    for reason, names in by_reason.items():
        if len(names) <= LIST_SKIPPED:
            lines += [f"{name}: skipped ({reason})" for name in names]
        else:
            shown = ", ".join(names[:SKIP_EXAMPLES])
            lines.append(f"{len(names):,} files (e.g. {shown}, …): skipped ({reason})")
    return lines
