"""The registries and the docs agree with the code: every class has its module, every parser is
registered, every command and exit code is documented."""
from __future__ import annotations

import importlib
import pkgutil

import click

from triage import evidence, flowchart
from triage.cli import main
from triage.errors import ExitCode
from triage.model import OomClass

from tests.conftest import ROOT


def test_every_class_has_exactly_one_registered_module():
    assert set(flowchart.CLASS_MODULES) == set(OomClass)
    for cls, module in flowchart.CLASS_MODULES.items():
        assert module.CLASS is cls


def test_class_modules_document_signature_and_confusions():
    for cls, module in flowchart.CLASS_MODULES.items():
        doc = module.__doc__ or ""
        if cls not in (OomClass.UNKNOWN,):
            assert "**Signature**" in doc and "**Not to be confused with**" in doc, module.__name__


def test_every_parser_module_is_registered():
    found = {m.name for m in pkgutil.iter_modules(evidence.__path__)}
    helpers = {"base", "kinds", "logline", "signatures", "torch_oom", "sigdata", "extractors",
               "compressed", "archive",     # codecs and archives: how inputs are opened, not parsers
               "repeats"}                   # the log reader's aggregation of repetitive lines
    assert found - helpers == set(evidence.PARSER_MODULES)
    for mod in evidence.parsers():
        assert callable(mod.sniff) and callable(mod.parse) and mod.NAME


def test_sniffers_never_raise_on_garbage():
    for mod in evidence.parsers():
        for blob in (b"", b"\x00\xff" * 100, b"{", b"[ 1.0] x", b"# HELP", "é".encode() * 10):
            assert isinstance(mod.sniff(blob, "x"), int)


def test_readme_documents_every_command_and_exit_code():
    readme = (ROOT / "README.md").read_text()
    for name in main.commands:
        assert f"triage {name}" in readme, name
    for code in ExitCode:
        assert f"| {int(code)} |" in readme, code


def test_readme_quick_start_is_two_commands_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln for ln in block.strip().splitlines() if ln.strip()]
    assert len(commands) == 2
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith(commands[1])


def test_known_bug_knowledge_base_loads_and_matches_ranges():
    from triage.flowchart.knowledge import in_range, load_bugs

    bugs = load_bugs()
    assert {b.id for b in bugs} >= {"vllm-mm-accounting-0.6", "vllm-prefix-cache-leak-0.6"}
    assert in_range("0.6.0", ">=0.6.0,<0.6.2") and in_range("0.6.1.post2", ">=0.6.0,<0.6.2")
    assert not in_range("0.6.2", ">=0.6.0,<0.6.2") and not in_range("0.5.4", ">=0.6.0,<0.7.1")


def test_bundled_data_directories_resolve():
    from triage.paths import runbooks_dir, templates_dir, verdict_schema_path

    assert runbooks_dir().is_dir() and templates_dir().is_dir()
    assert verdict_schema_path().is_file()
    assert (ROOT / "triage" / "data" / "known_bugs.yaml").is_file()


def test_the_registry_drives_the_walk():
    """The walk calls the module registered for a class: replacing it replaces the rules."""
    from types import SimpleNamespace

    from triage.flowchart.base import Assessment
    from triage.model import EvidenceSet

    calls = []

    def fake_assess(ctx, *rest):
        calls.append(ctx)
        return Assessment(OomClass.NO_OOM, 0.5, "replaced", "replaced")

    registry = dict(flowchart.CLASS_MODULES)
    registry[OomClass.NO_OOM] = SimpleNamespace(CLASS=OomClass.NO_OOM, assess=fake_assess)
    result, _, _ = flowchart.walk(EvidenceSet([]), registry)
    assert calls and result.summary == "replaced"
    runtime = [m.CLASS for m in flowchart.runtime_modules()]
    assert runtime == [OomClass.PREFIX_CACHE, OomClass.CHRONIC, OomClass.BURST]


def test_advice_runs_after_the_flowchart_from_the_api_layer():
    import inspect

    import triage.api
    import triage.flowchart as fc

    assert "advise" not in inspect.getsource(fc.walk) + inspect.getsource(fc.decide)
    assert "advise(" in inspect.getsource(triage.api.classify_evidence)


def test_one_table_of_thresholds_and_cause_ids():
    import json

    from triage import thresholds
    from triage.flowchart import burst, causes, chronic, prefix_cache
    from triage.paths import verdict_schema_path
    from triage.postmortem import signals
    from triage.timeline import from_evidence

    assert burst.KV_HIGH == from_evidence.KV_HIGH == signals.KV_HIGH == thresholds.TABLE["kv_high"].value
    assert causes.DISCREPANCY_THRESHOLD == from_evidence.DISCREPANCY == signals.DISCREPANCY_POINTS / 100
    assert prefix_cache.LOW_HIT_RATE == signals.PREFIX_LOW == thresholds.TABLE["prefix_hit_low"].value
    assert chronic.FRAG_SHARE == thresholds.TABLE["inactive_split_share"].value
    for item in thresholds.TABLE.values():
        assert item.why and item.source and item.unit
    schema = json.loads(verdict_schema_path().read_text())
    ids = schema["properties"]["causes"]["items"]["properties"]["id"]["enum"]
    assert set(thresholds.CAUSE_IDS) == set(ids)


def test_one_engine_budget_for_classifier_timeline_and_postmortem():
    from triage.evidence.kinds import Kind
    from triage.flowchart.causes import engine_budget
    from triage.flowchart.context import Context
    from triage.model import Evidence, EvidenceSet, Verdict
    from triage.postmortem.signals import engine_budget as pm_budget
    from triage.timeline.from_evidence import engine_budget as tl_budget

    ev = EvidenceSet([
        Evidence("a.log", 1, Kind.LAUNCH_CONFIG.value, "cfg", fields={"args": {"gpu_memory_utilization": 0.9},
                                                                   "origin": "engine config"}),
        Evidence("a.log", 2, Kind.LAUNCH_CONFIG.value, "cmd", fields={"args": {"gpu_memory_utilization": 0.8},
                                                                   "origin": "command line"}),
    ])
    verdict = Verdict(oom_class=OomClass.UNKNOWN, confidence=0.0, summary="")
    assert engine_budget(Context(ev))[0] == tl_budget(ev) == pm_budget(ev, verdict) == 0.8


def test_known_bug_requirements_are_validated_on_load(tmp_path):
    import pytest

    from triage.flowchart.knowledge import KnowledgeError, load_bugs

    entry = ("- id: x\n  engine: vllm\n  title: t\n  affected: '>=0.6.0,<0.7.1'\n"
             "  requires: [{req}]\n  classes: [burst]\n")
    for bad in ("long_contxt:4096", "long_context", "concurrency:many", "multimodal:1"):
        path = tmp_path / f"bugs-{bad.replace(':', '_')}.yaml"
        path.write_text(entry.format(req=bad))
        with pytest.raises(KnowledgeError):
            load_bugs.__wrapped__(path)
    good = tmp_path / "good.yaml"
    good.write_text(entry.format(req="long_context:4096") + "- id: y\n  engine: vllm\n  title: t\n"
                    "  affected: '>=0.6.0'\n  requires: [concurrency:8000]\n")
    assert [b.requires for b in load_bugs.__wrapped__(good)] == [("long_context:4096",), ("concurrency:8000",)]
