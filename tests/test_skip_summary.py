"""The suite says in one line what it skipped for want of prometheus and Alertmanager, and how
to get them: a quiet skip would pass for a full run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_tests_skipped_for_want_of_the_monitoring_tools_are_named_with_the_fix():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_deploy_monitoring.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/nonexistent", "HOME": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stdout[-3000:]
    line = next((ln for ln in done.stdout.splitlines() if "tests were skipped" in ln), None)
    assert line is not None, done.stdout[-3000:]
    assert "prometheus, promtool and prometheus-alertmanager are not installed" in line
    assert "`.ci/run` installs them" in line
