"""Shared fixtures: paths to the bundled samples and corpus, and a CLI runner."""
from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CORPUS = Path(__file__).resolve().parent / "corpus"

# A test runner started as a background job of a non-interactive shell (`cmd &`, nohup, some CI
# agents) inherits SIGINT ignored, and every process it spawns inherits that too: the tests that
# press Ctrl-C on a real `triage watch`, `prove` or recovery child would then wait for nothing.
# Those tests stand for a terminal, where Ctrl-C is delivered, so the runner takes the default
# back; its children then start with SIGINT at its default (an installed handler is reset on exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files instead of comparing")


# The monitoring tools some tests drive for real (deploy/ rules, classify --prometheus, serve behind
# Alertmanager). Without them those tests skip; the summary says so in one line, with the fix.
MONITORING_TOOLS = ("prometheus", "promtool", "prometheus-alertmanager")
_TOOL_WORDS = ("prometheus", "promtool", "alertmanager")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if any(w in _skip_reason(r).lower() for w in _TOOL_WORDS)]
    if not skipped:
        return
    missing = [t for t in MONITORING_TOOLS if shutil.which(t) is None] or list(MONITORING_TOOLS)
    terminalreporter.write_line(
        f"{len(skipped)} test{'s were' if len(skipped) != 1 else ' was'} skipped: {_and(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not installed; `.ci/run` installs them and runs the suite "
        "(or: sudo apt-get install prometheus prometheus-alertmanager)",
        yellow=True)


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _skip_reason(report) -> str:
    longrepr = getattr(report, "longrepr", None)
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")


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
