"""Shared fixtures: paths to the bundled samples and corpus, and a CLI runner."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CORPUS = Path(__file__).resolve().parent / "corpus"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files instead of comparing")


@pytest.fixture(autouse=True)
def audit_key(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test signs and checks actions.jsonl with a key of its own, never the host's real one
    (subprocesses inherit it through the environment)."""
    path = tmp_path_factory.mktemp("audit-key") / "audit.key"
    monkeypatch.setenv("TRIAGE_KEY_FILE", str(path))
    return path


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


def sample(name: str) -> Path:
    path = SAMPLES / name
    assert path.is_dir(), f"missing sample {name}"
    return path
