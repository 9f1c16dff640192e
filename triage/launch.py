"""The server's launch, rebuilt whole from the evidence: every argument it was started with.

A relaunch keeps every argument it does not deliberately change. Dropping `--served-model-name`
answers the clients with 404; dropping `--api-key` serves without authentication. So the command
is rebuilt from the most complete record of the launch the evidence holds:

  1. a command line (`vllm serve ...` in the log, or /proc/PID/cmdline in recovery),
  2. vLLM's `non-default args: {...}` (exactly what the operator set),
  3. a full dump — V0's `args: Namespace(...)`, SGLang's `ServerArgs(...)`, TGI's `Args {...}`
     — read against the engine's defaults (triage/data/launch_flags.yaml),
  4. the engine config line, as a last resort (it names a few arguments only).

Each argument becomes its real flag for the engine and version; one that cannot be written is
listed as dropped with the reason, one that is not in the flag table is kept as written
(`--its-name value`) and listed so, and a secret the log masked is a placeholder that recovery
refuses to run until the value comes from somewhere real.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from .evidence.kinds import Kind
from .flowchart.knowledge import version_tuple
from .model import Evidence
from .paths import data_file

DATA = data_file("launch_flags.yaml")
_KINDS = {"model", "value", "store_true", "bool_optional", "list", "json", "drop"}
_ENTRY_KEYS = {"kind", "secret", "env", "since", "why", "kv_list_before"}
# The record each origin is (launch_config records' `origin` field), most complete first.
_DUMPS = ("argparse namespace", "server_args", "launcher args")
_ORIGIN_RANK = {"command line": 0, "non-default args": 1, "argparse namespace": 2, "server_args": 2,
                "launcher args": 2, "engine config": 3}
PLACEHOLDER = "<{name}: not in the evidence>"
_MASKED = ("***", "**********", "<redacted>", "[REDACTED]", "REDACTED")


@dataclass(frozen=True)
class FlagSpec:
    """What the launch-flag table knows of one flag: its kind, whether it is secret, its variable and version."""
    kind: str = "value"
    secret: bool = False
    env: str | None = None          # the variable the engine reads the same value from
    since: str | None = None        # bool_optional: the version the --no- form appeared
    why: str | None = None          # drop: why it cannot be written
    kv_list_before: str | None = None


@dataclass(frozen=True)
class EngineFlags:
    """One engine's launch flags: their specs, defaults, internal names and config-file spellings."""
    flags: dict[str, FlagSpec]
    defaults: dict[str, Any]
    internal: frozenset[str]
    config_names: dict[str, str]
    defaults_since: tuple[tuple[str, dict[str, Any]], ...] = ()

    def defaults_for(self, version: str | None) -> list[dict[str, Any]]:
        """The default tables that may apply: the one of `version`, or every one when it is unknown."""
        if version is None:
            return [self.defaults] + [{**self.defaults, **over} for _, over in self.defaults_since]
        merged = dict(self.defaults)
        for since, over in self.defaults_since:
            if version_tuple(version) >= version_tuple(since):
                merged.update(over)
        return [merged]


@dataclass(frozen=True)
class Dropped:
    """A launch argument left out of a rebuilt command line, and why."""
    arg: str
    why: str


@dataclass(frozen=True)
class MissingSecret:
    """A secret launch argument the log shows only masked: the rebuilt command line needs it given again."""
    arg: str
    flag: str
    env: str | None                 # satisfied by this variable in launch.env / the environment

    @property
    def how(self) -> str:
        alt = f"launch.env {self.env} in incident.yaml" if self.env else "launch.argv in incident.yaml"
        return f"give --launch-command or {alt}"


@dataclass
class RebuiltLaunch:
    """The launch as the evidence records it, ready to change and run."""
    argv: list[str]
    source: str                     # "logs/vllm.log:2 (non-default args)"
    kept_as_written: list[str] = field(default_factory=list)     # flags not in the table, written as named
    dropped: list[Dropped] = field(default_factory=list)
    missing: list[MissingSecret] = field(default_factory=list)
    engine: str = "vllm"

    def as_fact(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source}
        if self.kept_as_written:
            out["kept_as_written"] = list(self.kept_as_written)
        if self.dropped:
            out["dropped"] = [{"arg": d.arg, "why": d.why} for d in self.dropped]
        if self.missing:
            out["needs"] = [{"arg": m.arg, "flag": m.flag, "env": m.env, "how": m.how} for m in self.missing]
        return out


class LaunchDataError(ValueError):
    """launch_flags.yaml has an entry that would silently write a wrong flag."""


def engine_flags(engine: str, path: Path = DATA) -> EngineFlags | None:
    return _load(path).get(engine)


COMPILED = DATA.with_suffix(".compiled.json")


def _digest(path: Path) -> str:
    from .datastamp import stamp

    return stamp([path.read_bytes()])


def _raw(path: Path = DATA) -> dict[str, Any]:
    """The data file's content: its compiled JSON form when that is current (importing and
    running a YAML parser costs the cold path ~0.1 s), else the YAML itself."""
    compiled = path.with_suffix(".compiled.json")
    if compiled.exists():
        doc = json.loads(compiled.read_text(encoding="utf-8"))
        if doc.get("stamp") == _digest(path):
            return doc["engines"]
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}


def build(path: Path = DATA, out: Path = COMPILED) -> Path:
    """Check the data file and write its compiled JSON form, stamped with the YAML's digest:
    `python -c 'from triage.launch import build; build()'` after editing launch_flags.yaml."""
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    _tables(raw, path)
    out.write_text(json.dumps({"stamp": _digest(path), "engines": raw}, sort_keys=True) + "\n", encoding="utf-8")
    return out


@lru_cache(maxsize=None)
def _load(path: Path = DATA) -> dict[str, EngineFlags]:
    return _tables(_raw(path), path)


def _tables(raw: dict[str, Any], path: Path) -> dict[str, EngineFlags]:
    out: dict[str, EngineFlags] = {}
    for engine, table in raw.items():
        flags: dict[str, FlagSpec] = {}
        for name, entry in (table.get("flags") or {}).items():
            if not isinstance(entry, dict) or set(entry) - _ENTRY_KEYS or entry.get("kind", "value") not in _KINDS:
                raise LaunchDataError(f"{path.name}: {engine}.flags.{name}: bad entry {entry!r}")
            if entry.get("kind") == "drop" and not entry.get("why"):
                raise LaunchDataError(f"{path.name}: {engine}.flags.{name}: a dropped flag needs its why")
            flags[name] = FlagSpec(**entry)
        for name in table.get("values") or ():
            if name in flags:
                raise LaunchDataError(f"{path.name}: {engine}.values: {name} is also in flags")
            flags[name] = FlagSpec("value")
        since = tuple((str(v), dict(over)) for v, over in (table.get("defaults_since") or {}).items())
        out[engine] = EngineFlags(flags, dict(table.get("defaults") or {}), frozenset(table.get("internal") or ()),
                                  dict(table.get("config_names") or {}), since)
    return out


# --- from the evidence -----------------------------------------------------------------------

def rebuild(launch_records: Iterable[Evidence], engine: str, version: str | None,
            engine_mode: str | None) -> RebuiltLaunch | None:
    """The launch rebuilt from the most complete launch record, or None when there is none."""
    records = [r for r in launch_records if r.kind == Kind.LAUNCH_CONFIG.value
               and (r.fields.get("argv") or isinstance(r.fields.get("args"), dict))]
    if not records:
        return None
    best = min(records, key=lambda r: (_ORIGIN_RANK.get(str(r.fields.get("origin")), 4), -r.seq))
    origin = str(best.fields.get("origin") or "launch record")
    source = f"{best.where} ({origin})"
    if best.fields.get("argv"):
        argv = [str(a) for a in best.fields["argv"]]
        out = RebuiltLaunch(argv, source, engine=engine)
        out.missing = _masked_in_argv(argv, engine)
        return out
    table = engine_flags(engine)
    if table is None:
        return None
    args = dict(best.fields["args"])
    if origin == "engine config":
        args = from_config(args, table)
    full_dump = origin in _DUMPS or origin == "engine config"
    return _build(args, table, engine, version, engine_mode, source, full_dump,
                  entrypoint=_entrypoint(best, args))


def _entrypoint(rec: Evidence, args: dict[str, Any]) -> str:
    """vLLM: `vllm serve` when the log shows the serve subcommand, else the api_server module
    (a V0 Namespace without `subparser` comes from `python -m vllm.entrypoints.openai.api_server`)."""
    if rec.fields.get("origin") == "argparse namespace" and "subparser" not in args and "model_tag" not in args:
        return "module"
    return "serve"


def from_config(args: dict[str, Any], table: EngineFlags) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in args.items():
        dest = table.config_names.get(name)
        if dest is None:
            continue                 # internal config objects, not launch arguments
        if isinstance(value, str) and value.startswith("torch."):
            value = value[len("torch."):]            # dtype=torch.bfloat16
        if isinstance(value, str) and value.startswith("LoadFormat."):
            value = value.split(".", 1)[1].lower()
        out[dest] = value
    if "served_model_name" in out and out["served_model_name"] in (out.get("model"), [out.get("model")]):
        out.pop("served_model_name")                 # the config names the model when none was set
    if "tokenizer" in out and out["tokenizer"] == out.get("model"):
        out.pop("tokenizer")
    return out


def _build(args: dict[str, Any], table: EngineFlags, engine: str, version: str | None, engine_mode: str | None,
           source: str, full_dump: bool, entrypoint: str = "serve") -> RebuiltLaunch | None:
    model = _model(args, engine)
    if not model:
        return None
    argv = _program(engine, entrypoint, model)
    out = RebuiltLaunch(argv, source, engine=engine)
    ver = version_tuple(version) if version else None
    defaults = table.defaults_for(version)
    for name, value in args.items():
        if name in table.internal or name in _MODEL_KEYS.get(engine, ()):
            continue
        spec = table.flags.get(name)
        if full_dump and is_default(name, value, defaults):
            continue
        if not full_dump and spec is None and value is None:
            out.dropped.append(Dropped(name, "logged as None: the engine's own default applies"))
            continue
        if spec is not None and spec.kind == "drop":
            out.dropped.append(Dropped(name, spec.why or "not writable"))
            continue
        flag = "--" + name.replace("_", "-")
        if spec is not None and spec.secret and _masked(value):
            out.missing.append(MissingSecret(name, flag, spec.env))
            argv += [flag, PLACEHOLDER.format(name=name)]
            continue
        words, problem = _words(flag, value, spec, ver, engine_mode, full_dump)
        if problem:
            out.dropped.append(Dropped(name, problem))
            continue
        if spec is None and words:
            out.kept_as_written.append(flag)
        argv += words
    return out


_MODEL_KEYS = {"vllm": ("model", "model_tag"), "sglang": ("model_path",), "tgi": ("model_id",),
               "lmdeploy": ("model_path",), "trtllm": ("model",), "llama.cpp": ("model",)}


def _model(args: dict[str, Any], engine: str) -> str | None:
    for key in (*_MODEL_KEYS.get(engine, ()), "model", "model_path", "model_id"):
        if args.get(key) not in (None, "", "None"):
            return str(args[key])
    return None


def _program(engine: str, entrypoint: str, model: str) -> list[str]:
    if engine == "sglang":
        return ["python", "-m", "sglang.launch_server", "--model-path", model]
    if engine == "tgi":
        return ["text-generation-launcher", "--model-id", model]
    if entrypoint == "module":
        return ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    return ["vllm", "serve", model]


def is_default(name: str, value: Any, defaults: list[dict[str, Any]]) -> bool:
    """In a dump of every argument: is this one at its default (so not set by the operator)?
    None is "not set" in a dump whatever the default: the engine fills it in itself."""
    if value in (None, "None"):
        return True
    if isinstance(value, str) and value.startswith("<") and value.endswith((">", ":")):
        return True                  # an enum or function repr (<ConfigFormat.AUTO: 'auto'>): never set by hand
    known = [d[name] for d in defaults if name in d]
    if known:
        return any(_same(value, default) for default in known)
    # Not in the table: an unset argument reads False/empty; anything else was set.
    return value in (False, "", "auto") or value == [] or value == {}


def _same(value: Any, default: Any) -> bool:
    if value == default:
        return True
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        try:
            return float(value) == float(default)
        except (TypeError, ValueError):
            return False
    return str(value) == str(default) if default is not None and value is not None else False


def _words(flag: str, value: Any, spec: FlagSpec | None, ver: tuple[int, ...] | None, engine_mode: str | None,
           full_dump: bool) -> tuple[list[str], str | None]:
    """The command-line words for one argument, or (.., why not)."""
    kind = spec.kind if spec else _guess_kind(value)
    if kind in ("store_true", "bool_optional") or isinstance(value, bool):
        if value is True:
            return [flag], None
        if value in (False, None):
            if kind == "store_true" and not (spec is None and not full_dump):
                return [], None      # the default of a store_true flag: nothing to write
            # False in `non-default args` means its default is True: BooleanOptionalAction.
            if spec is not None and spec.since and ver is not None and ver < version_tuple(spec.since):
                return [], f"false, and this version has no {_no(flag)} form"
            return [_no(flag)], None
        return [], f"logged as {value!r}, not a true/false value"
    if value is None:
        return [], "logged as None: the engine's own default applies"
    if kind == "list":
        items = value if isinstance(value, (list, tuple)) else [value]
        return [flag, *(str(v) for v in items)], None
    if kind == "json" or isinstance(value, (dict, list, tuple)):
        if spec and spec.kv_list_before and ver is not None and ver < version_tuple(spec.kv_list_before) \
                and isinstance(value, dict):
            return [flag, ",".join(f"{k}={v}" for k, v in value.items())], None
        try:
            return [flag, json.dumps(value, separators=(",", ":"))], None
        except (TypeError, ValueError):
            return [], f"logged as {value!r}, which has no command-line form"
    return [flag, _fmt(value)], None


def _guess_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "store_true"
    if isinstance(value, (dict,)):
        return "json"
    if isinstance(value, (list, tuple)):
        return "list"
    return "value"


def _no(flag: str) -> str:
    return "--no-" + flag[2:]


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        return str(int(value))
    return str(value)


def _masked(value: Any) -> bool:
    text = str(value) if value is not None else ""
    return not text or text in _MASKED or set(text) == {"*"}


def _masked_in_argv(argv: list[str], engine: str) -> list[MissingSecret]:
    """Secrets a logged command line shows masked (`--api-key ***`)."""
    table = engine_flags(engine)
    if table is None:
        return []
    out = []
    for i, tok in enumerate(argv):
        name, eq, val = tok[2:].partition("=") if tok.startswith("--") else ("", "", "")
        spec = table.flags.get(name.replace("-", "_")) if name else None
        if spec is None or not spec.secret:
            continue
        value = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if _masked(value):
            out.append(MissingSecret(name.replace("-", "_"), "--" + name, spec.env))
    return out
