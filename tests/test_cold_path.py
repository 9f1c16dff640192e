"""`triage classify --json` must not pay for torch, pandas or requests (nor rich): measured in a
fresh interpreter, the way a runbook bot starts it."""
from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "pandas", "requests", "numpy", "rich", "jinja2")
# The other commands' code: registered by name, imported only when that command runs.
FEATURES = ("triage.timeline", "triage.postmortem", "triage.sim", "triage.recovery", "triage.live", "triage.plan",
            # the shared memory arithmetic: only its precision table, unless a launch names a local model folder
            "triage.memory.config", "triage.memory.weights", "triage.memory.kv", "triage.memory.estimate")

# The classify path ends with os._exit once its output is out (triage/fastpath.py exit_now): the
# modules are listed there, or after a normal exit.
PROBE = """
import os, sys, runpy
sys.argv = ["triage", "classify", sys.argv[1], "--json"]
def _report():
    print("MODULES=" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] in {heavy}
                                      or m.startswith({features}))), file=sys.stderr)
    sys.stderr.flush()
_exit = os._exit
def _exit_reported(code):
    _report()
    _exit(code)
os._exit = _exit_reported
try:
    runpy.run_module("triage", run_name="__main__")
except SystemExit:
    pass
_report()
"""


def test_classify_json_imports_no_heavy_module(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n")
    code = PROBE.replace("{heavy}", repr(set(HEAVY))).replace("{features}", repr(FEATURES))
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
    assert json.loads(proc.stdout)["verdict"]["class"] == "startup"
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES=")][0]
    assert line == "MODULES=", line


def test_a_metrics_scrape_is_read_without_the_exposition_server(tmp_path):
    # prometheus-client's package __init__ imports its HTTP server (http.server, email, ssl):
    # a quarter of the start-up, for a parser that needs none of it
    (tmp_path / "vllm.log").write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    (tmp_path / "metrics.prom").write_text(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 31.0\n"
        "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.97\n")
    probe = PROBE.replace("{heavy}", repr({"http", "email", "ssl", "prometheus_client"})).replace("{features}", "()")
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    facts = json.loads(proc.stdout)["facts"]
    assert {"source": "metrics.prom", "parser": "prometheus", "records": 2} in facts["inputs"], facts["inputs"]
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES=")][0]
    assert line == "MODULES=", line


def test_the_private_parser_reads_what_the_public_one_reads():
    from prometheus_client.parser import text_string_to_metric_families as public

    from triage.evidence import exposition_text

    text = ('# HELP vllm:kv_cache_usage_perc KV-cache usage.\n# TYPE vllm:kv_cache_usage_perc gauge\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\nDCGM_FI_DEV_FB_USED{gpu="0"} 80000 1700000000000\n')
    private = exposition_text._private_parser()
    assert private is not None and private is not public
    def read(parse):
        return [(s.name, dict(s.labels), s.value, s.timestamp) for fam in parse(text) for s in fam.samples]
    assert read(private) == read(public) and len(read(public)) == 2
    # once the public package is loaded (serve, watch), it is the one handed out
    assert exposition_text.text_string_to_metric_families() is public


def test_a_versioned_engine_log_is_judged_without_packaging():
    # The known-bug ranges are plain releases, compared as tuples (tests/test_version_ranges.py
    # checks them against packaging): importing packaging.specifiers would cost ~9 ms of a start.
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "samples" / "startup-kv-blowout-v1"
    probe = PROBE.replace("{heavy}", repr({"packaging"})).replace("{features}", "()")
    proc = subprocess.run([sys.executable, "-c", probe, str(sample)], capture_output=True, text=True, timeout=60)
    facts = json.loads(proc.stdout)["facts"]
    assert facts["engine"] == "vllm" and facts["engine_version"]
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES=")][0]
    assert line == "MODULES=", line


def test_a_lazy_pattern_compiles_on_first_use_and_answers_as_the_compiled_one():
    import re

    from triage.lazyre import lazy

    pattern = lazy(r"Tried to allocate (\d+) MiB", re.IGNORECASE)
    assert pattern.pattern == r"Tried to allocate (\d+) MiB" and pattern._compiled is None   # read, not compiled
    assert pattern.search("tried to ALLOCATE 20 MiB").group(1) == "20"
    assert pattern._compiled is not None and pattern.flags & re.IGNORECASE
    assert pattern.sub("x", "Tried to allocate 2 MiB.") == "x." and pattern.findall("none") == []
