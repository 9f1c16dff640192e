"""Recovery runbooks: YAML data (runbooks/*.yaml), validated strictly when loaded.

A runbook is an ordered list of steps, each an action from a closed set with its parameters, a
timeout, what to do when it fails, and how success is verified. Anything unknown — a key, an
action, a parameter — is an error naming the file and the dotted path, so a typo can never turn
into a silently skipped safety step.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import TriageError
from ..paths import runbooks_dir
from . import fill
from .actions import REGISTRY, Param
from .context import Runbook, RunbookStep

# action -> the parameters it accepts (name -> type), as the actions declare them (`actions/`).
# Commands are argv lists built by the actions, never shell strings taken from a runbook.
ACTIONS: dict[str, dict[str, type | tuple[type, ...]]] = {
    name: {p.name: p.types for p in action.params} for name, action in REGISTRY.items()}
STEP_KEYS = {"id", "title", "action", "params", "timeout_s", "on_failure", "verify"}
RUNBOOK_KEYS = {"id", "title", "applies_to", "summary", "steps"}
REQUIRED_STEP_KEYS = ("id", "title", "action", "timeout_s", "on_failure", "verify")


class RunbookError(TriageError):
    """A runbook file that does not validate: `file: dotted.path: problem`."""


def load_runbook(path: Path) -> Runbook:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunbookError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        raise RunbookError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    return parse_runbook(data, str(path))


def parse_runbook(data: Any, source: str) -> Runbook:
    where = _Where(source)
    if not isinstance(data, dict):
        where.fail("", "expected a mapping with id, title, applies_to, summary, steps")
    where.no_unknown(data, RUNBOOK_KEYS, "")
    for key in ("id", "title", "summary"):
        where.require_str(data, key, "")
    where.placeholders(data["summary"], "summary")
    applies = data.get("applies_to")
    if not isinstance(applies, list) or not applies or not all(isinstance(a, str) for a in applies):
        where.fail("applies_to", "expected a non-empty list of verdict classes or runbook names")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        where.fail("steps", "expected a non-empty list of steps")
    parsed = tuple(_step(where, raw, f"steps[{i}]") for i, raw in enumerate(steps))
    ids = [s.id for s in parsed]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        where.fail("steps", f"duplicate step id(s): {', '.join(dupes)}")
    return Runbook(data["id"], data["title"], tuple(applies), data["summary"], parsed, source)


def _step(where: "_Where", raw: Any, path: str) -> RunbookStep:
    if not isinstance(raw, dict):
        where.fail(path, "expected a mapping")
    where.no_unknown(raw, STEP_KEYS, path)
    for key in REQUIRED_STEP_KEYS:
        if key not in raw:
            where.fail(f"{path}.{key}", "missing")
    for key in ("id", "title", "verify"):
        where.require_str(raw, key, path)
    for key in fill.STEP_TEXTS:
        where.placeholders(raw[key], f"{path}.{key}")
    action = raw["action"]
    if action not in REGISTRY:
        where.fail(f"{path}.action", f"unknown action {action!r} (allowed: {', '.join(sorted(REGISTRY))})")
    timeout = raw["timeout_s"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        where.fail(f"{path}.timeout_s", "expected a number of seconds in (0, 3600]")
    if raw["on_failure"] not in ("stop", "continue"):
        where.fail(f"{path}.on_failure", "expected 'stop' or 'continue'")
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        where.fail(f"{path}.params", "expected a mapping")
    declared = {p.name: p for p in REGISTRY[action].params}
    for key, value in params.items():
        if key not in declared:
            where.fail(f"{path}.params.{key}",
                       f"unknown parameter for {action} (allowed: {', '.join(declared) or 'none'})")
        _param(where, declared[key], value, f"{path}.params.{key}")
    problem = REGISTRY[action].check(params)
    if problem:
        where.fail(f"{path}.params.{problem[0]}", problem[1])
    return RunbookStep(raw["id"], raw["title"], action, float(timeout), raw["on_failure"], raw["verify"], dict(params))


def _param(where: "_Where", param: Param, value: Any, path: str) -> None:
    """One parameter's value: a word it takes, else its type, its bounds (a negative grace is an
    instant SIGKILL, a share of 5 never passes, zero retries never probes /health) and its own check."""
    if param.words and isinstance(value, str):
        if value not in param.words:
            where.fail(path, f"expected a number or {' / '.join(param.words)}")
        return
    if param.name in fill.PARAM_TEXTS and isinstance(value, str):
        where.placeholders(value, path)
    if isinstance(value, bool) and param.types is not bool or not isinstance(value, param.types):
        where.fail(path, f"expected {_type_name(param.types)}")
    if param.bounds is not None:
        low, high = param.bounds
        if value < low or (high is not None and value > high):
            where.fail(path, f"{value!r} is out of range (expected "
                       + (f"{low:g} to {high:g})" if high is not None else f"at least {low:g})"))
    problem = param.check(value) if param.check is not None else None
    if problem:
        where.fail(f"{path}.{problem[0]}", problem[1])


def load_runbooks(extra_dirs: Iterable[Path] = ()) -> dict[str, Runbook]:
    """The bundled runbooks, then the user's directories (a user runbook replaces a bundled one)."""
    books: dict[str, Runbook] = {}
    for directory in (runbooks_dir(), *extra_dirs):
        if not Path(directory).is_dir():
            raise RunbookError(f"{directory}: not a directory of runbooks")
        for path in sorted(Path(directory).glob("*.yaml")):
            book = load_runbook(path)
            books[book.id] = book
    return books


def select(books: Mapping[str, Runbook], name: str) -> Runbook:
    """The runbook called `name`, or the one that applies to the verdict class `name`."""
    if name in books:
        return books[name]
    for book in books.values():
        if name in book.applies_to:
            return book
    raise RunbookError(f"no runbook for {name!r} (have: {', '.join(sorted(books)) or 'none'})")


def with_overrides(book: Runbook, overrides: Iterable[str]) -> Runbook:
    """`book` with `STEP.KEY=VALUE` overrides (a parameter or timeout_s), validated like the file.

    VALUE is read as YAML (`3`, `0.5`, `true`, `{A: b}`), so types are checked as strictly as in
    a runbook file; an unknown step or key is an error naming it."""
    import yaml

    raw = {"id": book.id, "title": book.title, "applies_to": list(book.applies_to), "summary": book.summary,
           "steps": [{"id": s.id, "title": s.title, "action": s.action, "params": dict(s.params),
                      "timeout_s": s.timeout_s, "on_failure": s.on_failure, "verify": s.verify} for s in book.steps]}
    for item in overrides:
        target, sep, text = item.partition("=")
        step_id, dot, key = target.partition(".")
        if not sep or not dot or not key:
            raise RunbookError(f"--param {item!r}: expected STEP.KEY=VALUE (e.g. steady.window_s=10)")
        step = next((s for s in raw["steps"] if s["id"] == step_id), None)
        if step is None:
            raise RunbookError(f"--param {item!r}: runbook {book.id} has no step {step_id!r} "
                               f"(steps: {', '.join(s['id'] for s in raw['steps'])})")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        if key in ("timeout_s", "on_failure"):
            step[key] = value
        else:
            step["params"][key] = value
    return parse_runbook(raw, f"{book.source} with --param")


class _Where:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, problem: str):
        raise RunbookError(f"{self.source}: {path + ': ' if path else ''}{problem}")

    def no_unknown(self, data: Mapping[str, Any], allowed: set[str], path: str) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            self.fail(f"{path + '.' if path else ''}{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def placeholders(self, text: str, path: str) -> None:
        found = fill.problems(text)
        if found:
            self.fail(path, found[0])

    def require_str(self, data: Mapping[str, Any], key: str, path: str) -> None:
        if not isinstance(data.get(key), str) or not data[key].strip():
            self.fail(f"{path + '.' if path else ''}{key}", "expected a non-empty string")


def _type_name(t: type | tuple[type, ...]) -> str:
    names = [x.__name__ for x in (t if isinstance(t, tuple) else (t,))]
    return {"int/float": "a number"}.get("/".join(names), " or ".join(names))
