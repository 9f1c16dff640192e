"""Advice that is physically possible: the fit arithmetic from the samples' own numbers, a
start-up with another tenant on the GPU, cuts sized from the evidence (each with its basis), and
runbook texts rendered with the verdict's values (never a template left in a plan)."""
from __future__ import annotations

import json
import re
import sys
from functools import lru_cache

import jsonschema
import pytest

from triage.api import classify_paths
from triage.cli import main
from triage.evidence import load_evidence
from triage.fit import gather, parse_params
from triage.flowchart import decide
from triage.model import OomClass, Recommendation, Verdict
from triage.paths import verdict_schema_path
from triage.recovery import fill
from triage.recovery.actions import gpu
from triage.recovery.context import Deadline, ExecOptions, RunContext
from triage.recovery.identify import Identification
from triage.recovery.runbooks import RunbookError, RunbookStep, load_runbooks, parse_runbook
from triage.report import to_json

from tests.conftest import SAMPLES, sample

SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if (p / "expected.yaml").exists())


@lru_cache(maxsize=None)
def verdict_of(name: str) -> Verdict:
    return classify_paths([str(sample(name))])[0]


def fit_of(name: str):
    verdict, ctx = decide(load_evidence([str(sample(name))]))
    return gather(ctx)


def recs(name: str) -> dict[str, Recommendation]:
    return {r.setting: r for r in verdict_of(name).recommendations}


# --- the arithmetic -----------------------------------------------------------------------------

@pytest.mark.parametrize("model, params", [
    ("Qwen/Qwen3-32B", 32e9), ("meta-llama/Llama-3.1-8B-Instruct", 8e9), ("Qwen/Qwen2.5-1.5B-Instruct", 1.5e9),
    ("support-ai/llava-next-llama3-70b-instruct-support-v3", 70e9), ("mistralai/Mixtral-8x7B-Instruct-v0.1", 56e9),
    ("Qwen/Qwen3-30B-A3B", 30e9), ("HuggingFaceTB/SmolLM-135M", 135e6), ("m", None), ("/models/llama", None),
])
def test_parameter_count_from_the_model_name(model, params):
    assert parse_params(model)[0] == params


def test_fit_of_the_other_tenant_sample_uses_its_own_numbers():
    fit = fit_of("startup-other-tenant")
    # vLLM's own check (logs/vllm.log:30): 31.44 of 79.19 GiB free at start-up.
    assert (fit.total.bytes, fit.total.source) == (85029615043, "logs/vllm.log:30")
    assert (fit.free.bytes, fit.free.source) == (33758442947, "logs/vllm.log:30")
    # It failed before loading: the weights are estimated from "32B" and the config's bfloat16.
    assert fit.weights.estimated and fit.weights.bytes == int(32e9 * 2)
    assert "32B" in fit.weights.source and "bfloat16 (logs/vllm.log:6)" in fit.weights.source
    [tenant] = fit.tenants
    assert (tenant.pid, tenant.name, tenant.bytes, tenant.where) == (
        3817204, "/opt/conda/bin/python3.11", 48338 << 20, "gpu/nvidia-smi-compute-apps.csv:2")
    assert fit.util == 0.9 and fit.util_free_now() == 0.37
    assert fit.holds(0.37) is False          # 29.3 GiB < ~59.6 GiB of weights
    assert fit.holds(0.9) is True            # 71.3 GiB > ~59.6 GiB
    assert fit.kv_one_seq is None and "32768-token sequence" in fit.unknown()


def test_fit_reads_logged_weights_kv_and_the_memory_profile():
    kv = fit_of("startup-kv-blowout-v1")
    assert (kv.weights.bytes, kv.weights.source, kv.weights.estimated) == (16094208826, "logs/vllm.log:25", False)
    assert (kv.kv_one_seq.bytes, kv.kv_one_seq.source) == (17179869184, "logs/vllm.log:48")    # vLLM's "16 GiB needed"
    leak = fit_of("chronic-leak-nvidia-smi")
    assert leak.weights.bytes == 15300820992
    assert leak.activation.bytes == 1052266988 and leak.graphs.bytes == 418759311
    # 43.27 GiB of KV for 810272 tokens -> one 32768-token sequence
    assert leak.kv_one_seq.bytes == int(46460808724 / 810272 * 32768)
    assert leak.need() == sum(p.bytes for p in (leak.weights, leak.activation, leak.graphs, leak.kv_one_seq))
    assert leak.holds(0.75) is True


@pytest.mark.parametrize("bundle", SAMPLE_DIRS, ids=[d.name for d in SAMPLE_DIRS])
def test_no_sample_gets_a_budget_that_cannot_hold_its_weights(bundle):
    verdict, ctx = decide(load_evidence([str(bundle)]))
    from triage.advice import advise

    advise(verdict, ctx)
    fit = gather(ctx)
    for rec in verdict.recommendations:
        if rec.setting == "gpu_memory_utilization" and isinstance(rec.to_value, float):
            assert fit.holds(rec.to_value) is not False, rec
        assert rec.why.strip(), rec


# --- a start-up beside another tenant -------------------------------------------------------------

def test_other_tenant_keeps_the_target_and_frees_the_gpu():
    verdict = verdict_of("startup-other-tenant")
    first = verdict.recommendations[0]
    # No gpu_memory_utilization below the weights: 0.37 (29.3 GiB) cannot hold ~59.6 GiB.
    assert "gpu_memory_utilization" not in recs("startup-other-tenant")
    assert first.setting == "other_gpu_processes" and first.manual and first.to_value == "none"
    for text in ("No gpu_memory_utilization fits this GPU as it is", "PID 3817204", "/opt/conda/bin/python3.11",
                 "47.2 GiB", "gpu/nvidia-smi-compute-apps.csv:2", "keep gpu_memory_utilization 0.9",
                 "estimated: 32B parameters", "31.44 GiB + 47.21 GiB = 78.65 GiB"):
        assert text in first.why, text
    assert "--gpu-memory-utilization 0.9" in verdict.command
    options = recs("startup-other-tenant")
    assert options["gpu"].to_value == "a GPU with at least 67 GiB free"          # 59.6 GiB / 0.9
    # Only options whose arithmetic fits this GPU as it is: int4 (14.9 GiB), not FP8 (29.8 > 29.3 GiB).
    assert options["checkpoint"].to_value.startswith("an int4") and "= 14.9 GiB" in options["checkpoint"].why
    assert options["tensor_parallel_gpus"].to_value == 4 and "14.9 GiB per GPU" in options["tensor_parallel_gpus"].why
    assert all(r.manual for r in verdict.recommendations)
    out = to_json(verdict)
    jsonschema.validate(out, json.loads(verdict_schema_path().read_text()))
    assert all(r.get("manual") is True for r in out["recommendations"])


def test_other_tenant_plan_checks_the_share_the_relaunch_needs(runner):
    result = runner.invoke(main, ["recover", str(sample("startup-other-tenant")), "--json"])
    plan = json.loads(result.stdout)
    assert not [c for c in plan["changes"] if c["setting"] == "gpu_memory_utilization"]
    assert "--gpu-memory-utilization" in plan["new_argv"]
    assert plan["new_argv"][plan["new_argv"].index("--gpu-memory-utilization") + 1] == "0.9"
    check = next(s for s in plan["steps"] if s["action"] == "check_gpu_free")
    assert check["details"][0].startswith("NVML: at least 90% of the GPU free (the relaunch keeps "
                                          "gpu_memory_utilization 0.9)")
    assert any("PID 3817204" in d and "by hand" in d for d in check["details"])
    assert "{" not in check["verify"] and "90%" in check["verify"]


def test_the_free_share_follows_the_verdicts_target():
    lowered = Verdict(OomClass.STARTUP, 0.9, "s",
                      facts={"engine": "vllm", "launch_args": {"gpu_memory_utilization": 0.95}},
                      recommendations=[Recommendation("gpu_memory_utilization", 0.95, 0.86, "fits")])
    assert fill.min_free_share({"min_free_share": "target"}, lowered)[:3:2] == (0.86, False)
    kept = Verdict(OomClass.STARTUP, 0.9, "s", facts={"engine": "vllm", "launch_args": {"gpu_memory_utilization": 0.8}})
    assert fill.min_free_share({"min_free_share": "target"}, kept)[0] == 0.8
    assert fill.min_free_share({"min_free_share": "target"}, None)[0] == 0.9           # vLLM's default
    assert fill.min_free_share({"min_free_share": 0.5}, lowered) == (0.5, "the runbook's fixed share", True)
    # lmdeploy's cache_max_entry_count is a share of what is left after the weights, not of the card
    lmdeploy = Verdict(OomClass.STARTUP, 0.9, "s", facts={"engine": "lmdeploy"},
                       recommendations=[Recommendation("gpu_memory_utilization", 0.8, 0.5, "kv share")])
    assert fill.min_free_share({"min_free_share": "target"}, lmdeploy)[0] == 0.9


def test_gpu_free_check_uses_the_target_and_leaves_processes_sized_around(monkeypatch, tmp_path):
    from tests.test_recovery_actions import FakeNvml

    verdict = Verdict(OomClass.STARTUP, 0.9, "s", facts={"engine": "vllm"},
                      recommendations=[Recommendation("gpu_memory_utilization", 0.9, 0.5, "fits beside PID 4242")])
    ctx = RunContext(tmp_path, "startup", "m", None, Identification(), None, ExecOptions(yes=True), verdict=verdict)
    target = RunbookStep("gpu-free", "t", "check_gpu_free", 30.0, "stop", "v", {"min_free_share": "target"})
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(used_gib=30, pids=(4242,)))       # 50 of 80 GiB free
    assert gpu.check_free(target, ctx, Deadline(5)).result == "ok"
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(used_gib=50, pids=(4242,)))       # 30 of 80 GiB free
    out = gpu.check_free(target, ctx, Deadline(0.5))
    assert out.result == "failed" and "need 50% free (the relaunch's new gpu_memory_utilization 0.5)" in out.output
    fixed = RunbookStep("gpu-free", "t", "check_gpu_free", 30.0, "stop", "v", {"min_free_share": 0.5})
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(used_gib=30, pids=(4242,)))
    assert gpu.check_free(fixed, ctx, Deadline(0.5)).result == "failed"                  # strict: no process at all


# --- cuts sized from the evidence ------------------------------------------------------------------

def test_incident_a_advice_is_the_encoder_and_the_budget_not_a_concurrency_cap():
    got = recs("incident-a-multimodal-fleet")
    assert "max_num_seqs" not in got
    media = got["media_per_prompt"]
    assert media.manual and "clip.py" in media.why and "1.19 GiB" in media.why
    assert got["gpu_memory_utilization"].to_value < 0.95


def test_prefix_cache_sample_cap_comes_from_its_sampler_not_the_kv_fill_and_no_unconfirmed_upgrade():
    got = recs("prefix-cache-oom-b")
    seqs = got["max_num_seqs"]
    assert "sampler" in seqs.why and "KV-cache usage" not in seqs.why
    assert "engine_version" not in got


def test_sampler_warmup_sized_from_its_failed_allocation():
    rec = recs("startup-sampler-warmup")["max_num_seqs"]
    # 1.16 GiB for 1024 dummy requests -> 1.16 MiB each; 1.01 GiB free holds 891; 20% margin -> 713.
    assert (rec.from_value, rec.to_value, rec.basis) == (1024, 713, "incident")
    assert "tried to allocate 1.16 GiB with 1.01 GiB free (logs/vllm.log:87)" in rec.why
    assert "1.16 MiB per sequence, so 891 fit" in rec.why


def test_burst_sample_cuts_the_step_that_failed_and_the_budget(tmp_path):
    got = recs("burst-long-prompts-v0")
    # linear.py's activation: V0 without chunked prefill steps max(max_model_len, 2048) = 32768 tokens;
    # 1.75 GiB tried with 1.21 GiB free -> keep at most half: 16384, with chunked prefill on.
    tokens = got["max_num_batched_tokens"]
    assert (tokens.from_value, tokens.to_value) == (32768, 16384) and "layers/linear.py" in tokens.why
    assert got["enable_chunked_prefill"].to_value is True
    assert (got["gpu_memory_utilization"].from_value, got["gpu_memory_utilization"].to_value) == (0.95, 0.92)
    assert "max_num_seqs" not in got


def test_chronic_schedule_and_upgrades_are_steps_for_a_person():
    leak = verdict_of("chronic-leak-nvidia-smi")
    [rec] = leak.recommendations
    assert rec.setting == "scheduled_restart_hours" and rec.manual and rec.to_value == 6
    assert "gpu/nvidia-smi.csv:2" in rec.why and "gpu/nvidia-smi.csv:149" in rec.why
    assert 12 < leak.facts["memory_growth"]["hours_to_full"] < 14
    # An upgrade is a step for a person, and only for a bug confirmed upstream (not the write-up's).
    assert "engine_version" not in recs("prefix-cache-oom-b")
    assert not any(r.manual for r in recs("startup-kv-blowout-v1").values())


# --- runbook texts -------------------------------------------------------------------------------

BARE_SETTING = re.compile(r"\(\s*[a-z]+(?:_[a-z0-9]+)+\s*\)")       # "(scheduled_restart_hours)" left from a template


def _texts(book) -> list[str]:
    out = [book.summary]
    for step in book.steps:
        out += [step.title, step.verify, *(v for k, v in step.params.items() if isinstance(v, str) and k in
                                            fill.PARAM_TEXTS)]
    return out


EMPTY = Verdict(OomClass.UNKNOWN, 0.0, "nothing", facts={})


@pytest.mark.parametrize("name", [d.name for d in SAMPLE_DIRS] + ["(a verdict with no values)"])
def test_every_runbook_step_renders_without_a_template_left(name):
    verdict = EMPTY if name.startswith("(") else verdict_of(name)
    for book in load_runbooks().values():
        rendered = fill.render_runbook(book, verdict)
        for text in _texts(rendered):
            assert "{" not in text and "}" not in text, (book.id, text)
            assert not BARE_SETTING.search(text), (book.id, text)
        details = [fill._free_share(verdict, s) for s in rendered.steps if s.action == "check_gpu_free"]
        assert all("{" not in d for d in details)


def test_the_chronic_schedule_step_has_the_verdicts_numbers_or_stands_on_its_own():
    book = load_runbooks()["chronic"]
    raw = next(s for s in book.steps if s.id == "schedule-restarts").params["instruction"]
    assert "{scheduled_restart_hours|" in raw
    filled = next(s for s in fill.render_runbook(book, verdict_of("chronic-leak-nvidia-smi")).steps
                  if s.id == "schedule-restarts").params["instruction"]
    assert "every 6 h (the leak fills the card ~13 h after a restart)" in filled
    bare = next(s for s in fill.render_runbook(book, EMPTY).steps if s.id == "schedule-restarts").params["instruction"]
    assert "at an interval you pick from the GPU-memory trend (the evidence gives no leak rate" in bare


def test_the_chronic_plan_shows_the_interval(runner):
    plan = json.loads(runner.invoke(main, ["recover", str(sample("chronic-leak-nvidia-smi")), "--json"]).stdout)
    step = next(s for s in plan["steps"] if s["id"] == "schedule-restarts")
    assert step["details"][0].startswith("Schedule a drained restart every 6 h (the leak fills the card ~13 h")


GOOD = {"id": "custom", "title": "Custom", "applies_to": ["burst"], "summary": "s",
        "steps": [{"id": "ask", "title": "Ask", "action": "manual", "params": {"instruction": "do it"},
                   "timeout_s": 30, "on_failure": "stop", "verify": "done"}]}


@pytest.mark.parametrize("where, text, problem", [
    ("instruction", "restart {every_so_often|sometimes}",
     "steps[0].params.instruction: unknown placeholder {every_so_often}"),
    ("instruction", "restart {scheduled_restart_hours}", "needs a fallback"),
    ("title", "Ask {max_num_seqs|}", "steps[0].title: placeholder {max_num_seqs|} has an empty fallback"),
    ("verify", "done {", "steps[0].verify: a brace that is not a placeholder"),
    ("summary", "at {changes}", "summary: placeholder {changes} needs a fallback"),
])
def test_placeholders_are_checked_when_the_runbook_loads(where, text, problem):
    import copy

    data = copy.deepcopy(GOOD)
    if where == "summary":
        data["summary"] = text
    elif where == "instruction":
        data["steps"][0]["params"]["instruction"] = text
    else:
        data["steps"][0][where] = text
    with pytest.raises(RunbookError) as err:
        parse_runbook(data, "my.yaml")
    assert problem in str(err.value)


def test_min_free_share_takes_a_number_or_target():
    step = {"id": "gpu-free", "title": "t", "action": "check_gpu_free", "timeout_s": 30, "on_failure": "stop",
            "verify": "at least {min_free_share} is free"}
    parse_runbook({**GOOD, "steps": [{**step, "params": {"min_free_share": "target"}}]}, "ok.yaml")
    with pytest.raises(RunbookError, match="expected a number or target"):
        parse_runbook({**GOOD, "steps": [{**step, "params": {"min_free_share": "half"}}]}, "bad.yaml")


def test_each_part_and_its_source_is_said_once():
    """The options after the first name what the server needs by size only: the first says where
    each size comes from and what is not in the evidence."""
    verdict, _ = classify_paths([str(sample("startup-other-tenant"))])
    text = " ".join(r.why for r in verdict.recommendations)
    assert text.count("59.6 GiB weights (estimated: 32B parameters (from the model name)") == 1
    assert text.count("(not in the evidence: ") == 1
    assert "holds 59.6 GiB weights with 11.7 GiB left" in text and "at least what it needs: 59.6 GiB weights;" in text


def test_the_allocator_advice_names_the_fragmentation_it_does_not_repeat_it():
    verdict, _ = classify_paths([str(sample("chronic-fragmentation"))])
    cause = next(c for c in verdict.causes if c.id == "allocator_fragmentation")
    rec = next(r for r in verdict.recommendations if r.setting == "PYTORCH_CUDA_ALLOC_CONF")
    assert "split into smaller pieces" in cause.detail and "split into smaller pieces" not in rec.why
    assert "the fragmentation the allocator_fragmentation cause measured" in rec.why
