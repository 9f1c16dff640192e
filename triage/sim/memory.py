"""The simulated GPU: start-up sizing the way vLLM V1 does it, and the allocator's OOM message.

One card, `total` bytes. Other processes and the driver hold 5% of it, so a utilisation target
above 0.95 fails vLLM's free-memory check. The engine's budget (utilisation x total) holds the
weights, the activation peak and non-torch memory (~2 GiB together) and the KV cache gets the
rest. At runtime only `runtime_free` (what the budget left on the card) is there for new
allocator segments: fragments left behind by requests eat into it (the chronic scenario).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

GiB = 1 << 30
MiB = 1 << 20
BLOCK_SIZE = 16                     # tokens per KV block (vLLM's default on CUDA)
OTHERS_SHARE = 0.05                 # of the card: driver, CUDA context of others, sidecars
ACTIVATION_PEAK = int(1.5 * GiB)    # profiled forward-pass peak
NON_TORCH = 512 * MiB               # CUDA context, NCCL, cuBLAS workspaces
CUDA_GRAPHS = int(0.61 * GiB)       # captured graphs (not with --enforce-eager)


@dataclass(frozen=True)
class Sizing:
    total: int
    util: float
    weights: int
    kv_bytes_per_token: int
    model_len: int
    eager: bool = False

    @property
    def free_at_start(self) -> int:
        return int(self.total * (1 - OTHERS_SHARE))

    @property
    def budget(self) -> int:
        return int(self.total * self.util)

    @property
    def kv_bytes(self) -> int:
        """May be negative: the weights and activations alone exceed the budget."""
        return self.budget - self.weights - ACTIVATION_PEAK - NON_TORCH

    @property
    def kv_tokens(self) -> int:
        """Capacity in whole blocks, which is also vLLM's estimated maximum model length."""
        if self.kv_bytes <= 0:
            return 0
        return self.kv_bytes // (self.kv_bytes_per_token * BLOCK_SIZE) * BLOCK_SIZE

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_tokens // BLOCK_SIZE

    @property
    def needed_bytes(self) -> int:
        """KV cache one request of max_model_len needs."""
        return math.ceil(self.model_len / BLOCK_SIZE) * BLOCK_SIZE * self.kv_bytes_per_token

    @property
    def max_concurrency(self) -> float:
        return self.kv_tokens / self.model_len

    @property
    def runtime_free(self) -> int:
        return max(0, self.free_at_start - self.budget)


def startup_error(s: Sizing) -> tuple[str, str] | None:
    """(check, message) of the start-up check that fails, in the order vLLM 0.11 runs them."""
    if s.budget > s.free_at_start:
        return "free_memory", (
            f"Free memory on device ({s.free_at_start / GiB:.2f}/{s.total / GiB:.2f} GiB) on startup is less than "
            f"desired GPU memory utilization ({s.util}, {s.budget / GiB:.2f} GiB). Decrease GPU memory utilization "
            "or reduce GPU memory used by other processes.")
    if s.kv_tokens <= 0:
        return "no_blocks", ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                             "when initializing the engine.")
    if s.needed_bytes > s.kv_bytes:
        # The 0.11 text, "models's" typo included.
        return "max_seq_len", (
            f"To serve at least one request with the models's max seq len ({s.model_len}), "
            f"({s.needed_bytes / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({s.kv_bytes / GiB:.2f} GiB). Based on the available memory, the estimated maximum model "
            f"length is {s.kv_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.")
    return None


def format_size(n: int) -> str:
    """PyTorch's format_size: binary units, two decimals."""
    if n <= 1024:
        return f"{max(0, n)} bytes"
    if n <= MiB:
        return f"{n / 1024:.2f} KiB"
    if n <= GiB:
        return f"{n / MiB:.2f} MiB"
    return f"{n / GiB:.2f} GiB"


@dataclass
class Device:
    """Runtime memory of the card as the caching allocator sees it."""

    sizing: Sizing
    fragments: int = 0     # reserved-but-unallocated split blocks no request can reuse

    @property
    def free(self) -> int:
        return max(0, self.sizing.runtime_free - self.fragments)

    def oom_message(self, tried: int, slack: int, live: int = 0) -> str:
        """The allocator's message for a failed `tried`-byte allocation.

        `slack` is the ordinary reserved-but-unallocated remainder of the activation pool; the
        fragments come on top of it. `live` is what the failing step itself already holds beyond
        the profiled activation peak (a burst's batch): allocated, so it is not free any more."""
        s = self.sizing
        live = max(0, min(live, self.free))
        reserved = s.weights + max(0, s.kv_bytes) + ACTIVATION_PEAK + self.fragments + live
        unallocated = self.fragments + slack
        allocated = reserved - unallocated
        private = "" if s.eager else f"with {format_size(CUDA_GRAPHS)} allocated in private pools (e.g., CUDA Graphs), "
        return (f"CUDA out of memory. Tried to allocate {format_size(tried)}. GPU 0 has a total capacity of "
                f"{format_size(s.total)} of which {format_size(self.free - live)} is free. "
                "Including non-PyTorch memory, "
                f"this process has {format_size(reserved + NON_TORCH)} memory in use. Of the allocated memory "
                f"{format_size(allocated)} is allocated by PyTorch, {private}and {format_size(unallocated)} is "
                "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-"
                "with-pytorch-cuda-alloc-conf)")
