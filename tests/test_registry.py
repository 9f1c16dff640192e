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
    helpers = {"base", "kinds", "logline", "signatures", "torch_oom"}
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
