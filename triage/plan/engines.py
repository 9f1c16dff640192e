"""How each engine sizes its memory at start-up, as far as the plan needs it.

vLLM: release by release from triage/data/vllm_releases.yaml (each fact with the file and line of
the release's wheel it was read in); a version is sized as the newest release there at or below
it, and the plan says which.

SGLang (reference/engines.md, 0.5.2 `server_args.py`, `model_runner.py::profile_max_num_token`): the
KV pool is what is left of `mem_fraction_static x total` after the weights, one token a page, and
the running requests at most half the pool's tokens (and 4096). The defaults of
mem_fraction_static and chunked_prefill_size changed by release (SGLANG_RELEASES): by tensor
parallelism up to 0.4.7 (0.88 on one GPU), by card size from 0.4.8 ((total - reserved) / total;
2048 / 8192 / 16384 tokens a chunk); a version is sized as the newest release read at or below it.
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
    sampler: str = "nosort"         # the profile's top-k / top-p filter: sort | nosort
    vision_rotary: str = "native"   # how a Qwen-VL tower rotates q and k: fp32 | fp32-concat | native
    release: Release | None = None
    sglang_rule: str = "reserved"   # SGLANG_RELEASES: how this SGLang release sets its defaults
    sources: dict[str, str] = field(default_factory=dict)

    def defaults(self, memory: int, a100: bool, max_model_len: int, tp: int, pp: int,
                 smi_mib: int | None = None) -> dict[str, tuple[int | float, str]]:
        """The engine's own values for what the flags leave unset, each with its reason."""
        if self.engine == "sglang":
            return _sglang_defaults(memory, max_model_len, tp, pp, self.sglang_rule,
                                    self.sources.get("engine", SGLANG_SOURCE), smi_mib)
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


#: SGLang releases whose defaults the plan has read, oldest first: a version is sized as the newest
#: of them at or below it (as for vLLM); none given, as the newest. Each: its rule for
#: mem_fraction_static and chunked_prefill_size when the flags are not given, with the line read in
#: that release's wheel (`pip download --no-deps sglang==X`, sglang/srt/server_args.py). `gpu_mem`
#: is get_device_memory_capacity(): the card's total in MiB as nvidia-smi reports it.
SGLANG_RELEASES = (
    ("0.4.3.post4", "by_tp", "sglang/srt/server_args.py:204-221 (0.4.3.post4) ServerArgs.__post_init__: "
                             "mem_fraction_static 0.79 / 0.81 / 0.85 / 0.87 / 0.88 for tp_size >= 16 / 8 / 4 / 2 / "
                             "1; chunked_prefill_size 2048 when gpu_mem < 25,000 MiB, else 8192"),
    ("0.4.6", "by_tp_81920", "sglang/srt/server_args.py:224-245 (0.4.6) ServerArgs.__post_init__: by tp_size as in "
                             "0.4.3 when gpu_mem <= 81,920 MiB, else (gpu_mem - 13 x 1024) / gpu_mem; "
                             "chunked_prefill_size 2048 when gpu_mem < 25,000 MiB, else 8192"),
    ("0.4.7", "by_parallel_96g", "sglang/srt/server_args.py:253-294 (0.4.7) ServerArgs.__post_init__: by tp x pp as "
                                 "in 0.4.3 when gpu_mem <= 81,920 MiB, else 0.88; past 180,000 MiB 0.79, past 96 x "
                                 "1024 MiB min(f + 48 x 1024 x (1 - f) / gpu_mem, (gpu_mem - 18 x 1024) / gpu_mem); "
                                 "chunked_prefill_size 16384 past 180,000 MiB, 2048 under 25,000, else 8192"),
    ("0.4.8", "reserved", "sglang/srt/server_args.py:274-327 (0.4.8) ServerArgs.__post_init__: mem_fraction_static "
                          "= (gpu_mem - reserved) / gpu_mem, reserved 2.8 + tp x pp / 10 GiB under 35 GiB, 9.5 + "
                          "tp x pp / 2 under 90, 12 + tp x pp / 2 under 160, else 32; chunked_prefill_size 2048 / "
                          "8192 / 16384 under 35 / 160 GiB / above"),
    ("0.5.2", "reserved", "sglang/srt/server_args.py:449-518 (0.5.2) ServerArgs.__post_init__: the rule of 0.4.8"),
)


def _sglang_release(version: str | None) -> tuple[str, str, str, str]:
    """(the release read, its rule, its source, the label) for `version` (None: the newest)."""
    from .releases import version_key

    if version is None:
        got = SGLANG_RELEASES[-1]
        return (*got, f"SGLang {got[0]}: the newest release this plan has read (--engine-version for another)")
    want = version_key(version)
    below = [r for r in SGLANG_RELEASES if version_key(r[0]) <= want]
    if not below:
        got = SGLANG_RELEASES[0]
        return (*got, f"SGLang {version} sized as {got[0]}, the oldest release this plan has read "
                      "(older releases may differ)")
    got = below[-1]
    if version_key(got[0]) == want:
        return (*got, f"SGLang {got[0]}")
    return (*got, f"SGLang {version} sized as {got[0]}, the newest release at or below it that this plan has read")


def _by_tp(n: int) -> float:
    return 0.79 if n >= 16 else 0.81 if n >= 8 else 0.85 if n >= 4 else 0.87 if n >= 2 else 0.88


def _sglang_defaults(memory: int, max_model_len: int, tp: int, pp: int, rule: str = "reserved",
                     source: str = SGLANG_SOURCE, smi_mib: int | None = None) -> dict[str, tuple[int | float, str]]:
    """SGLang's mem_fraction_static and chunked_prefill_size for a card of `memory` bytes (CUDA's
    total; `smi_mib`, nvidia-smi's, is what SGLang itself reads where the table knows it)."""
    gb = memory / GiB
    mib = float(smi_mib) if smi_mib else memory / (1 << 20)
    n = tp * pp
    if rule == "reserved":
        reserved = 2.8 + n / 10 if mib < 35 * 1024 else 9.5 + n / 2 if mib < 90 * 1024 else \
            12 + n / 2 if mib < 160 * 1024 else 32
        frac = round((mib - reserved * 1024) / mib, 3)
        how = f"({mib:,.0f} - {reserved:g} x 1024 MiB reserved) / {mib:,.0f} MiB"
        chunk = 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384
    elif rule in ("by_tp", "by_tp_81920"):
        if rule == "by_tp" or mib <= 81920:
            frac, how = _by_tp(tp), f"by tensor parallelism ({tp})"
        else:
            frac, how = round((mib - 13 * 1024) / mib, 3), f"({mib:,.0f} - 13 x 1024 MiB) / {mib:,.0f} MiB"
        chunk = 2048 if mib < 25000 else 8192
    else:                                                   # by_parallel_96g (0.4.7)
        frac, how = (_by_tp(n), f"by tp x pp ({n})") if mib <= 81920 else (0.88, "past 81,920 MiB")
        if mib > 180000:
            frac, how = 0.79, "past 180,000 MiB"
        elif mib > 96 * 1024:
            frac = round(min(frac + 48 * 1024 * (1 - frac) / mib, (mib - 18 * 1024) / mib), 3)
            how = "past 96 x 1024 MiB: min(f + 48 x 1024 x (1 - f) / gpu_mem, (gpu_mem - 18 x 1024) / gpu_mem)"
        chunk = 16384 if mib > 180000 else 2048 if mib < 25000 else 8192
    return {"gpu_memory_utilization": (frac, f"SGLang's mem_fraction_static for a {gb:.0f} GiB card: {how} "
                                             f"({source})"),
            "max_num_batched_tokens": (chunk, f"SGLang's chunked_prefill_size for a {gb:.0f} GiB card ({source})"),
            "max_num_seqs": (4096, f"SGLang's request pool, at most half the pool's tokens ({source})")}


def sizing(engine: str, version: str | None) -> Sizing:
    """The sizing rules of `engine` at `version` (None: the newest release the plan has read)."""
    if engine == "sglang":
        _, rule, source, label = _sglang_release(version)
        return Sizing("sglang", version, label, default_util=0.0, sglang_rule=rule,
                      sources={"engine": source})
    rel, note = pick(version)
    return Sizing("vllm", version or rel.version, note, v1=rel.v1, graphs_in_budget=bool(rel.graphs_in_budget.value),
                  windows=bool(rel.hybrid_kv.value), default_util=float(rel.default_util.value),
                  mla=bool(rel.mla.value), mla_head_size=rel.mla_head_size, non_torch=str(rel.non_torch.value),
                  sampler=str(rel.sampler.value), vision_rotary=str(rel.vision_rotary.value), release=rel,
                  sources={"gpu_memory_utilization": rel.default_util.source, "batch_defaults": rel.batch_source,
                           "cuda_graphs": rel.graphs_in_budget.source, "sliding_window": rel.hybrid_kv.source,
                           "mla": rel.mla.source, "non_torch": rel.non_torch.source,
                           "sampler": rel.sampler.source, "vision_rotary": rel.vision_rotary.source})
