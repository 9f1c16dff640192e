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

PROBE = """
import sys, runpy
sys.argv = ["triage", "classify", sys.argv[1], "--json"]
try:
    runpy.run_module("triage", run_name="__main__")
except SystemExit:
    pass
print("MODULES=" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] in {heavy}
                                  or m.startswith({features}))), file=sys.stderr)
"""


def test_classify_json_imports_no_heavy_module(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n")
    code = PROBE.replace("{heavy}", repr(set(HEAVY))).replace("{features}", repr(FEATURES))
    proc = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
    assert json.loads(proc.stdout)["verdict"]["class"] == "startup"
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES=")][0]
    assert line == "MODULES=", line
