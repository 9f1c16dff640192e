"""Runbooks are data, validated strictly: every bundled one loads, every mistake names file and key."""
from __future__ import annotations

import pytest
import yaml

from triage.cli import main
from triage.classes import registry
from triage.recovery.runbooks import ACTIONS, RunbookError, load_runbook, load_runbooks, parse_runbook, select

GOOD = {
    "id": "custom", "title": "Custom", "applies_to": ["burst"], "summary": "s",
    "steps": [{"id": "stop", "title": "Stop", "action": "stop_server", "params": {"grace_s": 5},
               "timeout_s": 30, "on_failure": "stop", "verify": "gone"}],
}


def test_every_bundled_runbook_validates_and_covers_every_verdict_runbook():
    books = load_runbooks()
    assert set(books) >= {"startup", "burst", "chronic", "prefix_cache", "host_oom", "gpu_fault"}
    for book in books.values():
        assert all(step.action in ACTIONS for step in book.steps)
        assert all(0 < step.timeout_s <= 3600 for step in book.steps)
    for cls in ("startup", "burst", "chronic", "prefix_cache"):
        assert select(books, cls).id == cls
    assert registry().ids()   # classes exist for the runbooks above


def test_gpu_reset_is_only_in_the_gpu_fault_runbook_and_requires_the_flag():
    for book in load_runbooks().values():
        for step in book.steps:
            if step.action == "gpu_reset":
                assert book.id == "gpu_fault" and step.params.get("require_flag") is True


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d.update(extra=1), "extra: unknown key"),
    (lambda d: d["steps"][0].update(action="pkill"), "steps[0].action: unknown action 'pkill'"),
    (lambda d: d["steps"][0].update(colour="red"), "steps[0].colour: unknown key"),
    (lambda d: d["steps"][0]["params"].update(signal=9), "steps[0].params.signal: unknown parameter"),
    (lambda d: d["steps"][0]["params"].update(grace_s="soon"), "steps[0].params.grace_s: expected"),
    (lambda d: d["steps"][0].update(timeout_s=0), "steps[0].timeout_s"),
    (lambda d: d["steps"][0].update(on_failure="retry"), "steps[0].on_failure"),
    (lambda d: d["steps"][0].pop("verify"), "steps[0].verify: missing"),
    (lambda d: d["steps"].append(dict(d["steps"][0])), "duplicate step id"),
    (lambda d: d.update(steps=[]), "steps: expected a non-empty list"),
])
def test_mistakes_name_the_file_and_the_key(mutate, where):
    import copy

    data = copy.deepcopy(GOOD)
    mutate(data)
    with pytest.raises(RunbookError) as err:
        parse_runbook(data, "my/runbook.yaml")
    assert str(err.value).startswith("my/runbook.yaml: ") and where in str(err.value)


def test_a_user_directory_adds_and_overrides(tmp_path):
    (tmp_path / "custom.yaml").write_text(yaml.safe_dump(GOOD))
    books = load_runbooks([tmp_path])
    assert books["custom"].steps[0].params == {"grace_s": 5}
    assert select(books, "startup").id == "startup"
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: [unclosed\n")
    with pytest.raises(RunbookError, match="bad.yaml: invalid YAML"):
        load_runbook(bad)


def test_runbooks_command_lists_and_validates(runner, tmp_path):
    result = runner.invoke(main, ["runbooks"])
    assert result.exit_code == 0 and "startup" in result.stdout and "gpu_fault" in result.stdout
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({**GOOD, "steps": [{**GOOD["steps"][0], "action": "rm"}]}))
    result = runner.invoke(main, ["runbooks", "--dir", str(tmp_path)])
    assert result.exit_code == 1 and "broken.yaml: steps[0].action: unknown action 'rm'" in result.stderr
