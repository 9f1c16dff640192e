"""Property: any mutation of any input kind ends in a verdict or a TriageError, never another exception;
through the CLI, no internal error, --json output that parses, and nothing written outside the case.

Samples of every input kind (tests/fuzzkit.py: server logs of every engine, /metrics, memory_stats
JSON and JSON Lines, memory_summary, nvidia-smi CSV and table, dmesg, kubectl pod and events,
Alertmanager, incident.yaml, notes.jsonl, actions.jsonl) are mutated (bit flips, truncation,
duplicated spans, numbers swapped for NaN / Inf / 1e999 / 4,301 digits / `5135..4`, dates past
9999, nesting 100,000 deep, long lines, bytes that are not UTF-8) and fed to what the CLI runs:
classify with its JSON and --explain output, and for bundle members the timeline and postmortem.

The CLI tests run fixed cases of tests/fuzzkit.py (files, bundle directories, .tar.gz and .zip
bundles with hostile member names) through classify, timeline, postmortem and the recover plan
with click's CliRunner, and judge the outcome: no "internal error" line, stdout of --json that
json.loads accepts, no file created in the sentinel folder hostile names point at, beside the
input, or left in the temporary folder.

Deterministic (derandomize, no example database, fixed case seeds) and bounded. For a long
exploratory run set TRIAGE_FUZZ_EXAMPLES (e.g. 20000, random seeds) or run
`python benchmarks/fuzz_inputs.py --count 25000 --seed 1`, which reports per input kind and
command and does not stop at the first failure.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triage.errors import TriageError

from . import fuzzkit

KINDS = fuzzkit.by_kind()
FILE_KINDS = sorted(k for k, seeds in KINDS.items() if seeds[0].where == "file")
BUNDLE_KINDS = sorted(k for k, seeds in KINDS.items() if seeds[0].where == "bundle")

LONG_RUN = int(os.environ.get("TRIAGE_FUZZ_EXAMPLES", "0"))
# In the suite: fixed examples and a small inserted-line cap, so the time is bounded and the
# same on every run. A long run explores with fresh random seeds.
FILE_EXAMPLES = LONG_RUN or 500
BUNDLE_EXAMPLES = max(1, LONG_RUN // 10) if LONG_RUN else 30     # a bundle also renders a postmortem: ~1 s
LONG_CAP = 20_000 if LONG_RUN else 5_000

mutation = st.tuples(st.sampled_from(fuzzkit.OPS), st.integers(0, 1 << 20), st.integers(0, 1 << 12))
mutations = st.lists(mutation, min_size=1, max_size=3)


def _settings(examples: int):
    return settings(max_examples=examples, deadline=None, database=None, derandomize=not LONG_RUN,
                    suppress_health_check=list(HealthCheck), print_blob=True)


@pytest.fixture(scope="module")
def workdir():
    path = fuzzkit.scratch()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(kind: str, pick: int, muts: list[fuzzkit.Mutation], workdir) -> None:
    seed = KINDS[kind][pick % len(KINDS[kind])]
    data = fuzzkit.apply(seed, muts, long_cap=LONG_CAP)
    try:
        fuzzkit.run_one(seed, data, workdir)
    except TriageError:
        pass          # one clear line at the CLI: allowed
    # anything else propagates: hypothesis shrinks it and prints (kind, pick, mutations)


@_settings(FILE_EXAMPLES)
@given(kind=st.sampled_from(FILE_KINDS), pick=st.integers(0, 1000), muts=mutations)
def test_mutated_evidence_files_classify_or_fail_clearly(workdir, kind, pick, muts):
    _run(kind, pick, muts, workdir)


@_settings(BUNDLE_EXAMPLES)
@given(kind=st.sampled_from(BUNDLE_KINDS), pick=st.integers(0, 1000), muts=mutations)
def test_mutated_bundle_files_give_a_timeline_and_postmortem_or_fail_clearly(workdir, kind, pick, muts):
    _run(kind, pick, muts, workdir)


def test_every_input_kind_has_a_seed():
    expected = {"log_v0", "log_v1", "log_other", "log_gz", "log_json", "metrics", "metrics_dcgm", "memory_stats",
                "memory_stats_jsonl", "memory_summary", "nvidia_smi_csv", "nvidia_smi_apps", "nvidia_smi_table",
                "dmesg", "pod", "events", "alerts", "incident_yaml", "notes", "actions"}
    assert expected <= set(KINDS)


# -- through the CLI ------------------------------------------------------------------------------

CLI_SEED = 7
CLI_CASES = 160                    # random cases of every kind; each hostile member name has its own below


def _judge(outcomes: list[fuzzkit.Outcome]) -> list[str]:
    bad = []
    for o in outcomes:
        bad += [f"{o.case.describe()}: {r.command}: {r.internal_error}" for r in o.runs if r.internal_error]
        bad += [f"{o.case.describe()}: {r.command}: not JSON: {r.bad_json}" for r in o.runs if r.bad_json]
        bad += [f"{o.case.describe()}: {what}: {p}" for what, paths in
                (("created outside the case", o.escaped), ("written beside the input", o.stray),
                 ("temporary file left", o.left)) for p in paths]
    return bad


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """A working directory of its own (watched for stray files) and the sentinel folder."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    sentinel = fuzzkit.make_sentinel(str(tmp_path))
    return tmp_path / "work", sentinel


def test_mutated_inputs_through_the_cli_never_fail_internally(cli_env):
    work, sentinel = cli_env
    work.mkdir()
    outcomes = [fuzzkit.run_case(fuzzkit.make_case(CLI_SEED, i, KINDS), work, sentinel, long_cap=LONG_CAP)
                for i in range(CLI_CASES)]
    assert {o.case.kind for o in outcomes} == set(fuzzkit.case_kinds(KINDS))
    assert _judge(outcomes) == []


@pytest.mark.parametrize("fmt", fuzzkit.ARCHIVE_KINDS)
@pytest.mark.parametrize("hostile", range(len(fuzzkit.HOSTILE)), ids=lambda i: ascii(fuzzkit.HOSTILE[i].name)[1:-1][:40])
def test_hostile_archive_members_stay_inside_the_case(cli_env, fmt, hostile):
    work, sentinel = cli_env
    seed = KINDS["notes"][0]
    case = fuzzkit.Case(hostile, fmt, seed, (), ("classify --json", "timeline --json"), (hostile,))
    outcome = fuzzkit.run_case(case, work, sentinel)
    assert _judge([outcome]) == []
    assert not any(p.name == "ESCAPED" for p in Path(sentinel).rglob("*"))
