"""Property: any mutation of any input kind ends in a verdict or a TriageError, never another exception.

Samples of every input kind (tests/fuzzkit.py: server logs of every engine, /metrics, memory_stats
JSON and JSON Lines, memory_summary, nvidia-smi CSV and table, dmesg, kubectl pod and events,
Alertmanager, incident.yaml, notes.jsonl, actions.jsonl) are mutated (bit flips, truncation,
duplicated spans, numbers swapped for NaN / Inf / 1e999 / 4,301 digits / `5135..4`, dates past
9999, nesting 100,000 deep, long lines, bytes that are not UTF-8) and fed to what the CLI runs:
classify with its JSON and --explain output, and for bundle members the timeline and postmortem.

Deterministic (derandomize, no example database) and bounded: about 30 s in the suite. For a
long exploratory run set TRIAGE_FUZZ_EXAMPLES (e.g. 20000, random seeds) or run
benchmarks/fuzz_inputs.py, which reports per input kind and does not stop at the first failure.
"""
from __future__ import annotations

import os
import shutil

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
FILE_EXAMPLES = LONG_RUN or 800
BUNDLE_EXAMPLES = max(1, LONG_RUN // 10) if LONG_RUN else 50     # a bundle also renders a postmortem: ~1 s
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
