"""How each engine (and vLLM version) sizes its memory at start-up, as far as the plan needs it.

vLLM (reference/formats.md, from the released wheels): V1 is the engine from 0.8 on (V0 before);
V1 refuses to start unless `gpu_memory_utilization x total` is free, while V0 counts other
processes' memory against that budget. CUDA graphs are captured after the KV cache is sized
(outside the budget) until 0.21, which profiles them inside it. The default
gpu_memory_utilization is 0.92 in 0.33 (0.90 before). The V1 server's default
max_num_batched_tokens / max_num_seqs are 8192 / 1024 on cards of 70 GiB or more other than the
A100, else 2048 / 256; V0 batches up to max_model_len tokens (chunked prefill, 2048 tokens a
step, only past 32,768) and 256 sequences. Sliding-window layers keep only their window with the
hybrid KV allocator (0.10 on); older versions give them a full cache.

SGLang (reference/engines.md, 0.5.2): the KV pool is what is left of `mem_fraction_static x total`
after the weights, one token a page; mem_fraction_static defaults to (total - reserved) / total
with `reserved` by card size, chunked_prefill_size to 2048 / 8192 / 16384 and the running
requests to at most half the pool's tokens (and 4096).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..flowchart.knowledge import version_tuple

GiB = 1 << 30
LATEST_VLLM = "0.33"


@dataclass(frozen=True)
class Sizing:
    engine: str                     # "vllm" | "sglang"
    version: str | None             # as given; None: the newest behaviour
    label: str
    v1: bool = True
    graphs_in_budget: bool = True
    windows: bool = True            # sliding-window layers keep only their window
    default_util: float = 0.92

    def defaults(self, memory: int, a100: bool, max_model_len: int, tp: int, pp: int) -> dict[str, tuple[int | float, str]]:
        """The engine's own values for what the flags leave unset, each with its reason."""
        if self.engine == "sglang":
            return _sglang_defaults(memory, max_model_len, tp, pp)
        if not self.v1:
            tokens = max(max_model_len, 2048) if max_model_len <= 32768 else 2048
            why = "V0 batches a whole max_model_len prompt" if max_model_len <= 32768 else \
                "V0 turns chunked prefill on past 32,768 tokens"
            return {"max_num_batched_tokens": (tokens, why), "max_num_seqs": (256, "V0's default"),
                    "gpu_memory_utilization": (self.default_util, "vLLM's default")}
        big = memory >= 70 * GiB and not a100
        card = "a card of 70 GiB or more other than the A100" if big else "a card under 70 GiB or an A100"
        return {"max_num_batched_tokens": (8192 if big else 2048, f"the V1 server's default on {card}"),
                "max_num_seqs": (1024 if big else 256, f"the V1 server's default on {card}"),
                "gpu_memory_utilization": (self.default_util, "vLLM's default"
                                           + (f" from {LATEST_VLLM}" if self.default_util == 0.92 else ""))}


def _sglang_defaults(memory: int, max_model_len: int, tp: int, pp: int) -> dict[str, tuple[int | float, str]]:
    gb = memory / GiB
    n = tp * pp
    reserved = 2.8 + n / 10 if gb < 35 else 9.5 + n / 2 if gb < 90 else 12 + n / 2 if gb < 160 else 32
    frac = round((gb - reserved) / gb, 3)
    chunk = 2048 if gb < 35 else 8192 if gb < 160 else 16384
    return {"gpu_memory_utilization": (frac, f"SGLang's mem_fraction_static for a {gb:.0f} GiB card: "
                                             f"({gb:.1f} - {reserved:g} GiB reserved) / {gb:.1f}"),
            "max_num_batched_tokens": (chunk, f"SGLang's chunked_prefill_size for a {gb:.0f} GiB card"),
            "max_num_seqs": (4096, "SGLang's request pool, at most half the pool's tokens")}


def sizing(engine: str, version: str | None) -> Sizing:
    """The sizing rules of `engine` at `version` (None: the newest behaviour)."""
    if engine == "sglang":
        return Sizing("sglang", version, f"SGLang {version or '0.5'}", default_util=0.0)
    if version is None:
        return Sizing("vllm", None, f"vLLM {LATEST_VLLM} (the newest; --engine-version for another)")
    v = version_tuple(version)
    return Sizing("vllm", version, f"vLLM {version}", v1=v >= (0, 8, 0), graphs_in_budget=v >= (0, 21, 0),
                  windows=v >= (0, 10, 0), default_util=0.92 if v >= (0, 33, 0) else 0.90)
