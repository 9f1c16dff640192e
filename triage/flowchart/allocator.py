"""What the allocator's own numbers say about a GPU OOM: memory really in use, or fragmentation.

PyTorch's OOM message reports how much memory it had reserved but not handed out. That amount
is judged against the card and the failed request, and always lands on one side:

- fragmented: more than the failed request (FRAG_MIN_MULTIPLE times it) *and* at least
  FRAG_MIN_SHARE of the card (or FRAG_MIN_BYTES when the card's size is unknown) sat reserved
  but unallocated. The request would have fitted in that memory had it been one piece: the
  allocator's cache is split up.
- in use: anything less. The memory was held by live tensors (weights, KV cache, activations);
  what was left over is ordinary allocator slack.

An "in use" reading is *borderline* when the unallocated amount is about the failed request's size
(from BORDERLINE_SHARE of it up to BORDERLINE_MAX_MULTIPLE times it) and at least
BORDERLINE_CARD_SHARE of the card (a GiB when the card is unknown), while below the fragmentation
floor: had it been one piece, it would have held much of the request. Far more than the request
but under the floor is the slack a serving engine keeps cached, not a sign. Such a reading does not rule
fragmentation out, so it cannot by itself make a runtime OOM a burst: load evidence must.

The footer "If reserved but unallocated memory is large ..." is printed with every message and
says nothing by itself; only the number does. An allocator that states its largest free block
(Tenstorrent's bank allocator) settles it directly: free memory above the request with no free
block as large as the request is fragmentation.
"""
from __future__ import annotations

from typing import NamedTuple

from ..model import Evidence
from ..thresholds import (BORDERLINE_CARD_SHARE, BORDERLINE_MAX_MULTIPLE, BORDERLINE_SHARE, FRAG_MIN_BYTES,
                          FRAG_MIN_MULTIPLE, FRAG_MIN_SHARE)
from ..units import format_bytes


class AllocatorReading(NamedTuple):
    state: str                 # "fragmented" | "in_use"
    unallocated: int
    tried: int
    capacity: int | None
    allocated: int | None
    largest_free: int | None = None    # the allocator's largest free block, where its message states it

    @property
    def fragmented(self) -> bool:
        return self.state == "fragmented"

    @property
    def borderline(self) -> bool:
        card_floor = BORDERLINE_CARD_SHARE * self.capacity if self.capacity else FRAG_MIN_BYTES
        return (not self.fragmented and self.unallocated >= card_floor
                and BORDERLINE_SHARE * self.tried <= self.unallocated <= BORDERLINE_MAX_MULTIPLE * self.tried)

    @property
    def ratio(self) -> float | None:
        """reserved-but-unallocated / reserved: the fragmentation definition the output names."""
        reserved = (self.allocated or 0) + self.unallocated
        return self.unallocated / reserved if reserved and self.allocated is not None else None

    def describe(self) -> str:
        if self.fragmented and self.largest_free is not None:
            return (f"{format_bytes(self.unallocated)} free, more than the {format_bytes(self.tried)} that failed, "
                    f"but its largest free block was {format_bytes(self.largest_free)}")
        if self.fragmented:
            return (f"{format_bytes(self.unallocated)} reserved but unallocated, more than the "
                    f"{format_bytes(self.tried)} that failed")
        if self.borderline:
            return (f"{format_bytes(self.unallocated)} reserved-but-unallocated, about the size of the "
                    f"{format_bytes(self.tried)} that failed: fragmentation is not ruled out")
        return f"only {format_bytes(self.unallocated)} reserved-but-unallocated: the memory was in use, not fragmented"


def floor(capacity: int | None) -> float:
    """The smallest reserved-but-unallocated amount that counts as fragmentation on this card."""
    return FRAG_MIN_SHARE * capacity if capacity else FRAG_MIN_BYTES


def reading(oom: Evidence | None) -> AllocatorReading | None:
    """The allocator's verdict on the failing allocation, or None when the message has no numbers."""
    if oom is None:
        return None
    unalloc = oom.fields.get("reserved_unallocated_bytes")
    if unalloc is None:
        return None
    tried = int(oom.fields.get("tried_bytes") or 0)
    capacity = oom.fields.get("capacity_bytes") or None
    largest = oom.fields.get("largest_free_block_bytes")
    if largest is not None:
        # The allocator states its largest free block: free memory enough for the request, in no
        # piece large enough for it, is fragmentation by definition (no floor needed to tell slack).
        fragmented = unalloc >= FRAG_MIN_MULTIPLE * tried and int(largest) < tried
    else:
        fragmented = unalloc >= FRAG_MIN_MULTIPLE * tried and unalloc >= floor(capacity)
    return AllocatorReading("fragmented" if fragmented else "in_use", int(unalloc), tried, capacity,
                            oom.fields.get("allocated_bytes"), int(largest) if largest is not None else None)
