"""The GPUs `triage plan` knows by name (triage/data/gpus.yaml), and --gpu NAME|BYTES read."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import TriageError
from ..paths import data_file

DATA = data_file("gpus.yaml")
GiB = 1 << 30
_KEYS = {"name", "class_gb", "memory_gib", "aliases", "seen", "a100"}


@dataclass(frozen=True)
class Gpu:
    name: str
    memory: int                     # bytes, as CUDA reports the card's total
    class_gb: int | None
    source: str                     # where the size comes from
    estimated: bool
    a100: bool = False


class GpuDataError(ValueError):
    """gpus.yaml has an entry the plan cannot use."""


def table() -> tuple[Gpu, ...]:
    """Every GPU of the table, smallest first."""
    return _load(DATA)[0]


@lru_cache(maxsize=None)
def _load(path: Path) -> tuple[tuple[Gpu, ...], dict[str, Gpu]]:
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    gpus, names = [], {}
    for i, item in enumerate(raw.get("gpus") or []):
        if not isinstance(item, dict) or set(item) - _KEYS or not {"name", "class_gb", "memory_gib"} <= set(item):
            raise GpuDataError(f"{path.name}: gpus[{i}]: needs name, class_gb and memory_gib (and only {sorted(_KEYS)})")
        seen = item.get("seen")
        gpu = Gpu(str(item["name"]), int(float(item["memory_gib"]) * GiB), int(item["class_gb"]),
                  f"gpus.yaml, as {str(seen).split(':')[0]} printed it" if seen else
                  "gpus.yaml, estimated: the product's usable capacity less what the driver keeps",
                  estimated=not seen, a100=bool(item.get("a100")))
        gpus.append(gpu)
        for alias in [gpu.name, *(item.get("aliases") or [])]:
            names[_key(str(alias))] = gpu
    return tuple(sorted(gpus, key=lambda g: g.memory)), names


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.lower()).removeprefix("nvidia")


def resolve(text: str) -> Gpu:
    """--gpu: a name from the table (A100-80GB, H100, L4, ...) or the card's memory in bytes
    (`85899345920`, `80GiB`, `24GB`). TriageError (one line) when it is neither."""
    from ..units import parse_size

    gpu = _load(DATA)[1].get(_key(text))
    if gpu is not None:
        return gpu
    size = parse_size(text)
    if size and size >= GiB:
        return Gpu(f"{size / GiB:.2f} GiB card", size, None, "--gpu", estimated=False)
    known = ", ".join(g.name for g in table())
    raise TriageError(f"--gpu {text!r}: not a GPU this table knows ({known}) nor a size of at least 1 GiB "
                      "(e.g. 85899345920 or 80GiB)")
