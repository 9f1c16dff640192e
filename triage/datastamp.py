"""The stamp that says a compiled data file still matches its source.

Compiled JSON forms of the YAML data (signatures, launch flags, the classifier's tables) are
used only while the stamp stored in them equals the stamp of the source now. The stamp guards
against a stale build, not against tampering (the compiled file sits beside its source, as
trusted as the code), so a CRC-32 with the length is enough, and it keeps OpenSSL out of the
start-up: `import hashlib` loads it, ~4 ms of a `triage classify`.
"""
from __future__ import annotations

import zlib
from typing import Iterable


def stamp(chunks: Iterable[bytes]) -> str:
    """`crc32:<8 hex>:<length>` over the chunks, in order."""
    crc, length = 0, 0
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
        length += len(chunk)
    return f"crc32:{crc:08x}:{length}"
