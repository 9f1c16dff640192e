"""A bundle packed as one file (`triage collect --tar`, or any .tar.gz / .zip of a bundle directory)
for the commands that read a bundle directory: timeline, postmortem, recover's plan.

`classify` reads archives in place (triage.evidence.archive). The other commands also read
notes.jsonl, actions.jsonl and the recovery logs as files, so the archive is listed with the same
checks (every member name normalised first; absolute names, `..`, drive letters, backslashes,
NULs, links, devices and FIFOs refused; the expanded size bounded like any compressed input) and
its regular members are created beneath the private temporary directory, held open by descriptor
with no link followed on the way (`safedir.py`), and removed when the command ends. Nothing is written beside the archive or outside that directory:
a command that would write into the bundle (`recover --execute`, `note`) is refused with the
hint to extract it first.
"""
from __future__ import annotations

import os
import shutil
from contextlib import nullcontext
import tempfile
from pathlib import Path

from .errors import BadInput
from .safedir import HeldDir, checked_parts

PACKED_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar", ".zip")


def is_packed(path: str | os.PathLike[str]) -> bool:
    """A file (not a directory) that holds an archive, told by content."""
    from .evidence.archive import archive_kind
    from .evidence.base import input_limit

    return os.path.isfile(path) and archive_kind(str(path), input_limit(None)[0]) is not None


def stem(path: str | os.PathLike[str]) -> str:
    """INCIDENT for INCIDENT.tar.gz (what the bundle is called once unpacked)."""
    name = Path(path).name
    for suffix in PACKED_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def unpacked(path: str, *, writes: str | None = None) -> str:
    """`path` itself for anything but an archive (the command reports a missing directory as it
    always has); for a packed bundle, the path of a private copy of it, removed when the running
    click command ends. `writes` names what the command would write into the bundle: the
    archive is then refused (BadInput) rather than changed or extracted beside itself."""
    if not is_packed(path):
        return path
    if writes:
        raise BadInput(path, f"a packed bundle: {writes} is written into the bundle, so extract it first "
                             f"(tar xf {path}) and give the directory")
    import click

    tmp = tempfile.mkdtemp(prefix="triage-bundle-")
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(lambda: shutil.rmtree(tmp, ignore_errors=True))
    try:
        return str(_unpack(path, Path(tmp)))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _unpack(path: str, into: Path) -> Path:
    from .evidence.archive import archive_kind, list_archive
    from .evidence.base import input_limit
    from .output import echo

    cap, explicit = input_limit(None)
    listing = list_archive(path, str(archive_kind(path, cap)), cap, explicit)
    if listing.problem:
        raise BadInput(path, listing.problem)
    if listing.incident is None:
        raise BadInput(path, "holds no incident.yaml: not a packed incident bundle (give it to `triage classify`)")
    top = os.path.dirname(listing.incident[0])            # "INC" for INC/incident.yaml, "" at the top
    root = into / (top or stem(path))
    for name, why in listing.refused:
        echo(f"triage: warning: {name}: {why}", err=True)
    with HeldDir.open(into) as held, held.subdir(root.name, create=True, mode=0o700) as bundle:
        for member, data in listing.members:
            if top and not member.name.startswith(top + "/"):
                continue                                  # outside the bundle's folder: not part of it
            rel = member.name[len(top) + 1:] if top else member.name
            try:
                _extract(bundle, rel, member, data)
            except (OSError, BadInput) as exc:            # a name that is both a file and a folder in the archive
                why = exc.problem if isinstance(exc, BadInput) else (exc.strerror or str(exc))
                echo(f"triage: warning: {member.display}: cannot be read as part of the bundle ({why})", err=True)
    return root


def _extract(bundle: HeldDir, rel: str, member, data: bytes | None) -> None:
    """One member, created beneath the held bundle directory: its name is resolved there, with no
    link followed and nothing above the bundle reachable (the listing normalised every name)."""
    parts = checked_parts(rel)
    folder = "/".join(parts[:-1])
    with (bundle.subdir(folder, create=True, mode=0o700) if folder else nullcontext(bundle)) as parent:
        parent.unlink(parts[-1])                          # a member named twice: the later one wins, as tar does
        fd = parent.create_new(parts[-1], 0o600)
        with os.fdopen(fd, "wb") as out:
            if data is not None:
                out.write(data)
            else:
                with member.open() as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            if member.mtime is not None:                  # a year-less log takes its year from the mtime
                stamp = member.mtime.timestamp()
                os.utime(out.fileno(), (stamp, stamp))


__all__ = ["is_packed", "stem", "unpacked"]
