"""The generic reading layers: normalisation every reader sees, the lifecycle-phase vocabulary,
failure families, and the decision that keeps an unexplained error from reading as healthy."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage.api import classify_paths
from triage.evidence.logline import parse_line
from triage.timeref import default_reference


def _classify(tmp_path: Path, log: str):
    (tmp_path / "server.log").write_text(log, encoding="utf-8")
    verdict, _ = classify_paths([str(tmp_path)])
    return verdict


def test_markdown_bold_around_a_pasted_line_is_peeled():
    line = parse_line("**ERROR 04-02 08:25:00 [core.py:68] torch.OutOfMemoryError: CUDA out of memory.**",
                      default_reference(2026))
    assert line.level == "ERROR"
    assert line.message == "torch.OutOfMemoryError: CUDA out of memory."


def test_worker_method_names_the_startup_phase(tmp_path):
    v = _classify(tmp_path, "ERROR 08-01 10:00:00 multiproc_worker_utils.py:226] Exception in worker VllmWorkerProcess "
                            "while processing method load_model: CUDA out of memory. Tried to allocate 112.00 MiB. "
                            "GPU 1 has a total capacity of 23.65 GiB of which 20.06 MiB is free.\n")
    assert v.oom_class.value == "startup"
    assert "load_model" in v.path[1].why


def test_loader_thread_target_names_the_startup_phase(tmp_path):
    v = _classify(tmp_path, "Exception in thread Thread-3 (_create_weight_func):\n"
                            "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
                            "/lmdeploy/src/turbomind/core/allocator.cc:50\n")
    assert v.oom_class.value == "startup"


def test_prompt_in_progress_on_the_failing_line_is_serving(tmp_path):
    v = _classify(tmp_path, "Processing Prompt [BLAS] (3584 / 5525 tokens)CUDA error: out of memory\n")
    assert v.oom_class.value == "burst"


def test_an_error_no_signature_explains_is_not_healthy(tmp_path):
    v = _classify(tmp_path, "time=2025-01-01T00:00:00.000Z level=INFO source=server.go:1 msg=\"starting llama server\"\n"
                            "time=2025-01-01T00:00:01.000Z level=ERROR source=server.go:2 msg=\"post predict\" "
                            "error=\"EOF\"\n")
    assert v.oom_class.value == "unknown"


def test_preemption_alone_is_back_pressure_not_a_failure(tmp_path):
    v = _classify(tmp_path, "WARNING 05-01 10:00:00 scheduler.py:1089] Sequence group 264 is preempted by "
                            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
                            "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
                            "provide more KV cache memory. total_num_cumulative_preemption=1\n")
    assert v.oom_class.value == "no_oom"


@pytest.mark.parametrize("log", [
    "(raylet) Memory on the node (IP: 10.0.0.1, ID: 9af1) where the task (actor ID: 1, name=RayWorkerWrapper.__init__, "
    "pid=77, memory used=80.1GB) was running was 240.32GB / 251.50GB (0.955), which exceeds the memory usage thre\n"
    "shold of 0.95. Ray killed this worker (ID: w1) because it was the most recently scheduled task.\n",
    "Error: llama runner process has terminated: signal: killed\n",
    "TypeError: '<=' not supported between instances of 'int' and 'NoneType'\n",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for "
    "recv operation to complete\n",
])
def test_look_alike_families(tmp_path, log):
    assert _classify(tmp_path, log).oom_class.value == "not_gpu_oom"


def test_offline_progress_shows_serving(tmp_path):
    v = _classify(tmp_path, "Processed prompts:  45%|████▌     | 450/1000 [00:30<00:36, 15.1it/s]\n")
    assert v.oom_class.value == "no_oom"
    assert "serving" in v.summary
