"""Bad input gets one clear line naming the file and exit 1: never a traceback, never a verdict."""
from __future__ import annotations

import os

import pytest

from triage.cli import main
from triage.errors import ExitCode


def _assert_one_clear_line(result, name: str, words: str):
    assert result.exit_code == ExitCode.BAD_INPUT, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert name in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_binary_file(runner, tmp_path):
    path = tmp_path / "core.bin.log"
    path.write_bytes(os.urandom(4096) + b"\x00" * 64)
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path)]), "core.bin.log", "binary")


def test_truncated_json(runner, tmp_path):
    path = tmp_path / "memory_stats.json"
    path.write_text('{"allocated_bytes.all.current": 1073741824, "reserved_bytes.all.current": 21474')
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path), "--json"]), "memory_stats.json", "truncated JSON")


def test_truncated_json_of_unknown_shape(runner, tmp_path):
    path = tmp_path / "pod.json"
    path.write_text('{"apiVersion": "v1", "kind": "Pod", "status": {"containerStatuses": [{"name": "vllm", "lastSta')
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path)]), "pod.json", "JSON")


def test_empty_file(runner, tmp_path):
    path = tmp_path / "empty.log"
    path.write_text("")
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path)]), "empty.log", "empty")


def test_50_mb_single_line(runner, tmp_path):
    path = tmp_path / "one-line.log"
    with open(path, "wb") as fh:
        chunk = b"A" * (1 << 20)
        for _ in range(50):
            fh.write(chunk)
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path)]), "one-line.log", "longer than")


def test_directory_of_unrelated_files(runner, tmp_path):
    (tmp_path / "notes.md").write_text("# meeting notes\n")
    (tmp_path / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(512))
    (tmp_path / "script.py").write_text("print('hello')\n")
    _assert_one_clear_line(runner.invoke(main, ["classify", str(tmp_path)]), str(tmp_path), "no evidence files")


def test_file_that_is_not_readable(runner, tmp_path, monkeypatch):
    path = tmp_path / "secret.log"
    path.write_text("INFO 03-12 14:00:00 [core.py:1] x\n")
    path.chmod(0)
    if os.geteuid() == 0:
        # root reads anything: make the permission check report what it reports for other users.
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path)]), "secret.log", "not readable")


def test_missing_path(runner, tmp_path):
    _assert_one_clear_line(runner.invoke(main, ["classify", str(tmp_path / "nope.log")]), "nope.log", "no such file")


def test_wrong_kind_of_file_named_explicitly(runner, tmp_path):
    path = tmp_path / "README.md"
    path.write_text("# hello\n")
    _assert_one_clear_line(runner.invoke(main, ["classify", str(path)]), "README.md", "not evidence")


def test_bad_file_inside_a_bundle_is_skipped_with_a_warning(runner, tmp_path):
    (tmp_path / "garbage.log").write_bytes(os.urandom(2048) + b"\x00")
    (tmp_path / "server.log").write_text("ValueError: No available memory for the cache blocks.\n")
    result = runner.invoke(main, ["classify", str(tmp_path), "--json"])
    assert result.exit_code == 0
    assert "garbage.log: skipped (binary" in result.stderr


@pytest.mark.parametrize("blob", [b"\xff\xfe\xfa" * 100, b"{", b"[1, 2", b"\x1f\x8b\x08\x00garbage"])
def test_garbage_never_gives_a_traceback(runner, tmp_path, blob):
    path = tmp_path / "x.log"
    path.write_bytes(blob)
    result = runner.invoke(main, ["classify", str(path)])
    assert result.exit_code in (ExitCode.BAD_INPUT, ExitCode.UNKNOWN)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_truncated_gz_inside_a_bundle_keeps_what_was_read(runner, tmp_path):
    import gzip

    lines = b"".join(b"INFO 03-12 14:00:00 [core.py:1] request %d done\n" % i for i in range(60000))
    blob = gzip.compress(lines + b"ValueError: No available memory for the cache blocks.\n")
    (tmp_path / "server.log.gz").write_bytes(blob[: len(blob) * 3 // 4])
    (tmp_path / "other.log").write_text("ValueError: No available memory for the cache blocks.\n")
    result = runner.invoke(main, ["classify", str(tmp_path), "--json"])
    assert result.exit_code == 0
    assert "server.log.gz: cannot read" in result.stderr and "kept the" in result.stderr
    # ... but named explicitly, a cut file is one clear error
    bad = runner.invoke(main, ["classify", str(tmp_path / "server.log.gz")])
    _assert_one_clear_line(bad, "server.log.gz", "cannot read")


def test_text_encodings_are_not_binary(runner, tmp_path):
    latin1 = tmp_path / "latin1.log"
    latin1.write_bytes(b"INFO 03-12 14:00:00 [core.py:1] model /models/caf\xe9\n"
                       b"ValueError: No available memory for the cache blocks.\n")
    utf16 = tmp_path / "utf16.log"
    utf16.write_text("ValueError: No available memory for the cache blocks.\n", encoding="utf-16")
    bom = tmp_path / "bom.log"
    bom.write_bytes(b"\xef\xbb\xbfERROR 03-12 14:00:00 [core.py:1] ValueError: No available memory for the cache blocks.\n")
    for path in (latin1, utf16, bom):
        result = runner.invoke(main, ["classify", str(path), "--json"])
        assert result.exit_code == 0, (path.name, result.stderr)
    import json

    out = json.loads(runner.invoke(main, ["classify", str(bom), "--json"]).stdout)
    assert out["evidence"][0]["time"] is not None   # the BOM does not hide the line's prefix


def test_a_fifo_is_read_like_a_file(tmp_path):
    import subprocess
    import sys
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "w") as fh:
            fh.write("ValueError: No available memory for the cache blocks.\n")

    writer = threading.Thread(target=feed)
    writer.start()
    proc = subprocess.run([sys.executable, "-m", "triage", "classify", str(fifo), "--json"],
                          capture_output=True, text=True, timeout=60)
    writer.join(5)
    assert proc.returncode == 0, proc.stderr
    assert '"startup"' in proc.stdout
