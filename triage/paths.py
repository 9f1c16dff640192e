"""Where bundled data lives: inside the package when installed, the repository when developed."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def data_file(name: str) -> Path:
    """A reviewed data file of the package (triage/data/NAME): signatures, thresholds' tables, schemas."""
    return PACKAGE / "data" / name


def verdict_schema_path() -> Path:
    return data_file("verdict.schema.json")


def _bundled(name: str) -> Path:
    # A wheel carries runbooks/ and templates/ under triage/_bundled/; a checkout has them at the top.
    inside = PACKAGE / "_bundled" / name
    return inside if inside.is_dir() else PACKAGE.parent / name


def runbooks_dir() -> Path:
    return _bundled("runbooks")


def templates_dir() -> Path:
    return _bundled("templates")
