"""The registries and the docs agree with the code: every class has its module, every parser is
registered, every command and exit code is documented."""
from __future__ import annotations

import inspect
import pkgutil


from triage import classes, evidence, flowchart
from triage.classes import registry
from triage.classes.base import Branch
from triage.cli import main
from triage.errors import ExitCode
from triage.model import OomClass

from tests.conftest import ROOT

# Modules of triage/classes that are not a class: the types, helpers and build step they share.
CLASS_HELPERS = {"base", "settings", "concurrency", "runtime_levers", "runbooks", "compiled", "schemas", "build"}


def test_every_class_has_exactly_one_registered_module():
    reg = registry()
    assert reg.ids() == tuple(c.value for c in OomClass)
    for spec, module in zip(reg.specs, reg.modules):
        assert module.__name__ == f"triage.classes.{spec.id.value}"
    found = {m.name for m in pkgutil.iter_modules(classes.__path__)}
    assert found - CLASS_HELPERS == set(reg.ids())


def test_class_modules_document_signature_and_confusions():
    for spec, module in zip(registry().specs, registry().modules):
        doc = module.__doc__ or ""
        if spec.branch is not Branch.FALLBACK:
            assert "**Signature**" in doc and "**Not to be confused with**" in doc, module.__name__


def test_the_walk_names_no_class():
    """The flowchart reaches classes through their specs' branches: a new class needs no change there."""
    source = inspect.getsource(flowchart)
    assert "OomClass" not in source
    for cls in registry().ids():
        assert f"classes.{cls}" not in source and f"import {cls}" not in source, cls


def test_every_parser_module_is_registered():
    """A module of triage/evidence with its own sniff(), parse() and NAME is a parser: registered.
    The others (codecs, the log reader's parts, the registry, kinds) are how parsers work."""
    import importlib

    def is_parser(name: str) -> bool:
        mod = importlib.import_module(f"{evidence.__name__}.{name}")
        own = [getattr(mod, f, None) for f in ("sniff", "parse")]
        return bool(getattr(mod, "NAME", None)) and all(callable(f) and f.__module__ == mod.__name__ for f in own)

    found = {m.name for m in pkgutil.iter_modules(evidence.__path__) if is_parser(m.name)}
    assert found == set(evidence.PARSER_MODULES)
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
    # A nightly counts as its release line; the comparison is packaging's, so `==0.6` is 0.6.0.
    assert in_range("0.9.1.dev277+g1a2b3c", ">=0.9.1,<0.9.2") and in_range("0.6.0", "==0.6")
    assert not in_range("garbage", ">=0.6.0")


def test_bundled_data_directories_resolve():
    from triage.paths import runbooks_dir, templates_dir, verdict_schema_path

    assert runbooks_dir().is_dir() and templates_dir().is_dir()
    assert verdict_schema_path().is_file()
    assert (ROOT / "triage" / "data" / "known_bugs.yaml").is_file()


def test_the_registry_drives_the_walk():
    """The walk calls the module registered for a class: replacing it replaces the rules."""
    from types import SimpleNamespace

    from triage.classes.base import Assessment
    from triage.model import EvidenceSet

    calls = []
    healthy = registry().module(OomClass.NO_OOM)

    def fake_assess(ctx, *rest):
        calls.append(ctx)
        return Assessment(OomClass.NO_OOM, 0.5, "replaced", "replaced")

    fake = SimpleNamespace(SPEC=healthy.SPEC, QUESTION=healthy.QUESTION, assess=fake_assess)
    result, _, _ = flowchart.walk(EvidenceSet([]), registry().replaced(fake))
    assert calls and result.summary == "replaced"
    # Ties go to the most specific runtime class; the generic one (burst) comes after both.
    runtime = [m.SPEC.id for m in registry().runtime()]
    ranked = [c for c in runtime if c in (OomClass.PREFIX_CACHE, OomClass.CHRONIC, OomClass.BURST)]
    assert ranked == [OomClass.PREFIX_CACHE, OomClass.CHRONIC, OomClass.BURST]


def test_advice_runs_after_the_flowchart_from_the_api_layer():
    import triage.api

    assert "advise" not in inspect.getsource(flowchart.walk) + inspect.getsource(flowchart.decide)
    assert "advise(" in inspect.getsource(triage.api.classify_evidence)


def test_advice_reads_the_incident_not_the_classifier_context():
    import triage.advice
    from triage.flowchart.incident import Incident

    source = inspect.getsource(triage.advice)
    assert "Context" not in source and "ctx" not in source
    for module in registry().modules:
        recommend = getattr(module, "recommend", None)
        if recommend is not None:
            assert inspect.signature(recommend).parameters["incident"].annotation in (Incident, "Incident")


def test_one_table_of_thresholds_and_cause_ids():
    from triage import thresholds
    from triage.classes import burst, chronic, prefix_cache
    from triage.flowchart import causes
    from triage.postmortem import signals
    from triage.timeline import from_evidence

    assert burst.KV_HIGH == from_evidence.KV_HIGH == signals.KV_HIGH == thresholds.TABLE["kv_high"].value
    assert causes.DISCREPANCY_THRESHOLD == from_evidence.DISCREPANCY == signals.DISCREPANCY_POINTS / 100
    assert prefix_cache.LOW_HIT_RATE == signals.PREFIX_LOW == thresholds.TABLE["prefix_hit_low"].value
    assert chronic.FRAG_SHARE == thresholds.TABLE["inactive_split_share"].value
    for item in thresholds.TABLE.values():
        assert item.why and item.source and item.unit
    for spec in registry().specs:
        for cause in spec.causes:
            assert cause.title and set(cause.thresholds) <= set(thresholds.TABLE), cause.id


def test_the_schemas_list_what_the_registry_knows():
    """The class, cause and runbook enums are generated (`python -m triage.classes.build`)."""
    import json

    from triage.classes import schemas
    from triage.paths import data_file, verdict_schema_path

    assert schemas.disagreements(registry()) == []
    verdict = json.loads(verdict_schema_path().read_text())
    assert verdict["properties"]["verdict"]["properties"]["class"]["enum"] == list(registry().ids())
    assert set(verdict["properties"]["causes"]["items"]["properties"]["id"]["enum"]) == set(registry().cause_ids())
    fleet = json.loads(data_file("fleet.schema.json").read_text())
    assert fleet["$defs"]["class"]["enum"] == list(registry().ids())


def test_the_generated_enums_are_rewritten_in_place(tmp_path):
    import json
    import shutil

    from triage.classes import schemas
    from triage.paths import data_file

    for name in schemas.TARGETS:
        shutil.copy(data_file(name), tmp_path / name)
    path = tmp_path / "verdict.schema.json"
    doc = path.read_text()
    path.write_text(doc.replace('"burst", ', '', 1))
    assert schemas.disagreements(registry(), tmp_path) == ["verdict.schema.json: /properties/verdict/properties/class/enum"]
    assert schemas.write(registry(), tmp_path) == [path]
    assert schemas.disagreements(registry(), tmp_path) == [] and json.loads(path.read_text()) == json.loads(doc)


def test_compiled_class_data_is_current():
    """After editing a data file or a runbook's applies_to: `python -m triage.classes.build`."""
    from triage.classes import compiled

    assert compiled.stale() == []


def test_everything_that_lists_classes_reads_the_registry():
    from triage import console, evaluate
    from triage.live.fleet import fleet
    from triage.live.serve import alert_incident
    from triage.live.watch import readings, risk
    from triage.postmortem import sections

    ids = set(registry().ids())
    assert set(console._COLOURS) == set(fleet.CLASS_LABELS) == set(sections.CLASS_LABELS) == ids
    assert set(evaluate.CLASSES) == ids and evaluate.GPU_CLASSES == set(readings.RISK_CLASSES) == set(risk._SPECIFICITY)
    assert set(alert_incident.DECIDED) == evaluate.GPU_CLASSES | {"not_gpu_oom"}


def test_runbooks_are_found_by_their_applies_to():
    from triage.classes.runbooks import runbook_for

    for cls in ("startup", "burst", "chronic", "prefix_cache"):
        assert runbook_for(cls, []) == cls
    assert runbook_for("not_gpu_oom", ["gpu_hardware_fault", "host_oom"]) == "host_oom"
    assert runbook_for("not_gpu_oom", ["nccl_failure"]) == "gpu_fault"
    assert runbook_for("no_oom", []) is None and runbook_for("unknown", []) is None


def test_one_engine_budget_for_classifier_timeline_and_postmortem():
    from triage.evidence.kinds import Kind
    from triage.flowchart.causes import engine_budget
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
    assert engine_budget(ev)[0] == tl_budget(ev) == pm_budget(ev, verdict) == 0.8


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
