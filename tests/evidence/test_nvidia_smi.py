"""nvidia-smi parser: --query-gpu / --query-compute-apps CSV and the plain table."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from triage.errors import BadInput
from triage.evidence import alertmanager, kubernetes, memory_stats, nvidia_smi
from triage.evidence.base import InputFile, ParseContext
from triage.evidence.kinds import Kind
from triage.timeref import default_reference

MiB = 1 << 20

QUERY_GPU = (
    b"timestamp, index, name, uuid, pci.bus_id, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
    b"utilization.gpu [%]\n"
    b"2025/03/11 14:02:31.412, 0, NVIDIA A100-SXM4-80GB, GPU-8f6e1c2a-3b4d-5e6f-7a8b-9c0d1e2f3a4b, "
    b"00000000:07:00.0, 81920 MiB, 81037 MiB, 345 MiB, 100 %\n"
    b"2025/03/11 14:02:31.415, 1, NVIDIA A100-SXM4-80GB, GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d, "
    b"00000000:0F:00.0, 81920 MiB, 4 MiB, 81378 MiB, 0 %\n"
)

# formats.md 4.1, verbatim.
QUERY_GPU_SHORT = (
    b"index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
    b"0, NVIDIA L40S, 46068 MiB, 9123 MiB, 36346 MiB\n"
)

QUERY_GPU_NOUNITS = (
    b"timestamp, index, memory.used [MiB], memory.total [MiB]\n"
    b"2025/03/11 14:02:31.412, 0, 81037, 81920\n"
)

# GB10 / DGX Spark unified memory: no framebuffer figures.
QUERY_GPU_NA = (
    b"index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB], utilization.gpu [%]\n"
    b"0, NVIDIA GB10, [N/A], [N/A], [N/A], [Not Supported]\n"
)

APPS = (
    b"pid, process_name, used_gpu_memory [MiB]\n"
    b"3858903, VLLM::EngineCore, 6265 MiB\n"
    b"3880364, VLLM::EngineCore, 5530 MiB\n"
)

APPS_UUID = (
    b"gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
    b"GPU-8f6e1c2a-3b4d-5e6f-7a8b-9c0d1e2f3a4b, 3858903, /usr/bin/python3, 80000 MiB\n"
)

APPS_HEADER_ONLY = b"pid, process_name, used_gpu_memory [MiB]\n"

APPS_WSL = b"pid, process_name, used_gpu_memory [MiB]\n4242, python, [N/A]\n"

# formats.md 4.1, verbatim: noheader,nounits.
APPS_NOHEADER = b"2025/09/07 22:37:17.908, NVIDIA GeForce RTX 3090, 1106871, /app/llama-server, 23342\n"

# Driver 550 layout, as a bare `nvidia-smi` prints it.
TABLE_550 = """Tue Mar 11 14:02:33 2025       
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   34C    P0             85W /  400W |   81037MiB /  81920MiB |    100%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  |   00000000:0F:00.0 Off |                    0 |
| N/A   31C    P0             62W /  400W |       4MiB /  81920MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+
                                                                                           
+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0   N/A  N/A   3858903      C   python3                                     80000MiB |
|    0   N/A  N/A   3880364      C   VLLM::EngineCore                             1024MiB |
+-----------------------------------------------------------------------------------------+
"""

# Driver 470 layout: narrower columns, an idle GPU and no processes.
TABLE_470 = """Wed Jan 10 09:15:42 2024       
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  NVIDIA A10G         On   | 00000000:00:1E.0 Off |                    0 |
|  0%   27C    P8    16W / 300W |      0MiB / 22731MiB |      0%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
                                                                               
+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|  No running processes found                                                 |
+-----------------------------------------------------------------------------+
"""

OTHER_FORMATS = {
    "memory_stats": b'{"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2048, "num_ooms": 0}',
    "pod": b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-0"}, "status": {"containerStatuses": []}}',
    "alert": b'{"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "pager", "alerts": []}',
    "vllm_log": b"INFO 03-11 14:02:31 [api_server.py:1090] vLLM API server version 0.8.5.post1\n"
                b"INFO 03-11 14:02:35 [core.py:58] Initializing a V1 LLM engine (v0.8.5.post1)\n",
    "metrics": b"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
               b"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.93\n",
    "dmesg": b"[155044.078590] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\n",
    "csv_other": b"name, age, city\nalice, 30, paris\n",
    "csv_generic_pid": b"index, name, pid, value\n0, worker, 1234, 5\n",
}


def _parse(data: bytes, *, tz=None, display: str = "gpu/nvidia-smi.csv") -> list:
    ctx = ParseContext(times=default_reference(tz=tz))
    return list(nvidia_smi.parse(InputFile(display=display, path=None, data=data), ctx))


# ---------------------------------------------------------------------------------- sniff


@pytest.mark.parametrize("data", [QUERY_GPU, QUERY_GPU_SHORT, QUERY_GPU_NOUNITS, QUERY_GPU_NA, APPS,
                                  APPS_UUID, APPS_HEADER_ONLY, TABLE_550.encode(), TABLE_470.encode()])
def test_sniff_claims_nvidia_smi_output(data: bytes) -> None:
    assert nvidia_smi.sniff(data, "x") >= 50


@pytest.mark.parametrize("name", sorted(OTHER_FORMATS))
def test_sniff_rejects_other_formats(name: str) -> None:
    assert nvidia_smi.sniff(OTHER_FORMATS[name], "x") == 0


@pytest.mark.parametrize("data", [QUERY_GPU, APPS, APPS_HEADER_ONLY, TABLE_550.encode()])
def test_other_parsers_do_not_claim_nvidia_smi(data: bytes) -> None:
    for mod in (memory_stats, kubernetes, alertmanager):
        assert mod.sniff(data, "x") == 0, mod.NAME


def test_sniff_rejects_noheader_csv() -> None:
    # Unnamed columns cannot be mapped reliably; only header-carrying CSV is claimed.
    assert nvidia_smi.sniff(APPS_NOHEADER, "x") == 0


def test_a_log_that_quotes_a_table_is_left_to_the_log_parser() -> None:
    log = b"".join(b"INFO 03-11 14:02:%02d [core.py:58] step\n" % i for i in range(10)) + TABLE_550.encode()
    assert nvidia_smi.sniff(log, "x") == 0
    # ... also when the container printed the table first and then started the server
    assert nvidia_smi.sniff(TABLE_550.encode() + log, "x") == 0


def test_sniff_never_raises_on_random_bytes() -> None:
    rng = random.Random(1234)
    for size in (0, 1, 7, 100, 4096):
        for _ in range(20):
            blob = bytes(rng.randrange(256) for _ in range(size))
            assert nvidia_smi.sniff(blob, "x") == 0
    assert nvidia_smi.sniff(b"\x00\x01\x02" * 100, "x") == 0
    assert nvidia_smi.sniff(b"hello world\nthis is plain text\n", "x") == 0
    assert nvidia_smi.sniff("pid, process_name\n".encode("utf-16"), "x") == 0


# ---------------------------------------------------------------------------------- CSV


def test_query_gpu_rows_in_bytes_and_utc() -> None:
    ev = _parse(QUERY_GPU)
    assert [e.kind for e in ev] == [Kind.GPU_MEMORY.value] * 2
    first = ev[0]
    assert first.line == 2 and first.source == "gpu/nvidia-smi.csv"
    f = first.fields
    assert f["gpu"] == 0
    assert f["name"] == "NVIDIA A100-SXM4-80GB"
    assert f["uuid"] == "GPU-8f6e1c2a-3b4d-5e6f-7a8b-9c0d1e2f3a4b"
    assert f["pci_bus_id"] == "00000000:07:00.0"
    assert f["total_bytes"] == 81920 * MiB == 85899345920
    assert f["used_bytes"] == 81037 * MiB
    assert f["free_bytes"] == 345 * MiB
    assert f["utilization_pct"] == 100.0
    assert first.time == datetime(2025, 3, 11, 14, 2, 31, 412000, tzinfo=timezone.utc)
    assert ev[1].fields["gpu"] == 1 and ev[1].fields["used_bytes"] == 4 * MiB


def test_timestamp_is_host_local_time_converted_to_utc() -> None:
    ev = _parse(QUERY_GPU, tz=timezone(timedelta(hours=2)))
    assert ev[0].time == datetime(2025, 3, 11, 12, 2, 31, 412000, tzinfo=timezone.utc)
    assert ev[0].time.utcoffset() == timedelta(0)


def test_query_gpu_without_timestamp_or_uuid() -> None:
    (e,) = _parse(QUERY_GPU_SHORT)
    assert e.time is None
    assert e.fields["uuid"] is None and e.fields["utilization_pct"] is None
    assert (e.fields["total_bytes"], e.fields["used_bytes"], e.fields["free_bytes"]) == (
        46068 * MiB, 9123 * MiB, 36346 * MiB)


def test_nounits_values_take_mib_from_the_header() -> None:
    (e,) = _parse(QUERY_GPU_NOUNITS)
    assert e.fields["used_bytes"] == 81037 * MiB
    assert e.fields["total_bytes"] == 81920 * MiB


def test_not_available_values_are_none() -> None:
    (e,) = _parse(QUERY_GPU_NA)
    assert e.fields["name"] == "NVIDIA GB10"
    for key in ("used_bytes", "total_bytes", "free_bytes", "utilization_pct"):
        assert e.fields[key] is None, key


def test_compute_apps() -> None:
    ev = _parse(APPS)
    assert [e.kind for e in ev] == [Kind.GPU_PROCESS.value] * 2
    assert [e.line for e in ev] == [2, 3]
    assert ev[0].fields["pid"] == 3858903
    assert ev[0].fields["name"] == "VLLM::EngineCore"
    assert ev[0].fields["used_bytes"] == 6265 * MiB
    assert ev[0].fields["gpu_uuid"] is None
    assert ev[1].fields["used_bytes"] == 5530 * MiB


def test_compute_apps_with_gpu_uuid() -> None:
    (e,) = _parse(APPS_UUID)
    assert e.fields["gpu_uuid"] == "GPU-8f6e1c2a-3b4d-5e6f-7a8b-9c0d1e2f3a4b"
    assert e.fields["used_bytes"] == 80000 * MiB
    assert e.fields["name"] == "/usr/bin/python3"


def test_header_only_compute_apps_is_valid_and_empty() -> None:
    # What a PID-namespaced container (or an idle GPU) prints.
    assert _parse(APPS_HEADER_ONLY) == []


def test_compute_apps_memory_not_available() -> None:
    (e,) = _parse(APPS_WSL)
    assert e.fields["pid"] == 4242 and e.fields["used_bytes"] is None


def test_repeated_header_and_blank_lines_are_skipped() -> None:
    data = QUERY_GPU_SHORT + b"\n" + QUERY_GPU_SHORT
    ev = _parse(data)
    assert [e.line for e in ev] == [2, 5]


def test_gzip_input() -> None:
    import gzip
    assert len(_parse(gzip.compress(APPS))) == 2


def test_noheader_csv_is_rejected_with_a_clear_error() -> None:
    with pytest.raises(BadInput) as err:
        _parse(APPS_NOHEADER)
    assert "gpu/nvidia-smi.csv" in str(err.value)


def test_empty_file_yields_nothing() -> None:
    assert _parse(b"") == []


# ---------------------------------------------------------------------------------- table


def test_table_550_gpus() -> None:
    ev = [e for e in _parse(TABLE_550.encode()) if e.kind == Kind.GPU_MEMORY.value]
    assert len(ev) == 2
    g0, g1 = (e.fields for e in ev)
    assert g0["gpu"] == 0 and g0["name"] == "NVIDIA A100-SXM4-80GB"
    assert g0["pci_bus_id"] == "00000000:07:00.0"
    assert g0["used_bytes"] == 81037 * MiB and g0["total_bytes"] == 81920 * MiB
    assert g0["utilization_pct"] == 100.0
    assert g0["driver_version"] == "550.54.15"
    assert g1["gpu"] == 1 and g1["used_bytes"] == 4 * MiB
    assert ev[0].line == 10                               # the Memory-Usage row
    assert ev[0].time == datetime(2025, 3, 11, 14, 2, 33, tzinfo=timezone.utc)


def test_table_550_processes() -> None:
    ev = [e for e in _parse(TABLE_550.encode()) if e.kind == Kind.GPU_PROCESS.value]
    assert [(e.fields["gpu"], e.fields["pid"], e.fields["name"], e.fields["used_bytes"]) for e in ev] == [
        (0, 3858903, "python3", 80000 * MiB),
        (0, 3880364, "VLLM::EngineCore", 1024 * MiB),
    ]
    assert ev[0].fields["type"] == "C"
    assert [e.line for e in ev] == [23, 24]
    assert "3858903" in ev[0].text


def test_table_470_layout_and_no_processes() -> None:
    ev = _parse(TABLE_470.encode())
    assert [e.kind for e in ev] == [Kind.GPU_MEMORY.value]
    f = ev[0].fields
    assert (f["gpu"], f["name"], f["used_bytes"], f["total_bytes"]) == (0, "NVIDIA A10G", 0, 22731 * MiB)
    assert f["pci_bus_id"] == "00000000:00:1E.0"
    assert ev[0].time == datetime(2024, 1, 10, 9, 15, 42, tzinfo=timezone.utc)


def test_table_repeated_captures_take_each_timestamp() -> None:
    second = TABLE_550.replace("Tue Mar 11 14:02:33 2025", "Tue Mar 11 14:02:38 2025")
    ev = [e for e in _parse((TABLE_550 + "\n" + second).encode()) if e.kind == Kind.GPU_MEMORY.value]
    assert [e.time.second for e in ev] == [33, 33, 38, 38]


def test_table_old_process_rows_without_gi_ci_and_na_memory() -> None:
    table = TABLE_470.replace(
        "|  No running processes found                                                 |",
        "|    0      12345      C   python                                   N/A      |\n"
        "|    0      23456      G   /usr/lib/xorg/Xorg                          4MiB |")
    procs = [e for e in _parse(table.encode()) if e.kind == Kind.GPU_PROCESS.value]
    assert [(e.fields["pid"], e.fields["type"], e.fields["used_bytes"]) for e in procs] == [
        (12345, "C", None), (23456, "G", 4 * MiB)]


def test_unrelated_text_is_bad_input() -> None:
    with pytest.raises(BadInput):
        _parse(b"hello\nworld\n")


@pytest.mark.parametrize("preamble", [
    b"$ nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.used --format=csv\n",
    b"root@gpu-node-3:~# nvidia-smi --query-gpu=index,memory.used --format=csv\n",
    b"```\n",
    b"```text\n# taken every minute by cron\n",
    b"PS C:\\Users\\me> nvidia-smi --query-gpu=memory.used --format=csv\n",
])
def test_a_pasted_prompt_or_fence_above_the_csv_is_skipped(preamble: bytes) -> None:
    data = preamble + QUERY_GPU
    assert nvidia_smi.sniff(data, "pasted.txt") == 85
    records = _parse(data)
    assert [r.fields["gpu"] for r in records] == [0, 1]
    assert records[0].line == preamble.count(b"\n") + 2      # its real line: after the preamble and the header


def test_prose_above_the_csv_is_not_taken_for_a_prompt() -> None:
    # Only prompts, comments and fences may come first: anything else is not nvidia-smi output.
    assert nvidia_smi.sniff(b"Here is what I see on the box:\n" + QUERY_GPU, "pasted.txt") == 0


def test_a_paste_that_goes_on_with_log_lines_is_left_to_the_log_parser() -> None:
    paste = (b"```\n$ nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv\n"
             b"index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H100 80GB HBM3, 80000 MiB, 81559 MiB\n"
             b"```\n$ vllm serve m\n"
             b"ERROR 09-05 12:03:31 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
             b"112.00 MiB. GPU 0 has a total capacity of 79.19 GiB of which 58.06 MiB is free.\n")
    assert nvidia_smi.sniff(paste, "paste.txt") == 0
