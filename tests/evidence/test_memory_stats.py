"""memory_stats parser: torch.cuda.memory_stats() JSON dumps and memory_summary() tables."""
from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import pytest

from triage.errors import BadInput
from triage.evidence import alertmanager, kubernetes, memory_stats, nvidia_smi
from triage.evidence.base import InputFile, ParseContext
from triage.evidence.kinds import Kind
from triage.timeref import default_reference

MiB = 1 << 20

# `json.dumps(torch.cuda.memory_stats(0), indent=2)` after an OOM (per-pool keys trimmed).
FLAT = """{
  "active.all.allocated": 842164,
  "active.all.current": 3467,
  "active.all.freed": 838697,
  "active.all.peak": 3489,
  "active_bytes.all.allocated": 536870912000,
  "active_bytes.all.current": 79580351765,
  "active_bytes.all.freed": 457290560235,
  "active_bytes.all.peak": 81609622281,
  "allocated_bytes.all.allocated": 536870912000,
  "allocated_bytes.all.current": 79580351765,
  "allocated_bytes.all.freed": 457290560235,
  "allocated_bytes.all.peak": 81609622281,
  "allocation.all.allocated": 842164,
  "allocation.all.current": 3467,
  "allocation.all.freed": 838697,
  "allocation.all.peak": 3489,
  "inactive_split.all.allocated": 20000,
  "inactive_split.all.current": 88,
  "inactive_split.all.freed": 19912,
  "inactive_split.all.peak": 120,
  "inactive_split_bytes.all.allocated": 70353158144,
  "inactive_split_bytes.all.current": 1833963745,
  "inactive_split_bytes.all.freed": 68519194399,
  "inactive_split_bytes.all.peak": 2463105024,
  "max_split_size": -1,
  "num_alloc_retries": 3,
  "num_device_alloc": 431,
  "num_device_free": 19,
  "num_oom_rejections": 0,
  "num_ooms": 1,
  "num_sync_all_streams": 2,
  "oversize_allocations.allocated": 0,
  "oversize_allocations.current": 0,
  "oversize_allocations.freed": 0,
  "oversize_allocations.peak": 0,
  "oversize_segments.allocated": 0,
  "oversize_segments.current": 0,
  "oversize_segments.freed": 0,
  "oversize_segments.peak": 0,
  "requested_bytes.all.allocated": 535797170176,
  "requested_bytes.all.current": 79580350765,
  "requested_bytes.all.freed": 456216818411,
  "requested_bytes.all.peak": 81609621281,
  "reserved_bytes.all.allocated": 83307266048,
  "reserved_bytes.all.current": 83307266048,
  "reserved_bytes.all.freed": 0,
  "reserved_bytes.all.peak": 83307266048,
  "segment.all.allocated": 412,
  "segment.all.current": 412,
  "segment.all.freed": 0,
  "segment.all.peak": 412
}"""
STATS = json.loads(FLAT)

# `print(torch.cuda.memory_summary(0))` of the same state, as torch formats it.
SUMMARY = """|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 3         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  75893 MiB |  77829 MiB | 512000 MiB | 436106 MiB |
|       from large pool |  75858 MiB |  77793 MiB | 501760 MiB | 425901 MiB |
|       from small pool |     35 MiB |     36 MiB |  10240 MiB |  10205 MiB |
|---------------------------------------------------------------------------|
| Active memory         |  75893 MiB |  77829 MiB | 512000 MiB | 436106 MiB |
|       from large pool |  75858 MiB |  77793 MiB | 501760 MiB | 425901 MiB |
|       from small pool |     35 MiB |     36 MiB |  10240 MiB |  10205 MiB |
|---------------------------------------------------------------------------|
| Requested memory      |  75893 MiB |  77828 MiB | 510976 MiB | 435082 MiB |
|       from large pool |  75857 MiB |  77792 MiB | 500736 MiB | 424842 MiB |
|       from small pool |     34 MiB |     35 MiB |  10240 MiB |  10206 MiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  79448 MiB |  79448 MiB |  79448 MiB |      0 B   |
|       from large pool |  79408 MiB |  79408 MiB |  79408 MiB |      0 B   |
|       from small pool |     40 MiB |     40 MiB |     40 MiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory |   1749 MiB |   2349 MiB |  67094 MiB |  65344 MiB |
|       from large pool |   1744 MiB |   2344 MiB |  66000 MiB |  64255 MiB |
|       from small pool |      5 MiB |      6 MiB |   1094 MiB |   1089 MiB |
|---------------------------------------------------------------------------|
| Allocations           |    3467    |    3489    |     842 K  |     838 K  |
|       from large pool |    1200    |    1210    |      42 K  |      40 K  |
|       from small pool |    2267    |    2279    |     800 K  |     797 K  |
|---------------------------------------------------------------------------|
| Active allocs         |    3467    |    3489    |     842 K  |     838 K  |
|       from large pool |    1200    |    1210    |      42 K  |      40 K  |
|       from small pool |    2267    |    2279    |     800 K  |     797 K  |
|---------------------------------------------------------------------------|
| GPU reserved segments |     412    |     412    |     412    |       0    |
|       from large pool |     392    |     392    |     392    |       0    |
|       from small pool |      20    |      20    |      20    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |      88    |     120    |   20000    |   19912    |
|       from large pool |      80    |     110    |   15000    |   14920    |
|       from small pool |       8    |      10    |    5000    |    4992    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

ABBREVIATED_OLD = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 1                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 0         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  12800 MiB |  13001 MiB |  50000 MiB |  37200 MiB |
|---------------------------------------------------------------------------|
| Active memory         |  12800 MiB |  13001 MiB |  50000 MiB |  37200 MiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  14336 MiB |  14336 MiB |  14336 MiB |      0 B   |
|---------------------------------------------------------------------------|
| Non-releasable memory | 524287 B   |    819 KiB |   1024 MiB |   1023 MiB |
|---------------------------------------------------------------------------|
| Allocations           |     950    |    1020    |   41022    |   40072    |
|---------------------------------------------------------------------------|
| Active allocs         |     950    |    1020    |   41022    |   40072    |
|---------------------------------------------------------------------------|
| GPU reserved segments |      30    |      30    |      30    |       0    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       4    |       9    |    2001    |    1997    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
"""

OTHER_FORMATS = {
    "nvidia_smi_csv": b"index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n"
                      b"0, NVIDIA L40S, 46068 MiB, 9123 MiB, 36346 MiB\n",
    "nvidia_smi_apps": b"pid, process_name, used_gpu_memory [MiB]\n",
    "pod": b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vllm-0"}, "status": {"containerStatuses": []}}',
    "alert": b'{"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "pager", "alerts": []}',
    "vllm_log": b"INFO 03-11 14:02:31 [api_server.py:1090] vLLM API server version 0.8.5.post1\n",
    "metrics": b"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.93\n",
    "prometheus_api": b'{"status":"success","data":{"resultType":"vector","result":[]}}',
}


def _parse(data: bytes, display: str = "torch/memory_stats.json") -> list:
    ctx = ParseContext(times=default_reference())
    return list(memory_stats.parse(InputFile(display=display, path=None, data=data), ctx))


# ---------------------------------------------------------------------------------- sniff


@pytest.mark.parametrize("data", [FLAT.encode(), SUMMARY.encode(), ABBREVIATED_OLD.encode(),
                                  json.dumps({"device": 0, "memory_stats": STATS}).encode(),
                                  json.dumps([STATS, STATS]).encode()])
def test_sniff_claims_memory_stats(data: bytes) -> None:
    assert memory_stats.sniff(data, "x") >= 50


@pytest.mark.parametrize("name", sorted(OTHER_FORMATS))
def test_sniff_rejects_other_formats(name: str) -> None:
    assert memory_stats.sniff(OTHER_FORMATS[name], "x") == 0


@pytest.mark.parametrize("data", [FLAT.encode(), SUMMARY.encode()])
def test_other_parsers_do_not_claim_memory_stats(data: bytes) -> None:
    for mod in (nvidia_smi, kubernetes, alertmanager):
        assert mod.sniff(data, "x") == 0, mod.NAME


def test_a_log_that_prints_a_summary_is_left_to_the_log_parser() -> None:
    log = "".join(f"INFO 03-11 14:02:{i:02d} [gpu_worker.py:1] step\n" for i in range(10)) + SUMMARY
    assert 0 == memory_stats.sniff(log.encode(), "x") < 50


def test_sniff_never_raises_on_random_bytes() -> None:
    rng = random.Random(99)
    for size in (0, 1, 3, 64, 4096):
        for _ in range(20):
            blob = bytes(rng.randrange(256) for _ in range(size))
            assert memory_stats.sniff(blob, "x") == 0
    assert memory_stats.sniff(b"{ not json but mentions nothing", "x") == 0
    assert memory_stats.sniff(b"plain words\n", "x") == 0


# ---------------------------------------------------------------------------------- JSON


def test_flat_dump_numbers() -> None:
    (e,) = _parse(FLAT.encode())
    assert e.kind == Kind.MEMORY_STATS.value
    assert e.line is None and e.time is None
    f = e.fields
    assert f["device"] is None
    assert f["allocated_bytes"] == 79580351765
    assert f["reserved_bytes"] == 83307266048
    assert f["active_bytes"] == 79580351765
    assert f["inactive_split_bytes"] == 1833963745
    assert f["requested_bytes"] == 79580350765
    assert f["peak_allocated_bytes"] == 81609622281
    assert f["peak_reserved_bytes"] == 83307266048
    assert f["num_alloc_retries"] == 3
    assert f["num_ooms"] == 1
    assert f["allocation_count"] == 3467
    assert f["segment_count"] == 412
    assert f["approximate"] is False


def test_missing_keys_are_none() -> None:
    (e,) = _parse(b'{"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 4096}')
    assert e.fields["allocated_bytes"] == 1024 and e.fields["reserved_bytes"] == 4096
    for key in ("requested_bytes", "num_ooms", "num_alloc_retries", "peak_reserved_bytes"):
        assert e.fields[key] is None, key


def test_docstring_spelling_allocated_is_accepted() -> None:
    (e,) = _parse(b'{"allocated.all.current": 17, "reserved_bytes.all.current": 4096}')
    assert e.fields["allocation_count"] == 17


def test_nested_under_a_key_with_device_and_time() -> None:
    doc = {"device": 3, "time": "2025-03-11T15:02:33.5+01:00", "memory_stats": STATS}
    (e,) = _parse(json.dumps(doc).encode())
    assert e.fields["device"] == 3
    assert e.time == datetime(2025, 3, 11, 14, 2, 33, 500000, tzinfo=timezone.utc)
    assert e.fields["reserved_bytes"] == 83307266048


def test_stats_key_and_unix_timestamp() -> None:
    (e,) = _parse(json.dumps({"timestamp": 1741701753.25, "stats": STATS}).encode())
    assert e.time == datetime(2025, 3, 11, 14, 2, 33, 250000, tzinfo=timezone.utc)


def test_list_of_dumps_one_per_device_with_lines() -> None:
    doc = [{"device": i, "memory_stats": {**STATS, "num_ooms": i}} for i in range(2)]
    data = json.dumps(doc, indent=2).encode()
    ev = _parse(data)
    assert [e.fields["device"] for e in ev] == [0, 1]
    assert [e.fields["num_ooms"] for e in ev] == [0, 1]
    lines = data.decode().splitlines()
    for e in ev:
        assert '"reserved_bytes.all.current"' in lines[e.line - 1]


def test_dict_keyed_by_device() -> None:
    doc = {"cuda:0": STATS, "cuda:1": {**STATS, "reserved_bytes.all.current": 1}}
    ev = _parse(json.dumps(doc).encode())
    assert [(e.fields["device"], e.fields["reserved_bytes"]) for e in ev] == [(0, 83307266048), (1, 1)]


def test_nested_dict_form() -> None:
    nested = {"allocated_bytes": {"all": {"current": 10, "peak": 20}},
              "reserved_bytes": {"all": {"current": 30, "peak": 40}}, "num_ooms": 2}
    (e,) = _parse(json.dumps({"device": 0, "memory_stats": nested}).encode())
    assert (e.fields["allocated_bytes"], e.fields["peak_reserved_bytes"], e.fields["num_ooms"]) == (10, 40, 2)


def test_json_lines_with_a_cut_last_line() -> None:
    row = {"ts": "2025-03-11T14:00:00Z", "device": 0, "memory_stats": STATS}
    data = (json.dumps(row) + "\n" + json.dumps({**row, "ts": "2025-03-11T14:05:00Z"}) + "\n"
            + json.dumps(row)[:200] + "\n").encode()
    ev = _parse(data)
    assert [e.line for e in ev] == [1, 2]
    assert ev[1].time == datetime(2025, 3, 11, 14, 5, tzinfo=timezone.utc)


@pytest.mark.parametrize("cut", [300, FLAT.index('"max_split_size"'), len(FLAT) - 2])
def test_truncated_json_is_bad_input(cut: int) -> None:
    with pytest.raises(BadInput) as err:
        _parse(FLAT.encode()[:cut])
    assert str(err.value).startswith("torch/memory_stats.json: ")


def test_truncated_json_between_tokens_says_truncated() -> None:
    with pytest.raises(BadInput, match="truncated"):
        _parse(FLAT.encode()[:FLAT.index('"max_split_size"')])


def test_json_without_stats_is_bad_input() -> None:
    with pytest.raises(BadInput):
        _parse(b'{"hello": "world"}')


# ---------------------------------------------------------------------------------- summary text


def test_summary_values_are_floored_and_approximate() -> None:
    (e,) = _parse(SUMMARY.encode(), display="torch/summary.txt")
    assert e.kind == Kind.MEMORY_STATS.value
    assert e.line == 2                                    # the "PyTorch CUDA memory summary" line
    assert e.time is None
    f = e.fields
    assert f["approximate"] is True
    assert f["device"] == 0
    assert f["num_ooms"] == 1 and f["num_alloc_retries"] == 3
    # Floor of the exact bytes to whole MiB: 79580351765 B prints as 75893 MiB.
    assert f["allocated_bytes"] == 75893 * MiB <= STATS["allocated_bytes.all.current"]
    assert STATS["allocated_bytes.all.current"] - f["allocated_bytes"] < MiB
    assert f["peak_allocated_bytes"] == 77829 * MiB
    assert f["active_bytes"] == 75893 * MiB
    assert f["requested_bytes"] == 75893 * MiB
    assert f["reserved_bytes"] == 79448 * MiB == STATS["reserved_bytes.all.current"]
    assert f["peak_reserved_bytes"] == 79448 * MiB
    assert f["inactive_split_bytes"] == 1749 * MiB
    assert f["allocation_count"] == 3467 and f["segment_count"] == 412


def test_summary_and_json_share_field_names() -> None:
    (from_json,) = _parse(FLAT.encode())
    (from_text,) = _parse(SUMMARY.encode())
    assert set(from_json.fields) == set(from_text.fields)


def test_abbreviated_summary_with_small_units() -> None:
    (e,) = _parse(ABBREVIATED_OLD.encode())
    f = e.fields
    assert f["device"] == 1 and f["num_ooms"] == 0
    assert f["allocated_bytes"] == 12800 * MiB
    assert f["reserved_bytes"] == 14336 * MiB
    assert f["inactive_split_bytes"] == 524287
    assert f["peak_inactive_split_bytes"] == 819 * 1024
    assert f["requested_bytes"] is None                   # no "Requested memory" row
    assert f["allocation_count"] == 950


def test_summary_counts_with_k_prefix() -> None:
    assert memory_stats.parse_summary_lines(SUMMARY.splitlines())["allocation_count"] == 3467
    lines = SUMMARY.replace("| Allocations           |    3467    |", "| Allocations           |     842 K  |")
    assert memory_stats.parse_summary_lines(lines.splitlines())["allocation_count"] == 842000


def test_two_summaries_in_one_file() -> None:
    text = SUMMARY + ABBREVIATED_OLD
    ev = _parse(text.encode())
    assert [e.fields["device"] for e in ev] == [0, 1]
    assert [e.line for e in ev] == [2, len(SUMMARY.splitlines()) + 2]


def test_summary_inside_a_log_with_worker_prefixes() -> None:
    prefix = "(VllmWorker rank=0 pid=4121) "
    lines = ["INFO 03-11 14:02:31 [gpu_worker.py:210] dumping allocator state"]
    lines += [prefix + ln for ln in SUMMARY.splitlines()]
    lines += ["ERROR 03-11 14:02:32 [core.py:400] EngineCore encountered a fatal error."]
    fields = memory_stats.parse_summary_lines(lines)
    assert fields["reserved_bytes"] == 79448 * MiB and fields["approximate"] is True
    # The log parser finds the same table inside the log, with its worker prefixes.
    from triage.evidence import logs

    src = InputFile(display="server.log", path=None, data="\n".join(lines).encode())
    found = [e for e in logs.parse(src, ParseContext(times=default_reference())) if e.kind == "memory_stats"]
    assert len(found) == 1 and found[0].fields["reserved_bytes"] == 79448 * MiB


def test_parse_summary_lines_without_a_table() -> None:
    assert memory_stats.parse_summary_lines(["INFO nothing here", "| a | b |"]) is None
    assert memory_stats.parse_summary_lines([]) is None


def test_text_without_summary_is_bad_input() -> None:
    with pytest.raises(BadInput):
        _parse(b"just a log line\n")
