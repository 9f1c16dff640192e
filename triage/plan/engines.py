"""How each engine sizes its memory at start-up, as far as the plan needs it.

vLLM: release by release from triage/data/vllm_releases.yaml (each fact with the file and line of
the release's wheel it was read in); a version is sized as the newest release there at or below
it, and the plan says which.

SGLang (reference/engines.md, 0.5.2 `server_args.py`, `model_runner.py::profile_max_num_token`): the
KV pool is what is left of `mem_fraction_static x total` after the weights, one token a page;
mem_fraction_static defaults to (total - reserved) / total with `reserved` by card size,
chunked_prefill_size to 2048 / 8192 / 16384 and the running requests to at most half the pool's
tokens (and 4096).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .releases import Release, pick

GiB = 1 << 30
#: V0 with chunked prefill (on by default past 32K): vllm/config.py:1113 (0.6.4) max_num_batched_tokens = 512;
#: 2048 from 0.6.5 (vllm_releases.yaml batch_defaults.chunked_tokens).
V0_CHUNKED_TOKENS = 512
V0_CHUNKED_FROM = 32 * 1024
V0_MAX_NUM_SEQS = 256
SGLANG_SOURCE = "sglang/srt/server_args.py (0.5.2), as reference/engines.md records it"


@dataclass(frozen=True)
class Sizing:
    engine: str                     # "vllm" | "sglang"
    version: str | None             # as given; None: the newest behaviour
    label: str
    v1: bool = True
    graphs_in_budget: bool = True
    windows: bool = True            # sliding-window layers keep only their window
    default_util: float = 0.92
    mla: bool = True                # DeepSeek-style latent KV cache
    mla_head_size: str | int | None = None
    non_torch: str = "dist"         # what the profile charges: device | context | dist
    release: Release | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def defaults(self, memory: int, a100: bool, max_model_len: int, tp: int, pp: int) -> dict[str, tuple[int | float, str]]:
        """The engine's own values for what the flags leave unset, each with its reason."""
        if self.engine == "sglang":
            return _sglang_defaults(memory, max_model_len, tp, pp)
        rel = self.release
        assert rel is not None
        util = (self.default_util, f"vLLM {rel.version}'s default ({rel.default_util.source})")
        if not rel.tiers:
            chunked = max_model_len > V0_CHUNKED_FROM
            step = rel.chunked_tokens or V0_CHUNKED_TOKENS
            tokens = step if chunked else max(max_model_len, 2048)
            why = (f"V0 turns chunked prefill on past {V0_CHUNKED_FROM:,} tokens, {step} a step"
                   if chunked else "V0 batches a whole max_model_len prompt: max(max_model_len, 2048)")
            return {"max_num_batched_tokens": (tokens, f"{why} ({rel.batch_source})"),
                    "max_num_seqs": (V0_MAX_NUM_SEQS, f"V0's default ({rel.batch_source})"),
                    "gpu_memory_utilization": util}
        gib = memory / GiB
        tier = next(t for t in rel.tiers if gib >= t.min_gib and not (t.not_a100 and a100))
        card = (f"a card of {tier.min_gib:g} GiB or more" + (" other than the A100" if tier.not_a100 else "")
                if tier.min_gib else "a smaller card" + (" or an A100" if any(t.not_a100 for t in rel.tiers) else ""))
        why = f"the OpenAI server's default on {card} ({rel.batch_source})"
        return {"max_num_batched_tokens": (tier.tokens, why), "max_num_seqs": (tier.seqs, why),
                "gpu_memory_utilization": util}


def _sglang_defaults(memory: int, max_model_len: int, tp: int, pp: int) -> dict[str, tuple[int | float, str]]:
    gb = memory / GiB
    n = tp * pp
    reserved = 2.8 + n / 10 if gb < 35 else 9.5 + n / 2 if gb < 90 else 12 + n / 2 if gb < 160 else 32
    frac = round((gb - reserved) / gb, 3)
    chunk = 2048 if gb < 35 else 8192 if gb < 160 else 16384
    return {"gpu_memory_utilization": (frac, f"SGLang's mem_fraction_static for a {gb:.0f} GiB card: "
                                             f"({gb:.1f} - {reserved:g} GiB reserved) / {gb:.1f} ({SGLANG_SOURCE})"),
            "max_num_batched_tokens": (chunk, f"SGLang's chunked_prefill_size for a {gb:.0f} GiB card ({SGLANG_SOURCE})"),
            "max_num_seqs": (4096, f"SGLang's request pool, at most half the pool's tokens ({SGLANG_SOURCE})")}


def sizing(engine: str, version: str | None) -> Sizing:
    """The sizing rules of `engine` at `version` (None: the newest release the plan has read)."""
    if engine == "sglang":
        return Sizing("sglang", version, f"SGLang {version or '0.5'} (sized as 0.5.2)", default_util=0.0,
                      sources={"engine": SGLANG_SOURCE})
    rel, note = pick(version)
    return Sizing("vllm", version or rel.version, note, v1=rel.v1, graphs_in_budget=bool(rel.graphs_in_budget.value),
                  windows=bool(rel.hybrid_kv.value), default_util=float(rel.default_util.value),
                  mla=bool(rel.mla.value), mla_head_size=rel.mla_head_size, non_torch=str(rel.non_torch.value),
                  release=rel,
                  sources={"gpu_memory_utilization": rel.default_util.source, "batch_defaults": rel.batch_source,
                           "cuda_graphs": rel.graphs_in_budget.source, "sliding_window": rel.hybrid_kv.source,
                           "mla": rel.mla.source, "non_torch": rel.non_torch.source})
