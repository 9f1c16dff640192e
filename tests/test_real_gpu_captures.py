"""Evidence captured on a real GPU (tests/real_gpu/capture.py): the parsers read what the driver,
the caching allocator and nvidia-smi really print, and agree with the numbers torch reported
(manifest.json) at the precision each format carries.

Runs on the captures committed from an H100 and an H200 (tests/real_gpu/h100, h200) everywhere, and on a fresh
capture as well on a machine with an NVIDIA GPU and torch with CUDA.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from triage.api import classify_paths
from triage.evidence import load_evidence
from triage.evidence.kinds import Kind

HERE = Path(__file__).resolve().parent / "real_gpu"
GiB, MiB = 1 << 30, 1 << 20
# The OOM message rounds to two decimals of its unit: at most half of 0.01 GiB off.
MESSAGE_ROUNDING = 0.005 * GiB



def has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:      # before importing torch: seconds on a CPU box
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(scope="module", params=["h100", "h200", "live"])
def capture(request, tmp_path_factory) -> Path:
    if request.param != "live":
        return HERE / request.param
    if not has_cuda():
        pytest.skip("no NVIDIA GPU with torch: only the committed capture is checked")
    out = tmp_path_factory.mktemp("capture")
    subprocess.run([sys.executable, str(HERE / "capture.py"), str(out)], check=True, timeout=600)
    return out


def _manifest(capture: Path) -> dict:
    return json.loads((capture / "manifest.json").read_text())


def _records(path: Path, kind: Kind):
    return [e for e in load_evidence([str(path)]).items if e.kind == kind.value]


@pytest.mark.parametrize("case", ["oom-simple", "oom-fragmented"])
def test_real_oom_message_numbers_match_what_torch_reported(capture, case):
    truth = _manifest(capture)["captures"][case]
    [oom] = _records(capture / case / "server.log", Kind.TORCH_OOM)
    f = oom.fields
    assert oom.line == 4      # the exception line under the traceback
    assert abs(f["tried_bytes"] - truth["requested_bytes"]) <= MESSAGE_ROUNDING
    assert abs(f["capacity_bytes"] - truth["total_bytes"]) <= MESSAGE_ROUNDING
    assert abs(f["allocated_bytes"] - truth["allocated_bytes"]) <= MESSAGE_ROUNDING
    unallocated = truth["reserved_bytes"] - truth["allocated_bytes"]
    assert abs(f["reserved_unallocated_bytes"] - unallocated) <= MESSAGE_ROUNDING
    assert f["device"] == 0 and f["self_bytes"] >= f["allocated_bytes"]


@pytest.mark.parametrize("case", ["oom-simple", "oom-fragmented"])
def test_real_memory_stats_dump_is_read_exactly(capture, case):
    truth = _manifest(capture)["captures"][case]
    [stats] = _records(capture / case / "memory_stats.json", Kind.MEMORY_STATS)
    assert stats.fields["reserved_bytes"] == truth["reserved_bytes"]
    assert stats.fields["allocated_bytes"] == truth["allocated_bytes"]
    assert stats.fields["inactive_split_bytes"] == truth["inactive_split_bytes"]
    assert stats.fields["num_ooms"] == truth["num_ooms"] == 1
    assert stats.fields["approximate"] is False


@pytest.mark.parametrize("case", ["oom-simple", "oom-fragmented"])
def test_real_memory_summary_agrees_with_the_dump_to_its_mib_precision(capture, case):
    truth = _manifest(capture)["captures"][case]
    [summary] = _records(capture / case / "memory_summary.txt", Kind.MEMORY_STATS)
    assert summary.fields["approximate"] is True and summary.fields["device"] == 0
    for key in ("reserved_bytes", "allocated_bytes", "inactive_split_bytes"):
        assert abs(summary.fields[key] - truth[key]) < MiB, key


def test_real_nvidia_smi_outputs_name_the_holder_process_and_the_card(capture):
    manifest = _manifest(capture)
    holder = int((capture / "holder.pid").read_text())
    held = manifest["holder_gib"] * GiB
    for name in ("nvidia-smi.txt", "nvidia-smi-apps.csv"):
        [proc] = _records(capture / name, Kind.GPU_PROCESS)
        assert proc.fields["pid"] == holder
        # the holder's tensor plus the CUDA context
        assert held <= proc.fields["used_bytes"] <= held + 1 * GiB
    for name in ("nvidia-smi.txt", "nvidia-smi-gpu.csv"):
        [gpu] = _records(capture / name, Kind.GPU_MEMORY)
        assert gpu.fields["name"] == manifest["card"]
        # the card's memory as the driver counts it: a little above what torch can use
        assert 0 < gpu.fields["total_bytes"] - manifest["captures"]["oom-simple"]["total_bytes"] < 2 * GiB
        assert held <= gpu.fields["used_bytes"] <= held + 1 * GiB


def test_real_fragmentation_oom_is_chronic_with_the_allocator_fix(capture):
    verdict, _ = classify_paths([str(capture / "oom-fragmented")])
    assert verdict.oom_class.value == "chronic"
    assert [c.id for c in verdict.causes] == ["allocator_fragmentation"]
    [rec] = verdict.recommendations
    assert rec.setting == "PYTORCH_CUDA_ALLOC_CONF" and "expandable_segments:True" in rec.to_value


def test_real_oom_of_a_process_holding_almost_nothing_is_read_as_not_yet_started(capture):
    # A request larger than the card, no lifecycle line, and the process held ~1 GiB of the card:
    # a serving engine holds its weights and KV cache, so the failure came before it was up.
    verdict, _ = classify_paths([str(capture / "oom-simple")])
    assert verdict.path[0].answer == "yes"
    assert verdict.oom_class.value == "startup"
    assert "held" in verdict.path[1].why and "in use by the process" in verdict.path[1].why


def test_the_recommended_allocator_setting_prevents_the_fragmentation_oom(capture):
    # The chronic verdict's fix, checked on the card: the very allocation pattern that failed with
    # 19 GiB reserved-but-unallocated succeeds under expandable_segments:True.
    verdict, _ = classify_paths([str(capture / "oom-fragmented")])
    [rec] = verdict.recommendations
    retried = _manifest(capture)["captures"]["fragmented-expandable"]
    assert retried["alloc_conf"] == rec.to_value.split(",")[0] == "expandable_segments:True"
    assert retried["allocation_succeeded"] is True
