"""Hostile and damaged inputs end in a verdict or one clear line, at a bounded cost.

Each test is an attack seen in review: unbounded nesting, non-finite and 4,301-digit numbers,
dates outside any calendar a log uses, corrupt gzip, a gzip bomb and a directory of thousands
of unrelated files. Real files, the real CLI; no mocks.
"""
from __future__ import annotations

import gzip
import json
import re
import time
import zlib
from pathlib import Path

import pytest

from triage.cli import main
from triage.errors import ExitCode
from triage.evidence import load_evidence

from .conftest import SAMPLES

OOM_LINE = "ERROR 03-12 14:17:05 [core.py:343] ValueError: No available memory for the cache blocks.\n"
BIG = "9" * 4301          # one digit past int()'s limit for a string


def _one_clear_line(result, *words: str) -> str:
    assert result.exit_code == ExitCode.BAD_INPUT, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "internal error" not in lines[0] and "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _verdict(result) -> dict:
    """A verdict was reached (exit 0 or 3) with --json: no traceback, no internal error, strict JSON."""
    assert result.exit_code in (ExitCode.OK, ExitCode.UNKNOWN), (result.exit_code, result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert not re.search(r"\b(?:-?Infinity|NaN)\b", result.stdout), result.stdout
    return json.loads(result.stdout)


# --- nesting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json_named_alone_is_one_clear_line(runner, tmp_path, depth):
    path = tmp_path / "a.log"
    path.write_text("[" * depth + "\n")
    _one_clear_line(runner.invoke(main, ["classify", str(path)]), "a.log", "nested deeper than")


def test_deeply_nested_json_in_a_bundle_is_a_warning_and_the_rest_is_read(runner, tmp_path):
    (tmp_path / "a.log").write_text("[" * 100_000 + "\n")
    (tmp_path / "b.json").write_text('{"a":' * 5000 + "1" + "}" * 5000)
    (tmp_path / "server.log").write_text(OOM_LINE)
    result = runner.invoke(main, ["classify", str(tmp_path), "--json"])
    assert _verdict(result)["verdict"]["class"] == "startup"
    assert "a.log: skipped (unusable JSON: JSON nested deeper than" in result.stderr
    assert "b.json: skipped (unusable JSON" in result.stderr


def test_a_deeply_nested_json_log_line_is_read_as_text(runner, tmp_path):
    path = tmp_path / "server.log"
    path.write_text('{"message": "starting", "level": "info"}\n{"message": "hello", "extra": ' + "[" * 5000 + "\n"
                    + json.dumps({"message": OOM_LINE.strip(), "level": "error"}) + "\n")
    assert _verdict(runner.invoke(main, ["classify", str(path), "--json"]))["verdict"]["class"] == "startup"


def test_a_deeply_nested_memory_stats_line_is_skipped(runner, tmp_path):
    good = {"device": 0, "allocated_bytes.all.current": 1 << 30, "reserved_bytes.all.current": 2 << 30}
    path = tmp_path / "memory_stats.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n" + '{"x": ' + "[" * 5000 + "\n")
    _verdict(runner.invoke(main, ["classify", str(path), "--json"]))
    assert [s.records for s in load_evidence([str(path)]).sources] == [2]


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "\n", "nested deeper than"),
    ("created: 0000-01-01\n", "year 0 is out of range"),
    (f"fleet_size: {BIG}\n", "more than 4,300 digits"),
    ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nid: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "aliases"),
], ids=["nested", "year-0", "4301-digits", "aliases"])
def test_a_hostile_incident_yaml_is_one_clear_warning_and_the_rest_is_read(runner, tmp_path, text, words):
    # No single source costs the verdict: the bundle is read without its incident.yaml.
    (tmp_path / "incident.yaml").write_text(text)
    (tmp_path / "server.log").write_text(OOM_LINE)
    for command in (["classify"], ["timeline", "--json"]):
        result = runner.invoke(main, [*command, str(tmp_path)])
        assert result.exit_code == ExitCode.OK, (command, result.stderr)
        warned = [line for line in result.stderr.splitlines() if "incident.yaml" in line]
        assert len(warned) == 1 and words in warned[0] and "Traceback" not in result.stderr, result.stderr
    assert _verdict(runner.invoke(main, ["classify", str(tmp_path), "--json"]))["verdict"]["class"] == "startup"


# --- numbers ---------------------------------------------------------------------------------

def test_an_infinite_xid_counter_is_dropped_with_a_note(runner, tmp_path):
    path = tmp_path / "x.prom"
    path.write_text('DCGM_FI_DEV_XID_ERRORS{gpu="0"} Inf\n')
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "x.prom: 1 unreadable number dropped (e.g. 'inf')" in result.stderr


def test_non_finite_framebuffer_readings_are_dropped(runner, tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_text('DCGM_FI_DEV_FB_USED{gpu="0"} NaN\nDCGM_FI_DEV_FB_FREE{gpu="0"} +Inf\n'
                    'DCGM_FI_DEV_FB_USED{gpu="1"} 81000\nDCGM_FI_DEV_FB_FREE{gpu="1"} 500\n')
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "unreadable numbers dropped" in result.stderr
    memory = [e for e in load_evidence([str(path)]).items if e.kind == "gpu_memory"]
    assert [(e.fields["gpu"], e.fields["used_bytes"]) for e in memory] == [("1", 81000 << 20)]   # GPU 1 is all there


def test_json_output_never_carries_infinity(runner, tmp_path):
    path = tmp_path / "server.log"
    path.write_text("INFO 03-12 14:17:03 [api_server.py:1] args: Namespace(model='m', "
                    "gpu_memory_utilization=1e999, max_num_seqs=nan)\n" + OOM_LINE)
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "Infinity" not in result.stdout and "unreadable number" in result.stderr


@pytest.mark.parametrize("line", [
    f'Traceback (most recent call last):\n  File "y", line {BIG}, in f\nRuntimeError: CUDA error: out of memory\n',
    f"(EngineCore_DP0 pid={BIG}) INFO 03-12 14:17:03 [core.py:1] starting\n",
    f"[rank{BIG}]: RuntimeError: CUDA error: out of memory\n",
    f"INFO 03-12 14:17:03 [scheduler.py:1] max_total_num_tokens={BIG}\n",
    f"ERROR 03-12 14:17:05 [core.py:1] max seq len ({BIG}) is larger than the maximum number of tokens that "
    f"can be stored in KV cache ({BIG})\n",
    "INFO 03-12 14:17:03 [metrics.py:1] Avg prompt throughput: 5135..4 tokens/s, Running: 3 reqs, "
    "GPU KV cache usage: 9.5%, CPU KV cache usage: 0.0%.\n",
    f"INFO 03-12 14:17:03 [worker.py:1] Loading model weights took {'9' * 400}.5 GB\n",
    f"kernel: Out of memory: Killed process {BIG} (python3) total-vm:1kB, anon-rss:{BIG}kB\n",
], ids=["frame-line", "pid", "rank", "sglang-tokens", "max-seq-len", "stats-5135..4", "weights", "oom-kill"])
def test_unreadable_numbers_in_log_lines_are_dropped(runner, tmp_path, line):
    path = tmp_path / "server.log"
    path.write_text(line + OOM_LINE)
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "unreadable number" in result.stderr


def test_a_4301_digit_engine_version(runner, tmp_path):
    path = tmp_path / "server.log"
    path.write_text(f"INFO 03-12 14:17:00 [api_server.py:1] vLLM API server version 0.{BIG}.1\n"
                    "ERROR 03-12 14:17:05 [core.py:343] torch.OutOfMemoryError: CUDA out of memory. Tried to "
                    "allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free.\n")
    _verdict(runner.invoke(main, ["classify", str(path), "--json"]))


def test_a_memory_summary_with_4301_digit_counts(runner, tmp_path):
    summary = (Path(__file__).parent / "real_gpu/h100/oom-simple/memory_summary.txt").read_text()
    path = tmp_path / "memory_summary.txt"
    path.write_text(re.sub(r"CUDA OOMs: +\d+", f"CUDA OOMs: {BIG}", summary))
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "unreadable number" in result.stderr


def test_a_4301_digit_number_in_json_is_dropped(runner, tmp_path):
    path = tmp_path / "memory_stats.json"
    path.write_text('{"allocated_bytes.all.current": 1073741824, "reserved_bytes.all.current": ' + BIG + "}")
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "memory_stats.json: 1 unreadable number dropped" in result.stderr
    [record] = load_evidence([str(path)]).items
    assert record.fields["allocated_bytes"] == 1 << 30 and record.fields["reserved_bytes"] is None


def test_a_recovery_step_that_lasted_400_digits_of_seconds(runner, tmp_path):
    bundle = SAMPLES / "prefix-cache-oom-b"
    (tmp_path / "incident.yaml").write_bytes((bundle / "incident.yaml").read_bytes())
    actions = (bundle / "actions.jsonl").read_text().replace('"duration_s":0.237', '"duration_s":' + "9" * 400, 1)
    (tmp_path / "actions.jsonl").write_text(actions)
    for command in (["timeline"], ["postmortem", "-o", "-"]):
        result = runner.invoke(main, [*command, str(tmp_path)])
        assert result.exit_code == 0, result.stderr
        assert "internal error" not in result.stderr


def test_nan_and_infinity_in_memory_stats_are_dropped(runner, tmp_path):
    path = tmp_path / "memory_stats.json"
    path.write_text('{"allocated_bytes.all.current": NaN, "reserved_bytes.all.current": 1e999, '
                    '"reserved_bytes.all.peak": 2147483648, "time": -Infinity}')
    result = runner.invoke(main, ["classify", str(path), "--json"])
    _verdict(result)
    assert "3 unreadable numbers dropped" in result.stderr


def test_a_card_larger_than_the_sizing_table_still_gets_advice(runner, tmp_path):
    log = (SAMPLES / "burst-long-prompts-v0/logs/vllm.log").read_text()
    path = tmp_path / "vllm.log"
    path.write_text(re.sub(r"total capacity of [0-9.]+ GiB", "total capacity of 99999999.00 GiB", log))
    out = _verdict(runner.invoke(main, ["classify", str(path), "--json"]))
    assert out["verdict"]["class"] == "burst"


# --- dates -----------------------------------------------------------------------------------

def test_created_out_of_range_is_a_warning(runner, tmp_path):
    (tmp_path / "incident.yaml").write_text("created: '9999-12-31T23'\n")
    (tmp_path / "server.log").write_text(OOM_LINE)
    result = runner.invoke(main, ["classify", str(tmp_path), "--json"])
    _verdict(result)
    assert "created: '9999-12-31T23' is not a time" in result.stderr
    timeline = runner.invoke(main, ["timeline", str(tmp_path)])
    assert timeline.exit_code == 0 and "9999-12-31T23" in timeline.stdout, timeline.stderr


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59-05:00", "9999-12-31T20:00:00-14:00", "9999-12-31T23:59:59"])
def test_log_and_alert_times_at_the_end_of_the_calendar(runner, tmp_path, stamp):
    (tmp_path / "server.log").write_text(f"[{stamp}] {OOM_LINE}")
    alert = json.loads((SAMPLES / "prefix-cache-oom-b/alerts/2024-10-17T14-48-06Z.json").read_text())
    for item in alert["alerts"]:
        item["startsAt"] = stamp
    (tmp_path / "alert.json").write_text(json.dumps(alert))
    (tmp_path / "notes.jsonl").write_text(json.dumps({"time": stamp, "recorded_at": stamp, "text": "x"}) + "\n")
    (tmp_path / "incident.yaml").write_text("id: x\n")
    _verdict(runner.invoke(main, ["classify", str(tmp_path), "--json"]))
    timeline = runner.invoke(main, ["timeline", str(tmp_path), "--json"])
    assert timeline.exit_code == 0, timeline.stderr
    assert "internal error" not in timeline.stderr


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00"])
def test_a_note_dated_past_the_calendar_is_one_clear_line(runner, tmp_path, at):
    (tmp_path / "incident.yaml").write_text("id: x\n")
    _one_clear_line(runner.invoke(main, ["note", str(tmp_path), "restarted", "--at", at]), "--at", "not a time")
    assert not (tmp_path / "notes.jsonl").exists()


# --- gzip ------------------------------------------------------------------------------------

def _corruptions() -> dict[str, bytes]:
    """A truncated stream, a bad CRC, garbage after the magic, and a stream zlib itself rejects."""
    raw = "".join(f"INFO 03-12 14:{i // 60 % 60:02d}:{i % 60:02d} [core.py:1] request {i} done\n"
                  for i in range(4000)).encode()
    good = gzip.compress(raw + OOM_LINE.encode())
    crc = bytearray(good)
    crc[-8] ^= 0xFF
    out = {"truncated": good[: len(good) // 2], "crc": bytes(crc), "garbage": b"\x1f\x8b\x08\x00" + b"garbage" * 50}
    for i in range(20, len(good) - 20):     # the first bit flip that breaks the deflate stream itself
        flipped = bytearray(good)
        flipped[i] ^= 0x10
        try:
            zlib.decompress(bytes(flipped[10:]), -15)
        except zlib.error:
            out["zlib-error"] = bytes(flipped)
            break
    return out


@pytest.mark.parametrize("damage", ["truncated", "crc", "garbage", "zlib-error"])
def test_corrupt_gzip_is_one_clear_line_naming_the_file(runner, tmp_path, damage):
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(_corruptions()[damage])
    _one_clear_line(runner.invoke(main, ["classify", str(path)]), "vllm.log.gz", "cannot read")


def test_corrupt_gzip_in_a_bundle_is_a_warning(runner, tmp_path):
    for name, blob in _corruptions().items():
        (tmp_path / f"{name}.log.gz").write_bytes(blob)
    (tmp_path / "server.log").write_text(OOM_LINE)
    result = runner.invoke(main, ["classify", str(tmp_path), "--json"])
    assert _verdict(result)["verdict"]["class"] == "startup"
    for name in ("truncated", "crc", "garbage", "zlib-error"):
        assert f"{name}.log.gz: " in result.stderr and "corrupt gzip" in result.stderr


# --- bounded cost ----------------------------------------------------------------------------

def _bomb(path: Path, mib: int) -> None:
    """Access lines repeated: tiny compressed, `mib` MiB expanded (a 31 MB file of them is 10 GiB)."""
    line = b'INFO:     10.0.0.1:5555 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    block = line * ((1 << 20) // len(line))
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for _ in range(mib):
            fh.write(block)


def test_a_gzip_bomb_stops_at_the_cap_with_how_to_raise_it(runner, tmp_path, monkeypatch):
    path = tmp_path / "access.log.gz"
    _bomb(path, 64)
    monkeypatch.setenv("TRIAGE_MAX_INPUT_BYTES", "8MiB")
    started = time.monotonic()
    line = _one_clear_line(runner.invoke(main, ["classify", str(path)]), "access.log.gz", "8.00 MiB")
    assert time.monotonic() - started < 10
    assert "--max-input-bytes" in line and "TRIAGE_MAX_INPUT_BYTES" in line
    # raised on the command line, the same file is read to the end
    result = runner.invoke(main, ["classify", str(path), "--max-input-bytes", "128MiB"])
    assert result.exit_code in (ExitCode.OK, ExitCode.UNKNOWN), result.stderr


def test_a_gzip_bomb_is_refused_by_its_ratio_before_the_cap(runner, tmp_path):
    path = tmp_path / "access.log.gz"
    _bomb(path, 64)                 # 330-fold, like the 31 MB file that expands to 10 GiB
    started = time.monotonic()
    line = _one_clear_line(runner.invoke(main, ["classify", str(path)]), "access.log.gz", "100-fold")
    assert time.monotonic() - started < 20
    assert "--max-input-bytes" in line
    # a limit given explicitly vouches for the file: it is read to the end
    result = runner.invoke(main, ["classify", str(path), "--max-input-bytes", "128MiB"])
    assert result.exit_code in (ExitCode.OK, ExitCode.UNKNOWN), result.stderr


def test_a_gzip_bomb_in_a_bundle_is_a_warning(runner, tmp_path, monkeypatch):
    _bomb(tmp_path / "access.log.gz", 16)
    (tmp_path / "server.log").write_text(OOM_LINE)
    monkeypatch.setenv("TRIAGE_MAX_INPUT_BYTES", "4MiB")
    result = runner.invoke(main, ["classify", str(tmp_path), "--json"])
    assert _verdict(result)["verdict"]["class"] == "startup"
    assert "access.log.gz: decompresses to more than 4.00 MiB" in result.stderr


@pytest.mark.parametrize("value", ["abc", "-5", "0"])
def test_an_unreadable_input_cap_is_one_clear_line(runner, tmp_path, monkeypatch, value):
    path = tmp_path / "server.log"
    path.write_text(OOM_LINE)
    monkeypatch.setenv("TRIAGE_MAX_INPUT_BYTES", value)
    _one_clear_line(runner.invoke(main, ["classify", str(path)]), "TRIAGE_MAX_INPUT_BYTES", "not a size")


def test_a_directory_of_thousands_of_files_is_summarised(runner, tmp_path):
    for i in range(3000):
        (tmp_path / f"f{i:05d}.txt").write_text(f"hello {i}\n")
    for i in range(8):
        (tmp_path / f"z{i}.bin").write_bytes(b"\x00\x01" * 100)
    (tmp_path / "server.log").write_text(OOM_LINE)
    result = runner.invoke(main, ["classify", str(tmp_path)])
    assert result.exit_code == ExitCode.OK, result.stderr
    warnings = result.stderr.strip().splitlines()
    assert warnings == [
        "triage: warning: 8 files (e.g. z0.bin, z1.bin, z2.bin, …): skipped (not an evidence file)",
        "triage: warning: 3,000 files (e.g. f00000.txt, f00001.txt, f00002.txt, …): skipped (nothing recognised in them)",
    ]
    assert len(result.stdout) < 4000 and "f00042.txt" not in result.stdout
    # a few such files are still named one by one, as before
    few = tmp_path / "few"
    few.mkdir()
    (few / "empty.log").write_text("")
    (few / "notes.txt").write_text("nothing to see\n")
    (few / "server.log").write_text(OOM_LINE)
    result = runner.invoke(main, ["classify", str(few)])
    assert result.exit_code == ExitCode.OK
    assert "empty.log: skipped (empty file)" in result.stderr
    assert "notes.txt (log, 0)" in result.stdout.replace("\n", " ")
