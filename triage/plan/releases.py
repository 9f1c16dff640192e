"""The vLLM releases whose start-up sizing the plan models (triage/data/vllm_releases.yaml).

A requested version is sized as the newest release of the table at or below it, never as a
release the table has not read; the chosen release is part of every plan's output."""
from __future__ import annotations

import re

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import TriageError
from ..paths import data_file

DATA = data_file("vllm_releases.yaml")
NON_TORCH_BASES = ("device", "context", "dist")
SAMPLER_PATHS = ("sort", "nosort")
VISION_ROTARY = ("fp32", "fp32-concat", "native")


@dataclass(frozen=True)
class Fact:
    value: Any
    source: str


@dataclass(frozen=True)
class Tier:
    min_gib: float
    not_a100: bool
    tokens: int
    seqs: int


@dataclass(frozen=True)
class Release:
    version: str
    v1: bool
    default_util: Fact
    tiers: tuple[Tier, ...]          # empty: V0's rule (max(max_model_len, 2048), 256 sequences)
    batch_source: str
    graphs_in_budget: Fact
    hybrid_kv: Fact
    mla: Fact
    mla_head_size: str | int | None   # before MLA support: 256 (padded) or "qk"
    non_torch: Fact
    sampler: Fact                    # the profile's top-k / top-p filter: sort | nosort
    chunked_tokens: int | None = None  # V0: max_num_batched_tokens a step with chunked prefill (None: 512)
    vision_rotary: Fact = Fact("native", "")  # how a Qwen-VL tower rotates q and k: fp32 | fp32-concat | native

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)


@dataclass(frozen=True)
class Check:
    message: str
    source: str


class ReleaseDataError(ValueError):
    """vllm_releases.yaml has an entry the plan cannot use."""


def version_key(text: str) -> tuple[int, ...]:
    """'0.8.5.post1' -> (0, 8, 5), '0.8.2+cu124' -> (0, 8, 2), '0.8.5rc1' -> (0, 8, 5); TriageError when it
    is not a version. A local build's `+...` and a pre-release suffix are not part of the release."""
    parts = []
    for piece in str(text).strip().lstrip("vV").split("+")[0].split("."):
        digits = re.match(r"\d{1,6}", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    if not parts:
        raise TriageError(f"--engine-version {text!r}: not a version (e.g. 0.11.0)")
    return tuple(parts + [0] * (3 - len(parts)))[:4]


def releases() -> tuple[Release, ...]:
    return _load(DATA)[0]


def checks() -> dict[str, Check]:
    return _load(DATA)[1]


def newest() -> Release:
    return releases()[-1]


def pick(version: str | None) -> tuple[Release, str]:
    """The release whose behaviour sizes `version` and a note saying which (None: the newest)."""
    table = releases()
    if version is None:
        top = table[-1]
        return top, f"vLLM {top.version}: the newest release this plan has read (--engine-version for another)"
    want = version_key(version)
    below = [r for r in table if r.key <= want]
    if not below:
        first = table[0]
        return first, (f"vLLM {version} sized as {first.version}, the oldest release this plan has read "
                       "(older releases may differ)")
    got = below[-1]
    if got.key == want:
        return got, f"vLLM {got.version}"
    return got, (f"vLLM {version} sized as {got.version}, the newest release at or below it that this plan "
                 "has read")


@lru_cache(maxsize=None)
def _load(path: Path) -> tuple[tuple[Release, ...], dict[str, Check]]:
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out = []
    for i, item in enumerate(raw.get("releases") or []):
        try:
            out.append(_release(item))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReleaseDataError(f"{path.name}: releases[{i}]: {exc}") from None
    out.sort(key=lambda r: r.key)
    found = {name: Check(str(c["message"]), str(c["source"])) for name, c in (raw.get("checks") or {}).items()}
    return tuple(out), found


def _fact(item: dict[str, Any], key: str) -> Fact:
    entry = item[key]
    return Fact(entry["value"], str(entry["source"]))


def _release(item: dict[str, Any]) -> Release:
    batch = item["batch_defaults"]
    tiers = tuple(Tier(float(t["min_gib"]), bool(t.get("not_a100")), int(t["tokens"]), int(t["seqs"]))
                  for t in batch.get("tiers") or ())
    if not tiers and not batch.get("v0_rule"):
        raise ValueError("batch_defaults needs tiers or v0_rule")
    non_torch = _fact(item, "non_torch")
    if non_torch.value not in NON_TORCH_BASES:
        raise ValueError(f"non_torch must be one of {NON_TORCH_BASES}")
    sampler = _fact(item, "sampler")
    if sampler.value not in SAMPLER_PATHS:
        raise ValueError(f"sampler must be one of {SAMPLER_PATHS}")
    rotary = _fact(item, "vision_rotary")
    if rotary.value not in VISION_ROTARY:
        raise ValueError(f"vision_rotary must be one of {VISION_ROTARY}")
    mla = _fact(item, "mla")
    return Release(str(item["version"]), item["engine"] == "V1", _fact(item, "default_util"), tiers,
                   str(batch["source"]), _fact(item, "graphs_in_budget"), _fact(item, "hybrid_kv"), mla,
                   item["mla"].get("head_size"), non_torch, sampler,
                   int(batch["chunked_tokens"]) if batch.get("chunked_tokens") is not None else None, rotary)
