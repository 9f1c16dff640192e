"""How likely a burst OOM is, from what the card has left outside the engine's budget.

The engine sizes the KV cache from one profiled forward pass, so the activations of a burst live
inside the budget: what a burst adds is what the profile did not see. The caching allocator
cannot always reuse the blocks the profile freed (another shape, another stream, fragmentation),
so a full max_num_batched_tokens prefill can need its activations allocated anew, outside the
budget (samples/burst-long-prompts-v0: a 32,768-token prefill asked for a fresh 1.75 GiB with 1.21
GiB free beyond the budget). Beside that, the headroom already holds what the version does not
charge to the budget: the CUDA context and NCCL setup (vllm_releases.yaml `non_torch`), CUDA graphs
captured after the KV cache, other processes.

spare = card - budget - what already sits outside it; need = one more profiled activation peak.
  spare < need          high: a burst at max_num_batched_tokens can OOM (will fail under a burst)
  need <= spare < 2 need  moderate: survives one, not two allocations the allocator cannot reuse (tight)
  spare >= 2 need       low
"""
from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
HIGH, MODERATE, LOW = "high", "moderate", "low"


@dataclass(frozen=True)
class Burst:
    likelihood: str
    spare: int          # bytes left outside the budget once the fixed parts are placed
    need: int           # bytes a burst may need anew
    arithmetic: str


def assess(total: int, budget: int, outside: list[tuple[str, int]], peak: int) -> Burst:
    """`outside`: (what, bytes) already held beyond the budget; `peak`: the profiled activation peak."""
    held = sum(b for _, b in outside)
    spare = total - budget - held
    need = max(peak, 1)
    likelihood = HIGH if spare < need else MODERATE if spare < 2 * need else LOW
    parts = "".join(f" - {what} {b / GiB:.2f} GiB" for what, b in outside if b)
    arithmetic = (f"card {total / GiB:.2f} GiB - budget {budget / GiB:.2f} GiB{parts} = {spare / GiB:.2f} GiB spare "
                  f"against {need / GiB:.2f} GiB a burst's prefill may allocate anew (the profiled activation peak)"
                  f" = {spare / need:.1f}x")
    return Burst(likelihood, spare, need, arithmetic)
