"""`triage recover INCIDENT` (no --execute) prints the plan and changes nothing at all."""
from __future__ import annotations

import json
import os
import shutil

from triage.cli import main
from triage.errors import ExitCode

from tests.conftest import sample


def _snapshot(root):
    return sorted((os.path.relpath(os.path.join(d, f), root), os.stat(os.path.join(d, f)).st_mtime_ns,
                   os.stat(os.path.join(d, f)).st_size) for d, _, files in os.walk(root) for f in files)


def test_dry_run_plan_is_concrete_and_writes_nothing(runner, tmp_path):
    bundle = tmp_path / "incident"
    shutil.copytree(sample("startup-kv-blowout-v1"), bundle)
    before = _snapshot(tmp_path)
    result = runner.invoke(main, ["recover", str(bundle), "--json"])
    assert result.exit_code == 0, result.stderr
    assert _snapshot(tmp_path) == before                      # nothing written, nothing touched
    plan = json.loads(result.stdout)
    assert plan["dry_run"] is True and plan["runbook"] == "startup"
    # The whole launch of the log's non-default args, changed only where the verdict says.
    assert plan["new_argv"] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port",
                                "8000", "--max-model-len", "29216", "--served-model-name", "llama-3.1-8b-instruct"]
    assert {"setting": "max_model_len", "from": 131072, "to": 29216} in plan["changes"]
    actions = [s["action"] for s in plan["steps"]]
    assert actions[0] == "stop_server" and "restart" in actions and "wait_healthy" in actions
    assert all(s["timeout_s"] > 0 for s in plan["steps"])
    healthy = next(s for s in plan["steps"] if s["action"] == "wait_healthy")
    assert any("max_tokens=1" in d for d in healthy["details"])


def test_pids_come_from_the_evidence(runner):
    plan = json.loads(runner.invoke(main, ["recover", str(sample("startup-other-tenant")), "--json"]).stdout)
    assert plan["runbook"] == "startup"
    assert any(p["pid"] == 3817204 for p in plan["pids"])


def test_env_changes_for_chronic_and_a_human_readable_plan(runner):
    plan = json.loads(runner.invoke(main, ["recover", str(sample("chronic-fragmentation")), "--json"]).stdout)
    assert plan["env"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    text = runner.invoke(main, ["recover", str(sample("chronic-fragmentation"))]).stdout
    assert "dry run" in text and "expandable_segments:True" in text


def test_unknown_verdict_needs_a_runbook(runner):
    result = runner.invoke(main, ["recover", str(sample("unknown-bare-oom"))])
    assert result.exit_code == ExitCode.UNKNOWN and "--runbook" in result.stderr
    chosen = runner.invoke(main, ["recover", str(sample("unknown-bare-oom")), "--runbook", "burst", "--json"])
    assert chosen.exit_code == 0 and json.loads(chosen.stdout)["runbook"] == "burst"
    missing = runner.invoke(main, ["recover", str(sample("unknown-bare-oom")), "--runbook", "nope"])
    assert missing.exit_code == ExitCode.BAD_INPUT and "no runbook for 'nope'" in missing.stderr


def test_the_kubectl_driver_prints_the_argv_it_would_run(runner):
    result = runner.invoke(main, ["recover", str(sample("chronic-fragmentation")), "--json", "--driver", "kubectl",
                                  "--deployment", "llm/vllm-8b"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    relaunch = next(s for s in plan["steps"] if s["action"] == "restart")
    assert "run:     kubectl -n llm set env deployment/vllm-8b PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" \
        in relaunch["details"]
    assert any(d.startswith("run:     kubectl -n llm rollout status deployment/vllm-8b") for d in relaunch["details"])
    assert plan["refused_by_preflight"] == []
    rollback = json.loads(runner.invoke(main, ["recover", str(sample("chronic-fragmentation")), "--json", "--runbook",
                                               "rollback", "--driver", "kubectl", "--deployment", "llm/vllm-8b"]).stdout)
    step = next(s for s in rollback["steps"] if s["action"] == "rollback")
    assert "run:     kubectl -n llm rollout undo deployment/vllm-8b" in step["details"]


def test_no_oom_has_nothing_to_recover(runner, tmp_path):
    """A healthy server's bundle is an answer, not an `unknown` (exit 3): exit 0, say so, change nothing."""
    bundle = tmp_path / "incident"
    shutil.copytree(sample("healthy-no-oom"), bundle)
    before = _snapshot(tmp_path)
    for extra in ([], ["--execute", "--yes"]):
        result = runner.invoke(main, ["recover", str(bundle), *extra])
        assert result.exit_code == ExitCode.OK, result.stderr
        assert result.stdout.strip() == f"{bundle}: nothing to recover: no OOM found in the evidence"
        assert result.stderr == ""
    doc = json.loads(runner.invoke(main, ["recover", str(bundle), "--json"]).stdout)
    assert doc["verdict"]["class"] == "no_oom" and doc["runbook"] is None and doc["steps"] == []
    assert "nothing to recover" in doc["nothing_to_recover"]
    assert _snapshot(tmp_path) == before                      # no lock, no actions.jsonl
    chosen = runner.invoke(main, ["recover", str(bundle), "--runbook", "burst", "--json"])
    assert chosen.exit_code == 0 and json.loads(chosen.stdout)["runbook"] == "burst"   # an explicit runbook still plans


def test_changes_a_relaunch_cannot_make_are_introduced_once(runner):
    """startup-other-tenant advises four changes by hand: the plan says once that a relaunch makes
    none of them, then lists each with its reason."""
    result = runner.invoke(main, ["recover", str(sample("startup-other-tenant"))], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert result.output.count("a relaunch cannot make") == 1
    assert "by hand: a relaunch cannot make these 4 changes; do them separately" in result.output
    for setting in ("other_gpu_processes:", "gpu:", "checkpoint:", "tensor_parallel_gpus:"):
        assert f"  • {setting}" in result.output
