"""The recovery actions are one class each, and everything else reads them: the runbook validator,
the plan's lines, the executor's runners and its list of steps that change what runs."""
from __future__ import annotations

import importlib
import pkgutil

import pytest

from triage.recovery import actions, executor
from triage.recovery.actions import DESTRUCTIVE, REGISTRY, RUNNERS, Action
from triage.recovery.actions.health import MAX_GPU_SHARE, MAX_KV_USAGE
from triage.recovery.context import RunbookStep
from triage.recovery.runbooks import ACTIONS, RunbookError, parse_runbook


def _action_classes() -> set[type[Action]]:
    found: set[type[Action]] = set()
    for info in pkgutil.iter_modules(actions.__path__):
        module = importlib.import_module(f"{actions.__name__}.{info.name}")
        found |= {v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Action)
                  and v.__module__ == module.__name__ and "name" in vars(v)}
    return found


def _runbook(action: str, params: dict) -> dict:
    return {"id": "one", "title": "One", "applies_to": ["burst"], "summary": "s",
            "steps": [{"id": "s", "title": "S", "action": action, "params": params, "timeout_s": 30,
                       "on_failure": "stop", "verify": "v"}]}


def test_every_action_class_is_registered_once_under_its_own_name():
    assert {type(a) for a in REGISTRY.values()} == _action_classes()
    assert all(name == action.name for name, action in REGISTRY.items())
    assert set(REGISTRY) == {"drain", "stop_server", "check_gpu_free", "gpu_reset", "restart", "rollback",
                             "wait_healthy", "verify", "manual", "prove"}


def test_the_validator_runners_and_destructive_steps_come_from_the_classes():
    assert set(ACTIONS) == set(RUNNERS) == set(REGISTRY)
    assert ACTIONS["verify"] == {"window_s": (int, float), "max_kv_usage": (int, float),
                                 "max_gpu_share": (int, float)}
    assert RUNNERS["drain"] is REGISTRY["drain"] and executor.RUNNERS is RUNNERS
    assert DESTRUCTIVE == {"drain", "stop_server", "gpu_reset", "restart", "rollback"} == executor.DESTRUCTIVE


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_default_passes_the_validation_of_its_own_parameter(name):
    action = REGISTRY[name]
    given = {p.name: p.default for p in action.params if p.default is not None}
    if name == "manual":
        given["instruction"] = "do it"
    assert parse_runbook(_runbook(name, given), "t.yaml").steps[0].params == given


def test_a_step_without_parameters_is_planned_and_run_with_the_same_defaults():
    step = RunbookStep("s", "S", "drain", 30.0, "stop", "v")
    drain = REGISTRY["drain"]
    assert (drain.value(step, "poll_s"), drain.value(step, "max_wait_s")) == (2, 120)
    plan = type("PlanView", (), {"url_or_ask": "http://h:1"})()
    assert drain.describe(step, plan) == ["poll http://h:1/metrics every 2 s until vllm:num_requests_running is 0 "
                                          "(at most 120 s; a dead engine counts as drained)"]
    verify = REGISTRY["verify"]
    assert (verify.value(step, "max_kv_usage"), verify.value(step, "max_gpu_share")) == (MAX_KV_USAGE, MAX_GPU_SHARE)


@pytest.mark.parametrize("action, params, problem", [
    ("verify", {"max_kv_usage": 1.5}, "steps[0].params.max_kv_usage: 1.5 is out of range (expected 0.01 to 1)"),
    ("restart", {"env": {"A B": "x"}}, "steps[0].params.env.A B: expected NAME: value"),
    ("restart", {"driver": "ssh"}, "steps[0].params.driver: expected one of process, systemctl, kubectl"),
    ("rollback", {"env": {}}, "steps[0].params.env: unknown parameter for rollback (allowed: driver)"),
    ("manual", {}, "steps[0].params.instruction: a manual step needs the instruction for the human"),
    ("check_gpu_free", {"min_free_share": "most"}, "steps[0].params.min_free_share: expected a number or target"),
    ("gpu_reset", {"require_flag": 1}, "steps[0].params.require_flag: expected bool"),
])
def test_each_parameter_is_checked_by_what_its_action_declares(action, params, problem):
    with pytest.raises(RunbookError) as err:
        parse_runbook(_runbook(action, params), "t.yaml")
    assert problem in str(err.value)
