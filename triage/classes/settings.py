"""The settings advice changes, as each engine names them (triage/data/engine_settings.yaml), and
the server's current value of one, read from its launch arguments."""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from ..units import as_int, finite_float, whole
from . import compiled

if TYPE_CHECKING:
    from ..flowchart.incident import Incident

DEFAULT_ENGINE = "vllm"      # advice speaks vLLM's names; an engine with no table gets vLLM's flags
_KEYS = {"flag", "arg", "why"}


class SettingsDataError(ValueError):
    """engine_settings.yaml has an entry advice could not use (no flag, an unknown key)."""


class Setting(NamedTuple):
    flag: str                    # the command-line flag that sets it
    arg: str | None = None       # the engine's own name for it in a logged configuration
    why: str | None = None       # what the engine's knob measures, where it differs from vLLM's


@lru_cache(maxsize=1)
def engines() -> dict[str, dict[str, Setting]]:
    return parse_settings(compiled.load("engine_settings"))


def parse_settings(doc: Any) -> dict[str, dict[str, Setting]]:
    out: dict[str, dict[str, Setting]] = {}
    for engine, table in (doc or {}).items():
        if not isinstance(table, dict) or not table.get("source") or not isinstance(table.get("settings"), (dict, list)):
            raise SettingsDataError(f"engine_settings.yaml: {engine}: needs a source and settings")
        entries = table["settings"]
        items = entries.items() if isinstance(entries, dict) else ((name, {}) for name in entries)
        out[engine] = {name: _setting(engine, name, entry) for name, entry in items}
    if DEFAULT_ENGINE not in out:
        raise SettingsDataError(f"engine_settings.yaml: no {DEFAULT_ENGINE} table")
    return out


def _setting(engine: str, name: str, entry: Any) -> Setting:
    if not isinstance(entry, dict) or set(entry) - _KEYS or not str(entry.get("flag", "--")).startswith("-"):
        raise SettingsDataError(f"engine_settings.yaml: {engine}.settings.{name}: bad entry {entry!r}")
    arg = entry.get("arg")
    # A flag not given is the argument's own, written as triage/launch.py writes every argument.
    flag = entry.get("flag") or "--" + (arg or name).replace("_", "-")
    return Setting(flag, arg, entry.get("why"))


def known_engine(engine: str) -> bool:
    return engine in engines()


def flags(engine: str) -> Mapping[str, str]:
    """Setting -> flag for `engine` (vLLM's for an engine with no table)."""
    table = engines().get(engine) or engines()[DEFAULT_ENGINE]
    return {name: s.flag for name, s in table.items()}


def current(incident: "Incident", setting: str) -> Any:
    """The server's value of `setting`, under the engine's own name first."""
    entry = engines().get(incident.engine, {}).get(setting)
    name = entry.arg if entry is not None and entry.arg else setting
    return incident.arg(name, setting)


def as_float(v: Any) -> float | None:
    """A launch setting as a finite number (`0.9`, `"0.9"`); None for text, NaN, Inf, 1e999."""
    return finite_float(v) if isinstance(v, (int, float, str)) else None


def as_whole(v: Any) -> int | None:
    """A launch setting as a whole number (`8192`, `"8192"`, `8192.0`); None otherwise."""
    if isinstance(v, float):
        return as_int(v)
    return whole(v) if isinstance(v, (int, str)) else None


class Default(NamedTuple):
    value: Any
    source: str              # the engine's file and version it was read in


def default(engine: str, version: str | None, mode: str | None, setting: str) -> Default | None:
    """The value `setting` has at `version` when the launch does not set it (engine_settings.yaml
    `defaults`), or None where the data has none for this version and mode."""
    from ..flowchart.knowledge import in_range

    table = (compiled.load("engine_settings") or {}).get(engine) or {}
    for entry in ((table.get("defaults") or {}).get(setting) or ()):
        if entry.get("mode") and mode is not None and entry["mode"] != mode:
            continue
        if entry.get("mode") and mode is None:
            continue
        if version is not None and not in_range(version, str(entry.get("versions", ""))):
            continue
        return Default(entry["value"], str(entry.get("source", "")))
    return None


def value_or_default(incident: "Incident", setting: str) -> tuple[Any, str]:
    """The server's value of `setting` and where it comes from: its launch, else the engine's
    default for the version (with the source the default was read in); (None, "") when neither."""
    value = current(incident, setting)
    if value is not None:
        return value, "launch"
    found = default(incident.engine, incident.version, incident.engine_mode, setting)
    if found is None:
        return None, ""
    return found.value, f"the engine's default ({found.source})"
