"""The message-signature data file (triage/data/signatures.yaml): loading, checking, compiling.

One entry per engine message: what it is (`kind`), which engine prints it and in which
versions, a cheap substring guard, the pattern, the fields it yields (with their units),
examples that must match (with the fields they must yield), lines that must not, the reason it
means what it means, and where the wording comes from. Only extractors too complex for a field
table (the torch OOM message, launch configurations, stats lines) stay in Python; an entry
names them with `extract:`.

Cold start: the classifier must not pay for YAML parsing. `python -m triage.evidence.sigdata
build` writes the entries (without their examples) as JSON next to the YAML, stamped with the
YAML's CRC (triage/datastamp.py); loading reads that JSON when the stamp matches and falls back to libyaml's
C loader when it does not (a stale or missing compiled file costs speed, never correctness).
The same file holds the log prefilter's anchors derived from the entries (prefilter_anchors.py),
stamped also with the code that derives them (see compiled_anchors).

Every pattern must run in linear time on any line: no nested or overlapping unbounded
quantifiers (`(\\w+\\s?)+`, `.*X.*Y`, `\\s*.*\\s*`). tests/test_signature_data.py runs each
entry's examples and feeds it long adversarial lines.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..datafile import entry_label, shape_problem
from ..datastamp import stamp
from ..paths import data_file

DATA = data_file("signatures.yaml")
COMPILED = DATA.with_suffix(".compiled.json")

Fields = dict[str, Any]
Extractor = Callable[[re.Match[str], str], "Fields | None"]

ENTRY_KEYS = {"id", "kind", "engine", "versions", "guards", "require", "pattern", "fields", "set", "extract",
              "final", "why", "source", "examples", "counter_examples"}
REQUIRED_KEYS = {"id", "kind", "engine", "guards", "pattern", "why", "source", "examples"}
FIELD_TYPES = {"str", "lower", "int", "float", "gib", "mib", "kib_bytes", "size", "pct", "bool", "negative_gib"}
ENGINES = {"any", "vllm", "sglang", "tgi", "lmdeploy", "trtllm", "llama.cpp", "ollama", "mistral.rs", "candle",
           "xinference", "ray", "kserve", "triton", "kubernetes", "linux", "pytorch", "nvidia", "lmcache"}


class SignatureDataError(ValueError):
    """The data file breaks its own rules (unknown key, bad field spec, bad pattern)."""


@dataclass(frozen=True)
class FieldSpec:
    """How one field of a signature is read from its match: the group, type and unit."""
    name: str
    group: str | int | None
    type: str = "str"
    unit_group: str | int | None = None     # for type "size": the group holding the unit (GiB, MB, ...)
    required: bool = False                  # no match when this number cannot be read


@dataclass(frozen=True)
class Entry:
    """One entry of the signature data, as matching needs it (no prose, no examples)."""
    id: str
    kind: str
    engine: str
    guards: tuple[str, ...]
    pattern: str
    require: tuple[str, ...] = ()
    fields: tuple[FieldSpec, ...] = ()
    set: Mapping[str, Any] = field(default_factory=dict)
    extract: str | None = None
    final: bool = False
    versions: str = "any"


def load_raw(path: Path = DATA) -> list[dict[str, Any]]:
    """The full entries, examples included (for tests and the build step): libyaml's C loader."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    if not isinstance(doc, dict) or not isinstance(doc.get("signatures"), list):
        raise SignatureDataError(f"{path.name}: expected a mapping with a 'signatures' list")
    return doc["signatures"]


def _digest(path: Path) -> str:
    return stamp([path.read_bytes()])


def compiled_form(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What matching needs from each entry: everything but the prose and the examples."""
    keep = ("id", "kind", "engine", "versions", "guards", "require", "pattern", "fields", "set", "extract", "final")
    return [{k: item[k] for k in keep if k in item} for item in raw]


def build(path: Path = DATA, out: Path = COMPILED) -> Path:
    """Check the data file and write its compiled JSON form (stamped with the YAML's digest),
    with the prefilter's anchors derived from it (stamped with the deriving code's digest)."""
    from .prefilter_anchors import code_stamp, derive
    from . import guard_trie

    raw = load_raw(path)
    validate(raw)
    form = compiled_form(raw)
    anchors = {"stamp": code_stamp(), **derive(_entry(item) for item in form).to_json()}
    guards = dict.fromkeys(g for item in form for g in item["guards"])
    finder = {"stamp": guard_trie.code_stamp(), "guards": guard_trie.guards_digest(guards),
              "source": guard_trie.finder_source(guards)}
    out.write_text(json.dumps({"stamp": _digest(path), "signatures": form, "anchors": anchors,
                               "guard_finder": finder},
                              ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    _current.cache_clear()
    entries.cache_clear()
    return out


@lru_cache(maxsize=4)
def _current(path: Path) -> dict[str, Any] | None:
    """The compiled JSON form of the data file at `path` when it is current, else None."""
    try:
        doc = json.loads(path.with_suffix(".compiled.json").read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("stamp") == _digest(path) and isinstance(doc.get("signatures"), list):
            return doc
    except (OSError, ValueError):
        pass
    return None


def compiled_anchors(path: Path = DATA) -> Any:
    """The prefilter's anchors stored with the current compiled form: a mapping with the deriving
    code's "stamp" and the literal groups (see prefilter_anchors.Anchors.to_json), or None."""
    doc = _current(path)
    return doc.get("anchors") if doc is not None else None


def compiled_guard_finder(guards: Iterable[str], path: Path = DATA) -> str | None:
    """The guard finder's text (guard_trie.finder_source) stored with the current compiled form,
    when it was built from these guards by the code here now; else None."""
    from . import guard_trie

    doc = _current(path)
    finder = doc.get("guard_finder") if doc is not None else None
    if isinstance(finder, dict) and isinstance(finder.get("source"), str) \
            and finder.get("stamp") == guard_trie.code_stamp() \
            and finder.get("guards") == guard_trie.guards_digest(guards):
        return finder["source"]
    return None


@lru_cache(maxsize=1)
def entries(path: Path = DATA) -> tuple[Entry, ...]:
    """The entries in priority order (the order of the file): the compiled form when it is current."""
    doc = _current(path)
    items: list[dict[str, Any]] | None = doc["signatures"] if doc is not None else None
    if items is None:
        raw = load_raw(path)
        validate(raw)
        items = compiled_form(raw)
    return tuple(_entry(item) for item in items)


def _entry(item: dict[str, Any]) -> Entry:
    specs = []
    for name, spec in (item.get("fields") or {}).items():
        if not isinstance(spec, dict):
            spec = {"group": spec}
        specs.append(FieldSpec(name, spec.get("group"), spec.get("type", "str"), spec.get("unit_group"),
                               bool(spec.get("required"))))
    return Entry(id=item["id"], kind=item["kind"], engine=item.get("engine", "any"), guards=tuple(item["guards"]),
                 pattern=item["pattern"], require=tuple(item.get("require") or ()), fields=tuple(specs),
                 set=dict(item.get("set") or {}), extract=item.get("extract"), final=bool(item.get("final")),
                 versions=str(item.get("versions", "any")))


def validate(raw: list[dict[str, Any]], *, kinds: set[str] | None = None,
             extractors: set[str] | None = None) -> None:
    """Every entry well-formed: known keys, a guard that the pattern's match needs, fields that
    name real groups, examples present. Raises SignatureDataError naming the entry."""
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = entry_label("signatures", i, item)
        problem = shape_problem(item, ENTRY_KEYS, REQUIRED_KEYS)
        if problem:
            raise SignatureDataError(f"{where}: {problem}")
        if item["id"] in seen:
            raise SignatureDataError(f"{where}: duplicate id")
        seen.add(item["id"])
        if item["engine"] not in ENGINES:
            raise SignatureDataError(f"{where}: unknown engine {item['engine']!r} (one of {sorted(ENGINES)})")
        if kinds is not None and item["kind"] not in kinds:
            raise SignatureDataError(f"{where}: unknown kind {item['kind']!r}")
        if not item["guards"] or not all(isinstance(g, str) and g for g in item["guards"]):
            raise SignatureDataError(f"{where}: guards must be non-empty strings")
        try:
            pat = re.compile(item["pattern"])
        except re.error as exc:
            raise SignatureDataError(f"{where}: bad pattern: {exc}") from None
        for name, spec in (item.get("fields") or {}).items():
            spec = spec if isinstance(spec, dict) else {"group": spec}
            if spec.get("type", "str") not in FIELD_TYPES:
                raise SignatureDataError(f"{where}: field {name}: unknown type {spec.get('type')!r}")
            extra = set(spec) - {"group", "type", "unit_group", "required"}
            if extra:
                raise SignatureDataError(f"{where}: field {name}: unknown key(s) {sorted(extra)}")
            for key in ("group", "unit_group"):
                g = spec.get(key)
                if g is None:
                    continue
                if isinstance(g, int) and not 0 <= g <= pat.groups or isinstance(g, str) and g not in pat.groupindex:
                    raise SignatureDataError(f"{where}: field {name}: the pattern has no group {g!r}")
        if item.get("extract") and extractors is not None and item["extract"] not in extractors:
            raise SignatureDataError(f"{where}: unknown extractor {item['extract']!r}")
        if not item["examples"]:
            raise SignatureDataError(f"{where}: needs at least one example")


# --- turning entries into extractors ---------------------------------------------------------

def field_value(spec: FieldSpec, m: re.Match[str]) -> Any:
    """One field from its group, converted by type. Numbers go through triage.units (NaN, Inf,
    absurd digit runs and malformed text become None, never an exception)."""
    from ..units import finite_float, gib, size_from, whole

    if spec.group is None:
        return None
    raw = m.group(spec.group)
    if raw is None:
        return None
    t = spec.type
    if t == "str":
        return raw.strip()
    if t == "lower":
        return raw.strip().lower()
    if t == "bool":
        return raw.strip().lower() in ("true", "1", "yes", "on")
    if t == "int":
        return whole(raw)
    if t == "size":
        unit = m.group(spec.unit_group) if spec.unit_group is not None else "B"
        return size_from(raw, unit or "B", gb_is_gib=True)
    num = finite_float(raw)
    if num is None:
        return None
    if t == "float":
        return num
    if t == "pct":
        return num / 100.0
    if t in ("gib", "negative_gib"):
        return gib(num)
    if t == "mib":
        return gib(num / 1024)
    if t == "kib_bytes":
        return gib(num / (1 << 20))
    raise SignatureDataError(f"unknown field type {t!r}")


def declarative(entry: Entry, python: Extractor | None = None) -> Extractor | None:
    """The extractor of an entry: its field table and constants, then the named Python extractor."""
    if not entry.fields and not entry.set and python is None:
        return None
    specs, const = entry.fields, dict(entry.set)

    def extract(m: re.Match[str], msg: str) -> Fields | None:
        out: Fields = dict(const)
        for spec in specs:
            value = field_value(spec, m)
            if value is None and spec.required:
                return None
            out[spec.name] = value
        if python is not None:
            extra = python(m, msg)
            if extra is None:
                return None
            out.update(extra)
        return out

    return extract


def with_requirements(entry: Entry, extract: Extractor | None) -> Extractor | None:
    """Wrap an extractor so a line missing one of the entry's required substrings is no match."""
    if not entry.require:
        return extract
    needed = entry.require

    def checked(m: re.Match[str], msg: str) -> Fields | None:
        if not all(n in msg for n in needed):
            return None
        return extract(m, msg) if extract is not None else {}

    return checked


def matcher(entry: Entry, extractors: Mapping[str, Extractor]) -> Extractor | None:
    """The complete extractor of an entry: required substrings, field table, Python extractor."""
    python = extractors[entry.extract] if entry.extract else None
    return with_requirements(entry, declarative(entry, python))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["build"]:
        print("usage: python -m triage.evidence.sigdata build", file=sys.stderr)
        return 2
    print(build())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
