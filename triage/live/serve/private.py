"""Files of `triage serve` that hold what an alert carried (its payload, a message about it):
written whole, readable by the receiver's user alone (0600), never through a planted link.

Their content is masked before it gets here (values before serialising); these writers never
mask text again, so a JSON document stays JSON.
"""
from __future__ import annotations

from pathlib import Path

from ...safedir import HeldDir

PRIVATE = 0o600           # an alert's labels and annotations are the sender's, not every local user's
PRIVATE_DIR = 0o700


def make_private_dir(path: Path) -> None:
    """`path` and its missing parents; a directory made here is 0700 (an existing one is kept)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)


def write_private(path: Path, data: bytes, *, folder_created: bool = False) -> None:
    """Write beside `path`, fsync, chmod 0600, rename over it, all within its directory held open
    (`safedir.py`): a reader sees the old file or the new one, only its owner can read either, and
    no link planted on the way (the file, its folder) is followed. `folder_created`: make the
    file's folder (0700) when it is missing."""
    parent = path.parent
    if not folder_created:
        with HeldDir.open(parent, follow=True) as held:
            held.write_atomic(path.name, data, PRIVATE)
        return
    with HeldDir.open(parent.parent, follow=True) as above, \
            above.subdir(parent.name, create=True, mode=PRIVATE_DIR) as held:
        held.write_atomic(path.name, data, PRIVATE)


__all__ = ["PRIVATE", "PRIVATE_DIR", "make_private_dir", "write_private"]
