"""Version ranges read without packaging agree with packaging on every range the data files hold."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from triage.flowchart.knowledge import in_range, plain_range, version_tuple

DATA = Path(__file__).resolve().parents[1] / "triage" / "data"
RANGE_KEYS = ("affected", "versions")


def _ranges(node) -> set[str]:
    """Every `affected:` / `versions:` string anywhere in a YAML document."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in RANGE_KEYS and isinstance(value, str):
                found.add(value)
            else:
                found |= _ranges(value)
    elif isinstance(node, list):
        for item in node:
            found |= _ranges(item)
    return found


def _data_ranges() -> list[str]:
    out: set[str] = set()
    for path in sorted(DATA.glob("*.yaml")):
        out |= _ranges(yaml.safe_load(path.read_text(encoding="utf-8")))
    return sorted(out)


# Releases around every bound the data uses, and the shapes engines log (nightlies, post, local builds).
VERSIONS = sorted({".".join(map(str, v)) for v in itertools.product(range(0, 4), range(0, 36), range(0, 12))}
                  | {"0.4.6.post1", "0.9.1.dev277+g1234", "0.6.4.post1", "0.10.1.1", "1.0", "0.7", "2.0.1", "3.1.0"})


def test_the_data_files_hold_ranges_to_check():
    ranges = _data_ranges()
    assert len(ranges) >= 30 and any(",<" in r for r in ranges)


@pytest.mark.parametrize("spec", _data_ranges())
def test_every_data_range_reads_as_packaging_reads_it(spec):
    try:
        oracle = SpecifierSet(spec)
    except Exception:
        assert not in_range("0.6.0", spec)      # an unreadable range holds no version either way
        return
    for version in VERSIONS:
        release = ".".join(map(str, version_tuple(version)))
        assert in_range(version, spec) == oracle.contains(release, prereleases=True), (spec, version)


def test_plain_ranges_are_read_without_packaging_and_others_are_left_to_it():
    assert plain_range(">=0.6.0,<0.7.1") == ((">=", (0, 6, 0, 0, -1)), ("<", (0, 7, 1, 0, -1)))
    assert plain_range("<0.4.6.post2") == (("<", (0, 4, 6, 0, 2)),)
    assert plain_range("~=0.6") is None and plain_range("==0.6.*") is None and plain_range("any") is None
    assert in_range("0.6.5", "~=0.6.0") and not in_range("0.7.0", "~=0.6.0")      # packaging still reads these
    assert in_range("0.4.6", "<0.4.6.post2") and in_range("0.6", "==0.6.0")
