"""The classifier's reviewed data files: the stack-frame vocabulary of the phases, the Xid table,
the look-alike causes and the engines' setting names. Each loads checked (a typo fails loudly),
and each decides what the verdict says."""
from __future__ import annotations

import pytest

from triage.api import classify_paths
from triage.classes import compiled, registry
from triage.classes.not_gpu_oom import LookalikeDataError, lookalikes, parse_lookalikes
from triage.classes.settings import SettingsDataError, engines, parse_settings
from triage.flowchart.frames import FrameDataError, frames, parse_vocabulary
from triage.flowchart.xids import XidDataError, is_hardware, may_cause_oom, parse_xids
from triage.launch import engine_flags

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
       "23.55 GiB of which 120.00 MiB is free. Of the allocated memory 22.10 GiB is allocated by PyTorch, and 90.00 MiB "
       "is reserved by PyTorch but unallocated.")


def classify_log(tmp_path, text: str):
    (tmp_path / "server.log").write_text(text + "\n")
    return classify_paths([str(tmp_path)])[0]


def traceback(*functions: str) -> str:
    lines = ["ERROR 05-01 12:00:40 [core.py:1] Traceback (most recent call last):"]
    for i, fn in enumerate(functions):
        lines += [f'ERROR 05-01 12:00:40 [core.py:1]   File "/x/vllm/v1/worker/gpu_model_runner.py", line {100 + i}, '
                  f"in {fn}", "ERROR 05-01 12:00:40 [core.py:1]     self.run()"]
    return "\n".join(lines + [f"ERROR 05-01 12:00:40 [core.py:1] {OOM}"])


@pytest.mark.parametrize("function, phase", [
    ("profile_run", "startup"), ("load_state_dict", "startup"), ("capture_begin", "startup"),
    ("run_busy_loop", "runtime"), ("execute_model", "runtime"),
])
def test_a_frame_named_in_the_data_decides_the_phase(tmp_path, function, phase):
    verdict = classify_log(tmp_path, traceback(function))
    step = next(s for s in verdict.path if s.question.startswith("Did it fail before"))
    assert step.answer == {"startup": "yes", "runtime": "no"}[phase] and function in step.why


def test_graph_capture_frames_bring_eager_mode_advice(tmp_path):
    verdict = classify_log(tmp_path, "$ vllm serve m\n" + traceback("compile_or_warm_up_model", "capture_model"))
    assert verdict.oom_class.value == "startup"
    assert {r.setting: r.to_value for r in verdict.recommendations}.get("enforce_eager") is True


def test_the_frame_vocabulary_rejects_a_name_in_two_groups_and_a_group_without_its_why():
    doc = compiled.parse("phase_frames")
    doc["startup"]["groups"]["weights"]["functions"].append("profile_run")
    with pytest.raises(FrameDataError, match="profile_run is in both"):
        parse_vocabulary(doc)
    doc = compiled.parse("phase_frames")
    del doc["startup"]["groups"]["kv_cache"]["why"]
    with pytest.raises(FrameDataError, match="kv_cache"):
        parse_vocabulary(doc)
    assert "capture_model" in frames().groups["cuda_graph_capture"] and "step" in frames().runtime


def test_file_bound_functions_decide_only_in_their_file():
    vocab = frames()
    # Module.to / .cuda copy a model's weights onto the device; a `to` elsewhere is anybody's
    assert vocab.is_startup(("/env/lib/site-packages/torch/nn/modules/module.py", 1143, "convert"))
    assert vocab.is_startup(("C:\\env\\Lib\\site-packages\\torch\\nn\\modules\\module.py", 905, "<lambda>"))
    assert not vocab.is_startup(("/srv/app/batching.py", 10, "to"))
    assert vocab.is_runtime(("/env/lib/python3.10/site-packages/xinference/core/model.py", 215, "_call_wrapper"))
    assert not vocab.is_runtime(("/srv/app/wrappers.py", 1, "_call_wrapper"))


def test_xids_by_role():
    assert is_hardware(79) and is_hardware(63) and not is_hardware(13) and not is_hardware(999)
    # Teardown and informational Xids never explain a GPU OOM; an unlisted or hardware one may.
    assert not may_cause_oom(45) and not may_cause_oom(92) and may_cause_oom(79) and may_cause_oom(999)
    with pytest.raises(XidDataError):
        parse_xids({"xids": [{"code": 1, "after_oom": "sometimes", "why": "x"}]})
    with pytest.raises(XidDataError):
        parse_xids({"xids": [{"code": 1, "why": "x"}, {"code": 1, "why": "y"}]})


def test_a_hardware_xid_alone_is_a_hardware_fault(tmp_path):
    verdict = classify_log(tmp_path, "[Thu Mar 12 14:00:05 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, "
                                     "name=python3, GPU has fallen off the bus.")
    assert verdict.oom_class.value == "not_gpu_oom"
    assert verdict.causes[0].id == "gpu_hardware_fault" and verdict.runbook == "gpu_fault"


def test_lookalike_causes_are_the_classes_causes():
    known = set(registry().spec("not_gpu_oom").cause_ids)
    table = lookalikes()
    assert {n.cause for n in table.kinds.values()} <= known
    assert all(0 < n.confidence < 1 for n in table.kinds.values())
    doc = compiled.parse("lookalikes")
    doc["kinds"]["nccl_error"]["cause"] = "nccl_timeout"
    with pytest.raises(LookalikeDataError, match="kinds.nccl_error"):
        parse_lookalikes(doc)


def test_engine_settings_name_arguments_the_launch_table_knows():
    """One flag vocabulary: where launch_flags.yaml has the engine, advice's arguments are its."""
    for engine, table in engines().items():
        launch = engine_flags(engine)
        if launch is None:
            assert all(s.flag.startswith("-") for s in table.values()), engine
            continue
        known = set(launch.flags) | set(launch.defaults)
        for name, setting in table.items():
            if setting.flag == "--" + (setting.arg or name).replace("_", "-"):
                assert (setting.arg or name) in known, (engine, name)
    with pytest.raises(SettingsDataError):
        parse_settings({"vllm": {"source": "s", "settings": {"max_model_len": {"flg": "--x"}}}})
