"""The start-up fast path (triage/fastpath.py) against the click command line it stands in for:
the same stdout, stderr and exit code for every invocation it takes, and click for the rest."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from triage.bundle import parse_incident, simple_mapping
from triage.fastpath import fast_classify_args

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "startup-kv-blowout-v1"
LOG = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n"

CLICK = "import sys; sys.argv[0] = 'triage'; from triage.cli import main; main()"
# The fast path ends with os._exit (no interpreter teardown): whether click was loaded is told
# there, and on any other way out.
FAST = """
import os, sys
sys.argv[0] = "triage"
_exit = os._exit
def _told(code):
    if "click" in sys.modules:
        print("CLICK-LOADED", file=sys.stderr)
        sys.stderr.flush()
    _exit(code)
os._exit = _told
from triage.fastpath import main
try:
    main()
finally:
    if "click" in sys.modules:
        print("CLICK-LOADED", file=sys.stderr)
"""


def run(code: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture()
def inputs(tmp_path):
    (tmp_path / "vllm.log").write_text(LOG)
    (tmp_path / "empty.log").write_text("")
    for name in ("bundle-a", "bundle-b"):
        (tmp_path / "many" / name).mkdir(parents=True)
        (tmp_path / "many" / name / "incident.yaml").write_text(f"id: {name}\ntimezone: UTC\n")
        (tmp_path / "many" / name / "vllm.log").write_text(LOG)
    return tmp_path


CASES = [
    ["classify", "vllm.log"],
    ["classify", "vllm.log", "--json"],
    ["classify", "--json", "vllm.log"],
    ["classify", str(SAMPLE), "--json"],
    ["classify", str(SAMPLE)],
    ["classify", "missing.log", "--json"],
    ["classify", "missing.log"],
    ["classify", "empty.log", "--json"],
    ["classify", "empty.log"],
    ["classify", "vllm.log", "missing.log", "--json"],
    ["classify", "many", "--json"],
    ["classify", "many"],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(Path(a).name for a in c) for c in CASES])
def test_fast_path_says_what_click_says(inputs, args):
    assert fast_classify_args(args) is not None
    slow, fast = run(CLICK, args, inputs), run(FAST, args, inputs)
    assert "CLICK-LOADED" not in fast.stderr, "the fast path imported click"
    assert (fast.stdout, fast.stderr, fast.returncode) == (slow.stdout, slow.stderr, slow.returncode)


@pytest.mark.parametrize("args", [
    ["classify"], ["classify", "--json"], ["classify", "-h"], ["classify", "vllm.log", "--explain"],
    ["classify", "-", "--json"], ["classify", "--", "vllm.log"], ["--debug", "classify", "vllm.log"],
    ["classify", "vllm.log", "--json=1"], ["eval", "tests/corpus"], ["--help"], [],
])
def test_anything_else_goes_to_click(inputs, args):
    assert fast_classify_args(args) is None
    if args and args[-1] in ("-h", "--help") or args == ["classify"] or args == ["classify", "--json"]:
        slow, fast = run(CLICK, args, inputs), run(FAST, args, inputs)
        assert (fast.stdout, fast.returncode) == (slow.stdout, slow.returncode)
        assert fast.stderr == slow.stderr + "CLICK-LOADED\n"        # click's own answer


SIMPLE = [
    SAMPLE.joinpath("incident.yaml").read_text(),
    'id: a\ntitle: "x: y # z"\nfleet_size: 16\nlinks: []\n',
    "id: INC-1\nservice: a.b_c-d\n\n",
    "severity: sev1",
]
NOT_SIMPLE = [
    "", "\n", "id: yes\n", "on: x\n", "id: null\n", "id: No\n", "id: 012\n", "id: 1_000\n", "id: 1.5\n",
    "created: 2025-10-14\n", "id: x # c\n", "# c\nid: x\n", "id: 'x'\n", 'id: "a\\"b"\n', 'id: "a\\nb"\n',
    "id: a b\n", "id: x\nid: y\n", "id: x\r\n", "id:\tx\n", "id: ~\n", "id:\n", "Id: x\n", "id: [a]\n",
    "id: {}\n", "id: x \n", " id: x\n", "---\nid: x\n", "id: ü\n", "id: .inf\n", "id: 1e3\n", "id: &a x\n",
    "id: *a\n", "id: !!str x\n", "id: x:y\n", "id: -x\n", "id: 123456789012345678901\n",
]


@pytest.mark.parametrize("text", SIMPLE)
def test_simple_incident_yaml_reads_as_yaml_reads_it(text):
    assert simple_mapping(text) == yaml.safe_load(text)
    assert parse_incident(text.encode(), "incident.yaml") == yaml.safe_load(text)


@pytest.mark.parametrize("text", NOT_SIMPLE)
def test_anything_else_is_left_to_yaml(text):
    assert simple_mapping(text) is None
