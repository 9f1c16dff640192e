"""The GPUs `triage plan` knows by name (triage/data/gpus.yaml), and --gpu NAME|SIZE read.

A card is found by its name or an alias, never by a neighbour's (`L40` is not `L40S`). A size in
GB as cards are sold (`80GB`, `24G`) means the card class of that size: the smallest card of the
class (what the driver reports), with a note. A size in binary units or bytes (`80GiB`,
`85899345920`) is taken as the card's total as CUDA reports it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import TriageError
from ..paths import data_file

DATA = data_file("gpus.yaml")
GiB = 1 << 30
_KEYS = {"name", "class_gb", "memory_gib", "smi_mib", "aliases", "seen", "smi_seen", "estimate", "a100"}
_CLASS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:gb|g)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Gpu:
    name: str
    memory: int                     # bytes, as CUDA reports the card's total
    class_gb: int | None
    source: str                     # where the size comes from
    estimated: bool
    a100: bool = False
    smi_mib: int | None = None
    note: str = ""                  # how --gpu was read, when it was not a name


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
        if not isinstance(item, dict) or set(item) - _KEYS or not {"name", "class_gb", "memory_gib"} <= set(item) \
                or ("seen" in item) == ("estimate" in item):
            raise GpuDataError(f"{path.name}: gpus[{i}]: needs name, class_gb, memory_gib and one of seen or "
                               f"estimate (and only {sorted(_KEYS)})")
        seen = item.get("seen")
        source = f"gpus.yaml, as printed in {seen}" if seen else f"gpus.yaml, estimated: {item['estimate']}"
        if item.get("smi_seen"):
            source += f"; nvidia-smi total seen in {item['smi_seen']}"
        gpu = Gpu(str(item["name"]), int(float(item["memory_gib"]) * GiB), int(item["class_gb"]), source,
                  estimated=not seen, a100=bool(item.get("a100")),
                  smi_mib=int(item["smi_mib"]) if item.get("smi_mib") else None)
        gpus.append(gpu)
        for alias in [gpu.name, *(item.get("aliases") or [])]:
            key = _key(str(alias))
            if key in names and names[key] is not gpu:
                raise GpuDataError(f"{path.name}: gpus[{i}]: {alias!r} already names {names[key].name}")
            names[key] = gpu
    return tuple(sorted(gpus, key=lambda g: g.memory)), names


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.lower()).removeprefix("nvidia").removeprefix("geforce")


def resolve(text: str) -> Gpu:
    """--gpu: a name from the table (A100-80GB, H100, L4, ...), a card class (`80GB`), or the
    card's total in bytes or binary units (`85899345920`, `80GiB`). TriageError (one line) when
    it is none of these."""
    from dataclasses import replace

    from ..units import parse_size

    gpu = _load(DATA)[1].get(_key(text))
    if gpu is not None:
        return gpu
    cls = _CLASS.match(text)
    if cls:
        size = float(cls.group(1))
        members = [g for g in table() if g.class_gb == size]
        if not members:
            sizes = ", ".join(f"{c}GB" for c in sorted({g.class_gb for g in table() if g.class_gb}))
            raise TriageError(f"--gpu {text!r}: no card of the table is sold as {size:g} GB (classes: {sizes}); "
                              "name the card or give its total as CUDA reports it (e.g. 79.18GiB)")
        low = min(members, key=lambda g: g.memory)
        others = ", ".join(g.name for g in members)
        return replace(low, note=(f"--gpu {text} read as the {size:g} GB card class ({others}): the smallest of them, "
                                  f"{low.name} at {low.memory / GiB:.2f} GiB as CUDA reports it, not {size:g}e9 bytes; "
                                  "name the card for its own size"))
    size = parse_size(text)
    if size and size >= GiB:
        return Gpu(f"{size / GiB:.2f} GiB card", size, None, "--gpu", estimated=False,
                   note=f"--gpu {text}: a card of {size / GiB:.2f} GiB as CUDA reports it")
    known = ", ".join(g.name for g in table())
    raise TriageError(f"--gpu {text!r}: not a GPU this table knows ({known}), a card class (e.g. 80GB) nor a "
                      "size of at least 1 GiB (e.g. 85899345920 or 80GiB)")
