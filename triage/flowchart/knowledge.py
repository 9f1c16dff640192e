"""The known-bug knowledge base: version ranges as data, compared with `packaging.specifiers`, and
the prefix-caching readings the bugs and the classes share.

The data's ranges are plain releases joined by comparators (">=0.6.0,<0.7.1", "<0.4.6.post2"). Those
are compared here as release tuples, so a classify does not import packaging (about 9 ms of a
0.15 s start): `plain_range` reads only that form and hands anything else to packaging, and
tests/test_version_ranges.py checks both give the same answer for every range in the data files.

Two files: triage/data/known_bugs_upstream.yaml, each entry confirmed by an upstream issue, PR or
release with its versions checked; and triage/data/known_bugs.yaml, bugs known from incident
write-ups. An entry is *confirmed* only from the first file (or with a `verified` note and an
upstream link): only a confirmed bug raises a verdict's confidence or recommends an upgrade. An
unconfirmed one is named as a report to check, nothing more.
"""
from __future__ import annotations

import operator
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from ..datafile import entry_label, shape_problem
from ..evidence.kinds import Kind
from ..lazyre import lazy
from ..model import Evidence, OomClass
from ..paths import data_file
from ..units import whole

DATA = data_file("known_bugs.yaml")
UPSTREAM = data_file("known_bugs_upstream.yaml")
_MM_MODEL = lazy(r"(?:vl\b|-vl-|vision|llava|pixtral|mllama|image|multimodal|-mm-|qwen2?\.?5?-?vl|internvl|minicpm-v)", re.I)


class Bug(NamedTuple):
    """A known engine bug (a NamedTuple: read-only, and cheap to define on the cold path)."""

    id: str
    engine: str
    title: str
    affected: str
    fixed_in: str | None
    requires: tuple[str, ...]
    classes: tuple[str, ...]
    effect: str
    source: str
    confirmed: bool = False      # an upstream issue, PR or release confirms it, versions checked
    workaround: str = ""


#: The conditions a bug entry may require, and what each needs after the colon (None: nothing).
REQUIREMENTS: dict[str, str | None] = {
    "multimodal": None,        # a multi-modal model or multi-modal limits in the launch arguments
    "prefix_caching": None,    # prefix caching on
    "long_context": "int",     # max_model_len (or the context length) at least N tokens
    "concurrency": "int",      # max_num_seqs, or requests running in the stats, at least N
    "flag": "name",            # the launch sets this argument (to anything but off, none or zero)
    "at_least": "name:int",    # the launch sets this argument to N or more
    "speculative_decoding": None,   # a draft model or speculative config in the launch
    "prefill_decode_split": None,   # a KV-transfer (P/D disaggregation) config in the launch
    "cuda_graphs": None,       # CUDA graphs on: not eager mode
    "other_processes": None,   # another process held GPU memory (allocator message, nvidia-smi, start-up check)
    "frame": "text",           # a frame of the failing stack whose function name contains this
    "unobservable": None,      # what it needs no log shows: listed for people, never matched
}
_KEYS = {"id", "engine", "title", "affected", "fixed_in", "requires", "classes", "effect", "source",
         "symptom", "workaround", "fixed_by", "verified", "condition"}


class KnowledgeError(ValueError):
    """An entry of known_bugs.yaml that would silently never match (or always match)."""


def check_requirement(req: object, where: str) -> str:
    """A `requires:` value, validated: a known condition, with an integer where it needs one."""
    if not isinstance(req, str):
        raise KnowledgeError(f"{where}: requirement {req!r} is not a string")
    name, colon, arg = req.partition(":")
    if name not in REQUIREMENTS:
        raise KnowledgeError(f"{where}: unknown requirement {name!r} (one of {sorted(REQUIREMENTS)})")
    needs = REQUIREMENTS[name]
    if needs is None and colon:
        raise KnowledgeError(f"{where}: requirement {name!r} takes no value")
    if needs == "int":
        if not arg.strip().isdigit():
            raise KnowledgeError(f"{where}: requirement {name!r} needs a whole number, as in {name}:4096")
    if needs in ("name", "text") and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
        raise KnowledgeError(f"{where}: requirement {name!r} needs a name, as in {name}:enable_sleep_mode")
    if needs == "name:int":
        setting, _, n = arg.partition(":")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", setting) or not n.isdigit():
            raise KnowledgeError(f"{where}: requirement {name!r} needs a setting and a number, as in {name}:page_size:2")
    return req


@lru_cache(maxsize=1)
def load_bugs(path: Path = DATA) -> tuple[Bug, ...]:
    """The entries, each checked on load: a typo in a condition, a class or a version range raises
    instead of disabling the entry. The bundled files are read in their compiled form when current."""
    if path == DATA:
        from ..classes import compiled

        return (parse_bugs(compiled.load("known_bugs_upstream"), UPSTREAM.name, upstream=True)
                + parse_bugs(compiled.load("known_bugs"), path.name))
    import yaml  # lazily: only verdicts that reach this check pay for it

    return parse_bugs(yaml.safe_load(path.read_text(encoding="utf-8")), path.name)


def parse_bugs(raw: Any, name: str = DATA.name, upstream: bool = False) -> tuple[Bug, ...]:
    """`upstream`: the file of confirmed bugs, where every entry must say how it was verified."""
    bugs = []
    for i, item in enumerate(raw or []):
        where = entry_label(name, i, item)
        problem = shape_problem(item, _KEYS, {"id", "engine", "title", "affected"})
        if problem:
            raise KnowledgeError(f"{where}: {problem}")
        requires = tuple(check_requirement(r, where) for r in item.get("requires") or [])
        classes = tuple(item.get("classes") or [])
        bad = [c for c in classes if c not in {cls.value for cls in OomClass}]
        if bad:
            raise KnowledgeError(f"{where}: unknown class(es) {bad}")
        if not _valid_range(str(item["affected"])):
            raise KnowledgeError(f"{where}: affected {item['affected']!r} is not a version range like '>=0.6.0,<0.7.1'")
        upstream_link = str(item.get("source", "")).startswith("https://")
        if upstream and not (item.get("verified") and upstream_link):
            raise KnowledgeError(f"{where}: a confirmed entry needs its upstream link as source and a verified note")
        bugs.append(Bug(item["id"], item["engine"], item["title"], str(item["affected"]),
                        str(item["fixed_in"]) if item.get("fixed_in") else None, requires, classes,
                        item.get("effect", ""), item.get("source", ""),
                        confirmed=bool(item.get("verified")) and upstream_link, workaround=item.get("workaround", "")))
    return tuple(bugs)


def _valid_range(spec: str) -> bool:
    if plain_range(spec) is not None:
        return True
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return len(SpecifierSet(spec)) > 0
    except InvalidSpecifier:
        return False


_COMPARATOR = re.compile(r"(>=|<=|==|!=|<|>) ?(\d{1,6}(?:\.\d{1,6}){0,3})(?:\.post(\d{1,6}))?")
_RELEASE_PARTS = 4


@lru_cache(maxsize=512)
def plain_range(spec: str) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """`spec`'s comparators as (operator, sort key) when each compares with a plain release, with
    at most a post-release number; None for any other form (wildcards, ~=, pre-releases), which
    packaging then reads. The key orders as packaging orders such versions: the release padded
    with zeros (0.6 == 0.6.0), then the post number, a release without one before any post."""
    out = []
    for part in spec.split(","):
        m = _COMPARATOR.fullmatch(part.strip())
        if m is None:
            return None
        out.append((m[1], _key(tuple(int(n) for n in m[2].split(".")), int(m[3]) if m[3] else -1)))
    return tuple(out)


def _key(release: tuple[int, ...], post: int = -1) -> tuple[int, ...]:
    return release + (0,) * (_RELEASE_PARTS - len(release)) + (post,)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt,
}


def version_tuple(text: str) -> tuple[int, ...]:
    """The release numbers a log states (major, minor, patch): a local build's `+g1234`, a
    `.post1` or `.dev277` suffix and any fourth number are not part of it."""
    nums = re.findall(r"\d+", text.split("+")[0])
    # whole(): a logged "version" of 4,301 digits is damage, not a version (int() would refuse it)
    return tuple(whole(n) or 0 for n in nums[:3]) + (0,) * (3 - min(3, len(nums)))


def in_range(version: str, spec: str) -> bool:
    """Whether the release of `version` is in `spec` (`>=0.6.0,<0.7.1`). A nightly 0.9.1.dev277 counts
    as its release line, 0.9.1: engines log their development builds that way."""
    release = version_tuple(version)
    clauses = plain_range(spec)
    if clauses is not None:
        key = _key(release)
        return all(_COMPARE[op](key, bound) for op, bound in clauses)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        allowed = SpecifierSet(spec)
    except InvalidSpecifier:
        return False
    return allowed.contains(".".join(map(str, release)), prereleases=True)


def matching_bugs(ctx, oom_class: str | None = None,
                  readings: Mapping[str, Callable[[], bool]] | None = None) -> list[tuple[Bug, Evidence | None]]:
    """The bugs of this engine and version whose conditions all hold. `readings` answers the
    conditions another module reads (other_processes: triage/flowchart/causes.py)."""
    if not ctx.version:
        return []
    version_rec = ctx.ev.first(Kind.ENGINE_VERSION) or next(
        (r for r in ctx.launch if r.fields.get("version")), None)
    out = []
    for bug in load_bugs():
        if bug.engine != ctx.engine or not in_range(ctx.version, bug.affected):
            continue
        if oom_class is not None and bug.classes and oom_class not in bug.classes:
            continue
        if all(_condition(ctx, req, readings or {}) for req in bug.requires):
            out.append((bug, version_rec))
    return out


def _condition(ctx, req: str, readings: Mapping[str, Callable[[], bool]]) -> bool:
    name, _, arg = req.partition(":")
    if name == "multimodal":
        args = ctx.args
        if args.get("limit_mm_per_prompt") or args.get("mm_processor_kwargs") not in (None, "None", {}):
            return True
        return bool(_MM_MODEL.search(str(args.get("model") or args.get("served_model_name") or "")))
    if name == "prefix_caching":
        return prefix_caching_enabled(ctx) is True
    if name == "long_context":
        length = _as_int(ctx.arg("max_model_len", "context_length", "max_total_tokens", "session_len"))
        return length is not None and length >= int(arg)
    if name == "concurrency":
        seqs = _as_int(ctx.arg("max_num_seqs", "max_running_requests", "max_batch_size"))
        running = max((s.fields.get("running") or 0 for s in ctx.ev.of(Kind.STATS)), default=0)
        return max(seqs or 0, int(running)) >= int(arg)
    if name == "flag":
        return _set(ctx.args.get(arg))
    if name == "at_least":
        setting, _, n = arg.partition(":")
        value = _as_int(ctx.args.get(setting))
        return value is not None and value >= int(n)
    if name == "speculative_decoding":
        return any(_set(ctx.args.get(k)) for k in ("speculative_config", "speculative_model", "num_speculative_tokens",
                                                     "speculative_algorithm", "speculative_draft_model_path"))
    if name == "prefill_decode_split":
        return any(_set(ctx.args.get(k)) for k in ("kv_transfer_config", "disaggregation_mode"))
    if name == "cuda_graphs":
        return not any(_set(ctx.args.get(k)) for k in ("enforce_eager", "disable_cuda_graph"))
    if name in readings:
        return readings[name]()
    if name == "frame":
        anchor = ctx.primary
        frames = ctx.frames_near(anchor) if anchor is not None else []
        return any(arg.lower() in str(f[2]).lower() for f in frames)
    if name == "unobservable":
        return False
    if name in REQUIREMENTS:
        return False           # a reading the caller did not give: the condition is not shown
    raise KnowledgeError(f"unknown requirement {req!r}")   # load_bugs already refused it


def _set(value: Any) -> bool:
    """A launch argument that is on: given, and not off, none, zero or empty."""
    return value not in (None, False, 0, "", "None", "none", "False", "false", "0", {}, [])


def _as_int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def has_hit_rate(ctx) -> bool:
    """Whether the evidence reports a prefix-cache hit rate at all (stats lines or /metrics)."""
    return any(s.fields.get("prefix_hit_rate") is not None for s in ctx.ev.of(Kind.STATS)) or any(
        m.fields.get("name") == "prefix_cache_hit_rate" for m in ctx.ev.of(Kind.METRIC))


def prefix_caching_opted_in(ctx) -> bool:
    """The operator turned prefix caching on (rather than the engine defaulting to it, as V1 does).

    The command line and 'non-default args' say so directly; vLLM's argparse Namespace defaults
    the flag to False (V0) or None (V1), so True there was set too; V0 never enables it alone."""
    if ctx.explicit_args.get("enable_prefix_caching") is True:
        return True
    for rec in ctx.launch:
        if rec.fields.get("origin") == "argparse namespace" and (rec.fields.get("args") or {}).get("enable_prefix_caching") is True:
            return True
    return ctx.engine_mode == "v0" and prefix_caching_enabled(ctx) is True


#: Engines that never print a prefix-cache hit rate in their log: with the cache on, the log
#: alone cannot rule it out.
NO_HIT_RATE_ENGINES = ("tgi",)


def prefix_cache_unjudged(ctx) -> bool:
    """Prefix caching is on, the evidence has no hit rate to judge it by, and the cache is not
    just an engine default that evicts under pressure: the operator turned it on, or the engine
    never reports a hit rate (so its absence is not an excerpt's gap but the engine's silence)."""
    if has_hit_rate(ctx):
        return False
    if prefix_caching_opted_in(ctx):
        return True
    return ctx.engine in NO_HIT_RATE_ENGINES and prefix_caching_enabled(ctx) is True


def prefix_caching_enabled(ctx) -> bool | None:
    """True/False when the evidence says, None when it does not."""
    if ctx.engine == "sglang":
        # SGLang's radix (prefix) cache is on unless --disable-radix-cache.
        return not bool(ctx.args.get("disable_radix_cache"))
    val = ctx.args.get("enable_prefix_caching")
    if isinstance(val, bool):
        return val
    if isinstance(val, str) and val in ("True", "False"):
        return val == "True"
    for rec in ctx.ev.of(Kind.METRIC):
        if rec.fields.get("name") == "prefix_cache_hit_rate" and rec.fields.get("value") is not None:
            return rec.fields["value"] >= 0    # V0 reports -1 when prefix caching is off
        if rec.fields.get("name") == "cache_config" and "enable_prefix_caching" in (rec.fields.get("labels") or {}):
            return rec.fields["labels"]["enable_prefix_caching"] == "True"
    if any(s.fields.get("prefix_hit_rate") is not None and s.fields.get("engine") == "vllm"
           and ctx.engine_mode == "v0" for s in ctx.ev.of(Kind.STATS)):
        return True   # V0 prints the hit-rate line only when prefix caching is on
    if any((s.fields.get("prefix_hit_rate") or 0) > 0 for s in ctx.ev.of(Kind.STATS)):
        return True   # a cache hit needs a cache (V1 prints the rate, 0% when off)
    return None
