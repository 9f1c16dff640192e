"""PyTorch's caching-allocator OOM message -> numbers (every wording since torch 1.x).

Current:  "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB
           of which 1.06 GiB is free. Process 123 has 78.1 GiB memory in use. Of the allocated
           memory 75.2 GiB is allocated by PyTorch, with 46.00 MiB allocated in private pools
           (e.g., CUDA Graphs), and 1.1 GiB is reserved by PyTorch but unallocated. ..."
torch 2.1: the same with the "capacty" typo.
<= 2.0:   "CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity;
           130.35 MiB already allocated; 47.06 MiB free; [X allowed;] 188.00 MiB reserved in
           total by PyTorch)"
"""
from __future__ import annotations

import re
from typing import Any

from ..lazyre import lazy
from ..units import size_from, whole

_SIZE = r"(?<!\d)(\d+(?:\.\d+)?)\s*(bytes|[KMGT]iB|[KMGT]B)"

OOM_START = lazy(r"(?:(?:CUDA|XPU|HIP|MPS)\s+)?[Oo]ut of memory\.\s*Tried to allocate\s+" + _SIZE)
_GPU = re.compile(r"GPU\s+(\d+)")
_CAPACITY = lazy(r"total capac(?:i)?ty of\s+" + _SIZE + r"\s+of which\s+" + _SIZE + r"\s+is free")
_PROCESS = lazy(r"Process\s+(\d+)\s+has\s+" + _SIZE + r"\s+memory in use")
_SELF = re.compile(r"this process has\s+" + _SIZE + r"\s+memory in use")
_ALLOWED = re.compile(_SIZE + r"\s+allowed")
_BY_TORCH = re.compile(r"Of the allocated memory\s+" + _SIZE + r"\s+is allocated by PyTorch")
_PRIVATE = re.compile(r"with\s+" + _SIZE + r"\s+allocated in private pools")
_UNALLOC = re.compile(_SIZE + r"\s+is reserved by PyTorch but unallocated")
# torch <= 2.0
_OLD_CAP = re.compile(_SIZE + r"\s+total capacity")
_OLD_ALLOC = re.compile(_SIZE + r"\s+already allocated")
_OLD_FREE = lazy(_SIZE + r"\s+free")
_OLD_RESERVED = lazy(_SIZE + r"\s+reserved in total by PyTorch")


def _size(m: re.Match[str] | None, group: int = 1) -> int | None:
    if not m:
        return None
    return size_from(m.group(group), m.group(group + 1))


def parse_torch_oom(text: str) -> dict[str, Any] | None:
    """Fields of the allocator message, or None if `text` holds none. Missing parts stay None."""
    start = OOM_START.search(text)
    if not start:
        return None
    body = text[start.start():]
    fields: dict[str, Any] = {
        "tried_bytes": size_from(start.group(1), start.group(2)),
        "device": None, "capacity_bytes": None, "free_bytes": None,
        "self_bytes": None, "other_processes": [], "allowed_bytes": None,
        "allocated_bytes": None, "private_pool_bytes": None, "reserved_unallocated_bytes": None,
        "wording": "current",
    }
    gpu = _GPU.search(body)
    if gpu:
        fields["device"] = whole(gpu.group(1))
    cap = _CAPACITY.search(body)
    if cap:
        fields["capacity_bytes"] = _size(cap, 1)
        fields["free_bytes"] = _size(cap, 3)
    others = ({"pid": whole(p.group(1)), "bytes": size_from(p.group(2), p.group(3))} for p in _PROCESS.finditer(body))
    fields["other_processes"] = [p for p in others if p["pid"] is not None and p["bytes"] is not None]
    fields["self_bytes"] = _size(_SELF.search(body))
    fields["allowed_bytes"] = _size(_ALLOWED.search(body))
    fields["allocated_bytes"] = _size(_BY_TORCH.search(body))
    fields["private_pool_bytes"] = _size(_PRIVATE.search(body))
    fields["reserved_unallocated_bytes"] = _size(_UNALLOC.search(body))
    if cap is None and _OLD_CAP.search(body):
        fields["wording"] = "torch<=2.0"
        fields["capacity_bytes"] = _size(_OLD_CAP.search(body))
        fields["allocated_bytes"] = _size(_OLD_ALLOC.search(body))
        free = _OLD_FREE.search(body)
        fields["free_bytes"] = _size(free)
        reserved = _size(_OLD_RESERVED.search(body))
        if reserved is not None and fields["allocated_bytes"] is not None:
            fields["reserved_unallocated_bytes"] = max(0, reserved - fields["allocated_bytes"])
    return fields


def is_complete(fields: dict[str, Any]) -> bool:
    """True once the message has reached its last number (it may be wrapped over lines)."""
    return fields.get("reserved_unallocated_bytes") is not None
