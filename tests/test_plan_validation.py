"""The validation set of `triage plan` (tests/plan_validation/): every case file well formed, none
from a reserved thread, and the plan runs on each. No accuracy assertion: the errors are what
benchmarks/bench_plan_validation.py reports."""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

CASES = ROOT / "tests" / "plan_validation"
FILES = sorted(CASES.glob("*.yaml"))
# The evaluation set's reserved threads, mirrored in the repository (a test reads only what it holds).
RESERVED_PLACES = (ROOT / "tests" / "corpus" / "reserved-threads.txt",)
QUANTITIES = {"weights_gib", "kv_cache_gib", "kv_tokens", "max_concurrency", "non_torch_gib", "activation_peak_gib"}
LAUNCH_KEYS = {"tp", "pp", "gpu_memory_utilization", "max_model_len", "dtype", "kv_cache_dtype", "max_num_seqs",
               "max_num_batched_tokens", "enforce_eager"}
THREAD = re.compile(r"^https://github\.com/([\w.-]+/[\w.-]+)/(issues|pull|discussions)/(\d+)$")
# A log committed to a repository (a benchmark's output, a notebook, a guide): `source_kind: repository-file`.
REPO_FILE = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/blob/[\w.-]+/\S+$")


@functools.lru_cache(maxsize=None)
def _bench():
    name = "bench_plan_validation"
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod            # its dataclasses look their module up while being defined
    spec.loader.exec_module(mod)
    return mod


def _thread_key(url: str) -> tuple[str, str] | None:
    """(owner/repo, number) of a GitHub thread URL: issues, pulls and discussions share numbers."""
    m = THREAD.match(url.strip().rstrip("/").split("#")[0])
    return (m.group(1).lower(), m.group(3)) if m else None


def _reserved() -> set[tuple[str, str]]:
    for place in RESERVED_PLACES:
        if place.is_file():
            lines = [ln.strip() for ln in place.read_text(encoding="utf-8").splitlines()]
            return {k for ln in lines if ln and not ln.startswith("#") for k in [_thread_key(ln)] if k}
    return set()


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_there_are_cases():
    assert FILES, "tests/plan_validation/ holds no case"


def test_one_case_per_server_start():
    """A log posted twice (a thread and its duplicate, or a file copied between repositories) is one case."""
    seen: dict[tuple, str] = {}
    for path in FILES:
        case = _load(path)
        key = (case["source"], json.dumps(case["launch"], sort_keys=True), case["model"]["name"] if case.get("model") else None)
        assert key not in seen, f"{path.name} repeats {seen[key]}"
        seen[key] = path.name


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_case_is_well_formed(path):
    case = _load(path)
    if case.get("source_kind") == "repository-file":
        assert REPO_FILE.match(case["source"]), f"{path.name}: source is not a GitHub file URL"
    else:
        assert "source_kind" not in case, f"{path.name}: source_kind is repository-file or absent (a thread)"
        assert _thread_key(case["source"]), f"{path.name}: source is not a GitHub thread URL"
    for other in case.get("also_posted") or []:
        assert _thread_key(other) or REPO_FILE.match(other), f"{path.name}: also_posted {other!r} is not a thread or file URL"
    assert case["status"] in ("ok", "config-missing")
    assert case["engine"] in ("vllm", "sglang")
    assert case["generation"] in ({"V0", "V1"} if case["engine"] == "vllm" else {"sglang"})
    assert case.get("architecture")
    assert set(case["gpu"]) >= {"name", "total_gib", "basis"}
    assert set(case["launch"]) >= LAUNCH_KEYS, f"{path.name}: launch lacks {LAUNCH_KEYS - set(case['launch'])}"
    if case.get("version_inferred") is not None:     # only where the thread leaves the version unstated
        assert case.get("version") is None, f"{path.name}: version_inferred beside a stated version"
        assert re.fullmatch(r"\d+\.\d+\.\d+", str(case["version_inferred"])), f"{path.name}: version_inferred"
        assert case.get("version_basis"), f"{path.name}: version_inferred without the version_basis it rests on"
    assert case["printed"], f"{path.name}: no printed figure"
    for fig in case["printed"]:
        assert fig["quantity"] in QUANTITIES, fig
        assert isinstance(fig["value"], (int, float)) and fig["value"] > 0, fig
        assert isinstance(fig["line"], str) and fig["line"].strip(), fig
        shown = f"{fig['value']:,}" if isinstance(fig["value"], int) else None
        numbers = {n.replace(",", "") for n in re.findall(r"\d[\d,]*\.?\d*", fig["line"])}
        if "derived" not in fig:           # the value is written in the line itself (e.g. 198,784 or 14.2474)
            assert str(fig["value"]).rstrip("0").rstrip(".") in {n.rstrip("0").rstrip(".") if "." in n else n
                                                                  for n in numbers} or shown in fig["line"], fig
    if case["status"] == "ok":
        config = ROOT / case["model"]["config"]
        assert config.is_file(), f"{path.name}: {config} missing"
        json.loads(config.read_text(encoding="utf-8"))
        assert case["model"].get("config_source"), f"{path.name}: say where the config came from"
    else:
        assert case.get("missing"), f"{path.name}: say what is missing"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_case_is_not_from_a_reserved_thread(path):
    reserved = _reserved()
    if not reserved:
        pytest.skip("reserved-threads.txt is not on this machine")
    case = _load(path)
    for url in [case["source"], *(case.get("also_posted") or [])]:
        key = _thread_key(url)
        assert key is None or key not in reserved, f"{path.name}: {url} is reserved"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_plan_runs_on_the_case(path):
    bench = _bench()
    result = bench.run_case(path.stem, _load(path))
    if result.status == "ok":
        assert result.figures, f"{path.name}: nothing the plan could be compared on"
        for fig in result.figures:
            assert fig.planned == fig.planned and fig.planned >= 0, fig      # a number, not NaN


def test_the_benchmark_summarises_every_quantity():
    bench = _bench()
    cases = bench.load_cases()
    results = [bench.run_case(name, case) for name, case in cases]
    rows = bench.summarise(results)
    assert {r["quantity"] for r in rows} >= {"weights_gib"}
    for r in rows:
        assert 0 <= r["within_10pct"] <= r["n"]
