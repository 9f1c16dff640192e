"""No single source costs the verdict, and one incident per verdict.

Every case runs the real CLI. A source that cannot be read (a wedged or refused --metrics-url, a
broken incident.yaml, a cut JSON or compressed file, one over-long line, a codec that is not
installed, unsafe archive members) is a warning naming it, on stderr and in `facts.inputs[]` with
an `error`, and the verdict is still reached from the rest. A PATH holding several bundles is
classified bundle by bundle.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import socket
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import jsonschema
import pytest

from triage.cli import main
from triage.errors import ExitCode
from triage.paths import verdict_schema_path

from .conftest import SAMPLES

SCHEMA = json.loads(verdict_schema_path().read_text())
OOM_LINE = "ERROR 03-12 14:17:05 [core.py:343] ValueError: No available memory for the cache blocks.\n"
LOG = ("INFO 03-12 14:17:00 [api_server.py:1] vLLM API server version 0.8.5\n"
       "INFO 03-12 14:17:01 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='m'\n" + OOM_LINE)
BROKEN_YAML = 'id: INC-7\ncreated: [2026-03-12\n  title: "x\n'


def _json(result) -> dict:
    assert result.exit_code in (ExitCode.OK, ExitCode.UNKNOWN), (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    return doc


def _input(doc: dict, ending: str) -> dict:
    found = [i for i in doc["facts"]["inputs"] if i["source"].endswith(ending)]
    assert len(found) == 1, doc["facts"]["inputs"]
    return found[0]


def _warning(result, name: str, *words: str) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("triage: warning: ") and name in ln]
    assert lines, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _one_line(result, name: str, words: str) -> None:
    assert result.exit_code == ExitCode.BAD_INPUT, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and words in lines[0], result.stderr
    assert result.stdout == ""


def _bundle(root: Path, files: dict[str, str | bytes], incident: str | None = "id: INC-1\ncreated: 2026-03-12T14:30:00Z\n"
            ) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if incident is not None:
        (root / "incident.yaml").write_text(incident)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


# --- --metrics-url: refused or wedged --------------------------------------------------------

def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Silent:
    """A loopback server that accepts connections and never answers (a wedged vLLM)."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        return self

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                continue

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_wedged_metrics_server_is_a_warning_within_the_timeout(runner, tmp_path, monkeypatch):
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    monkeypatch.setenv("TRIAGE_SCRAPE_TIMEOUT", "1")
    with _Silent() as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        started = time.monotonic()
        result = runner.invoke(main, ["classify", str(log), "--metrics-url", url, "--json"])
        took = time.monotonic() - started
    assert took < 4, took
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    assert "no answer within 1 s" in _input(doc, "/metrics")["error"]
    _warning(result, url, "cannot scrape", "no answer within 1 s")


def test_a_server_that_trickles_its_answer_is_cut_at_the_deadline(runner, tmp_path, monkeypatch):
    import http.server

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    monkeypatch.setenv("TRIAGE_SCRAPE_TIMEOUT", "1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        started = time.monotonic()
        result = runner.invoke(main, ["classify", str(log), "--metrics-url", url, "--json"])
        assert time.monotonic() - started < 4
    finally:
        server.shutdown()
    assert _json(result)["verdict"]["class"] == "startup"
    _warning(result, url, "no answer within 1 s")


def test_the_default_scrape_timeout_is_a_few_seconds():
    from triage.evidence import SCRAPE_TIMEOUT_S, scrape

    assert 1 <= SCRAPE_TIMEOUT_S <= 10
    with _Silent() as server:
        started = time.monotonic()
        live = scrape(f"http://127.0.0.1:{server.port}/metrics")
        assert time.monotonic() - started < SCRAPE_TIMEOUT_S + 2
    assert live.error and "no answer" in live.error


def test_a_refused_metrics_url_is_a_warning(runner, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    url = f"http://127.0.0.1:{_closed_port()}/metrics"
    result = runner.invoke(main, ["classify", str(log), "--metrics-url", url, "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    assert "connection refused" in _input(doc, "/metrics")["error"]
    _warning(result, url, "cannot scrape: connection refused")
    # with nothing else to read, it is the one clear error it was
    _one_line(runner.invoke(main, ["classify", "--metrics-url", url]), url, "connection refused")


# --- incident.yaml with a syntax error ---------------------------------------------------------

def test_a_broken_incident_yaml_is_a_warning_with_line_and_column(runner, tmp_path):
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG}, incident=BROKEN_YAML)
    result = runner.invoke(main, ["classify", str(root), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    line = _warning(result, "incident.yaml", "invalid YAML at line 3, column 8")
    assert "expected ',' or ']'" in line
    entry = _input(doc, "incident.yaml")
    assert entry["parser"] == "incident" and entry["records"] == 0 and "line 3, column 8" in entry["error"]
    human = runner.invoke(main, ["classify", str(root)])
    assert human.exit_code == ExitCode.OK and "STARTUP" in human.stdout
    _warning(human, "incident.yaml", "line 3, column 8")


def test_timeline_and_postmortem_read_a_bundle_with_a_broken_incident_yaml(runner, tmp_path):
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG}, incident=BROKEN_YAML)
    timeline = runner.invoke(main, ["timeline", str(root), "--json"])
    assert timeline.exit_code == ExitCode.OK, timeline.stderr
    assert json.loads(timeline.stdout)["events"]
    _warning(timeline, "incident.yaml", "line 3, column 8")
    human = runner.invoke(main, ["timeline", str(root)])
    assert human.exit_code == ExitCode.OK and "line 3, column 8" in " ".join(human.stdout.split())
    out = tmp_path / "pm.md"
    postmortem = runner.invoke(main, ["postmortem", str(root), "-o", str(out)])
    assert postmortem.exit_code == ExitCode.OK, postmortem.stderr
    assert "line 3, column 8" in out.read_text()


def test_recover_plans_with_a_broken_incident_yaml_and_says_so(runner, tmp_path):
    launch = ("id: INC-1\nlaunch:\n  argv: [vllm, serve, m, --max-model-len, '131072'\n")   # the ] is missing
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG}, incident=launch)
    result = runner.invoke(main, ["recover", str(root), "--json"])
    assert result.exit_code == ExitCode.OK, (result.stdout, result.stderr)
    plan = json.loads(result.stdout)
    assert plan["steps"]
    said = [n for n in plan["notes"] if "could not read" in n]
    assert said and "incident.yaml" in said[0] and "launch" in said[0] and "line 4" in said[0], plan["notes"]
    human = runner.invoke(main, ["recover", str(root)])
    assert human.exit_code == ExitCode.OK and "could not read" in " ".join(human.stdout.split())


# --- damaged files beside a valid log ------------------------------------------------------------

def test_a_truncated_memory_stats_json_beside_a_log(runner, tmp_path):
    stats = json.dumps({"allocated_bytes.all.current": 1 << 30, "reserved_bytes.all.current": 2 << 30,
                        "inactive_split_bytes.all.current": 1 << 20, "num_alloc_retries": 3})
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG, "torch/memory_stats.json": stats[: len(stats) // 2]})
    result = runner.invoke(main, ["classify", str(root), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    assert "truncated JSON" in _input(doc, "memory_stats.json")["error"]
    _warning(result, "torch/memory_stats.json", "truncated JSON")
    # named explicitly beside the log: a warning too, no longer the end of the run
    explicit = runner.invoke(main, ["classify", str(root / "logs/vllm.log"), str(root / "torch/memory_stats.json"),
                                    "--json"])
    assert _json(explicit)["verdict"]["class"] == "startup"
    _warning(explicit, "memory_stats.json", "truncated JSON")
    # alone, it is the one clear line it always was
    _one_line(runner.invoke(main, ["classify", str(root / "torch/memory_stats.json")]), "memory_stats.json",
              "truncated JSON")


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gz_beside_a_log(runner, tmp_path, damage):
    blob = gzip.compress(b"".join(b"INFO 03-12 14:00:%02d [core.py:1] request %d done\n" % (i % 60, i)
                                  for i in range(40000)))
    bad = blob[: len(blob) // 2] if damage == "truncated" else blob[:10] + b"\x00garbage" * 200
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG, "logs/old.log.gz": bad})
    result = runner.invoke(main, ["classify", str(root), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    assert "corrupt gzip data" in _input(doc, "old.log.gz")["error"]
    _warning(result, "logs/old.log.gz", "corrupt gzip data")


def test_one_line_over_the_line_limit_is_skipped_and_the_rest_read(runner, tmp_path):
    from triage.evidence.base import MAX_LINE_BYTES

    path = tmp_path / "vllm.log"
    first = b"INFO 03-12 14:17:00 [api_server.py:1] vLLM API server version 0.8.5\n"
    with open(path, "wb") as fh:
        fh.write(first)
        fh.write(b"DEBUG 03-12 14:17:01 [core.py:1] " + b"A" * (MAX_LINE_BYTES + 1024) + b"\n")
        fh.write(OOM_LINE.encode())
    result = runner.invoke(main, ["classify", str(path), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    assert any(e["line"] == 3 and e["source"].endswith("vllm.log") for e in doc["evidence"]), doc["evidence"]
    _warning(result, "vllm.log", "16 MiB line limit", f"at byte {len(first)})")
    # in a bundle, beside another log, the same
    root = _bundle(tmp_path / "inc", {"logs/other.log": "INFO 03-12 14:10:00 [core.py:1] hello\n"})
    shutil.copy(path, root / "logs" / "vllm.log")
    bundled = runner.invoke(main, ["classify", str(root), "--json"])
    assert _json(bundled)["verdict"]["class"] == "startup"
    _warning(bundled, "logs/vllm.log", "line limit")


# --- other codecs ------------------------------------------------------------------------------

def _zstd(data: bytes) -> bytes:
    try:
        import zstandard        # the `test` extra installs it
    except ImportError:         # Python 3.14+
        from compression import zstd

        return zstd.compress(data)
    return zstandard.ZstdCompressor().compress(data)


CODECS = {
    "bz2": (bz2.compress, "bzip2"),
    "xz": (lzma.compress, "xz"),
    "zst": (_zstd, "zstd"),
}


@pytest.mark.parametrize("ext", sorted(CODECS))
def test_bz2_xz_and_zst_logs_are_read(runner, tmp_path, ext):
    pack, _ = CODECS[ext]
    path = tmp_path / f"vllm.log.{ext}"
    path.write_bytes(pack(LOG.encode()))
    doc = _json(runner.invoke(main, ["classify", str(path), "--json"]))
    assert doc["verdict"]["class"] == "startup"
    assert any(e["line"] == 3 for e in doc["evidence"])
    # by content, not by name
    plain_name = tmp_path / f"renamed-{ext}.txt"
    plain_name.write_bytes(pack(LOG.encode()))
    assert _json(runner.invoke(main, ["classify", str(plain_name), "--json"]))["verdict"]["class"] == "startup"


@pytest.mark.parametrize("ext", sorted(CODECS))
def test_a_damaged_bz2_xz_or_zst_in_a_bundle_is_a_warning(runner, tmp_path, ext):
    pack, name = CODECS[ext]
    blob = pack(os.urandom(1 << 16).hex().encode() + LOG.encode())
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG, f"logs/cut.log.{ext}": blob[: len(blob) // 2]})
    result = runner.invoke(main, ["classify", str(root), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    assert f"corrupt {name} data" in _input(doc, f"cut.log.{ext}")["error"]
    _warning(result, f"cut.log.{ext}", f"corrupt {name} data")
    _one_line(runner.invoke(main, ["classify", str(root / "logs" / f"cut.log.{ext}")]), f"cut.log.{ext}",
              f"corrupt {name} data")


@pytest.mark.parametrize("ext", sorted(CODECS))
def test_every_codec_has_the_gzip_bounds(runner, tmp_path, monkeypatch, ext):
    pack, _ = CODECS[ext]
    line = b'INFO:     10.0.0.1:5555 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    path = tmp_path / f"access.log.{ext}"
    path.write_bytes(pack(line * ((3 << 20) // len(line))))          # 3 MiB expanded
    monkeypatch.setenv("TRIAGE_MAX_INPUT_BYTES", "2MiB")
    _one_line(runner.invoke(main, ["classify", str(path)]), path.name, "decompresses to more than 2.00 MiB")


def test_a_zstd_bomb_is_refused_by_its_ratio(runner, tmp_path):
    line = b'INFO:     10.0.0.1:5555 - "POST /v1/completions HTTP/1.1" 200 OK\n'
    path = tmp_path / "access.log.zst"
    path.write_bytes(_zstd(line * ((64 << 20) // len(line))))       # 64 MiB from a few KiB
    started = time.monotonic()
    _one_line(runner.invoke(main, ["classify", str(path)]), "access.log.zst", "100-fold")
    assert time.monotonic() - started < 20


def test_without_a_zstd_module_a_zst_file_says_what_to_install(runner, tmp_path, monkeypatch):
    root = _bundle(tmp_path / "inc", {"logs/vllm.log": LOG, "logs/old.log.zst": _zstd(LOG.encode())})
    monkeypatch.setitem(sys.modules, "zstandard", None)          # neither the package nor Python 3.14's module
    monkeypatch.setitem(sys.modules, "compression.zstd", None)
    monkeypatch.setitem(sys.modules, "compression", None)
    result = runner.invoke(main, ["classify", str(root), "--json"])
    assert _json(result)["verdict"]["class"] == "startup"
    _warning(result, "logs/old.log.zst", "install oom-triage[zstd]")
    _one_line(runner.invoke(main, ["classify", str(root / "logs/old.log.zst")]), "old.log.zst",
              "install oom-triage[zstd]")


# --- archives ----------------------------------------------------------------------------------

def _tar(path: Path, files: dict[str, bytes], mode: str = "w:gz", extra=()) -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return path


BUNDLE_FILES = {
    "INC-1/incident.yaml": b"id: INC-1\ncreated: 2025-03-12T14:30:00Z\ntimezone: UTC\n",
    "INC-1/logs/vllm.log": LOG.encode(),
    "INC-1/README.md": b"# notes\n",
}


@pytest.mark.parametrize("suffix, mode", [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w"),
                                          (".tar.xz", "w:xz"), (".tar.bz2", "w:bz2")])
def test_a_tar_bundle_is_read_in_place(runner, tmp_path, suffix, mode):
    archive = _tar(tmp_path / f"bundle{suffix}", BUNDLE_FILES, mode)
    result = runner.invoke(main, ["classify", str(archive), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    log = _input(doc, "!INC-1/logs/vllm.log")
    assert log["source"] == f"{archive}!INC-1/logs/vllm.log" and log["records"] > 0
    assert "2025" in log["time_note"] and "incident.yaml" in log["time_note"]   # its incident.yaml dates it
    assert any(e["source"].endswith("!INC-1/logs/vllm.log") and e["line"] == 3 for e in doc["evidence"])
    assert list(tmp_path.iterdir()) == [archive]        # nothing extracted


def test_a_zip_bundle_is_read_in_place(runner, tmp_path):
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in BUNDLE_FILES.items():
            zf.writestr(name, data)
        zf.writestr("INC-1/logs/old.log.gz", gzip.compress(b"INFO 03-12 14:00:00 [core.py:1] hello\n"))
    doc = _json(runner.invoke(main, ["classify", str(archive), "--json"]))
    assert doc["verdict"]["class"] == "startup"
    assert _input(doc, "!INC-1/logs/vllm.log")["records"] > 0
    assert _input(doc, "!INC-1/logs/old.log.gz")["parser"] == "log"


def test_unsafe_archive_members_are_refused_and_the_rest_read(runner, tmp_path):
    link = tarfile.TarInfo("INC-1/logs/link.log")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    fifo = tarfile.TarInfo("INC-1/logs/pipe")
    fifo.type = tarfile.FIFOTYPE
    files = {**BUNDLE_FILES, "../escape.log": OOM_LINE.encode(), "/abs.log": OOM_LINE.encode()}
    archive = _tar(tmp_path / "bundle.tgz", files, extra=(link, fifo))
    result = runner.invoke(main, ["classify", str(archive), "--json"])
    doc = _json(result)
    assert doc["verdict"]["class"] == "startup"
    for name, why in (("../escape.log", "'..'"), ("abs.log", "absolute"), ("link.log", "a link"),
                      ("pipe", "device or FIFO")):
        _warning(result, name, why, "not read")
        assert "not read" in _input(doc, name)["error"]
    assert list(tmp_path.iterdir()) == [archive]


def test_a_cut_tgz_keeps_the_members_before_the_cut(runner, tmp_path):
    big = b"".join(b"INFO 03-12 14:00:%02d [core.py:1] request %d done\n" % (i % 60, i) for i in range(60000))
    archive = _tar(tmp_path / "bundle.tgz", {**BUNDLE_FILES, "INC-1/logs/z-big.log": big})
    blob = archive.read_bytes()
    archive.write_bytes(blob[: len(blob) * 2 // 3])
    result = runner.invoke(main, ["classify", str(archive), "--json"])
    assert _json(result)["verdict"]["class"] == "startup"
    assert "bundle.tgz" in result.stderr and "warning" in result.stderr


def test_an_archive_of_several_bundles_says_to_extract_it(runner, tmp_path):
    files = {**BUNDLE_FILES, "INC-2/incident.yaml": b"id: INC-2\n", "INC-2/logs/vllm.log": LOG.encode()}
    archive = _tar(tmp_path / "two.tar.gz", files)
    _one_line(runner.invoke(main, ["classify", str(archive)]), "two.tar.gz", "extract it first (tar xf")


# --- several bundles: one verdict each -------------------------------------------------------------

HEALTHY = ("INFO 03-12 14:00:00 [api_server.py:1] vLLM API server version 0.8.5\n"
           + "".join('INFO:     10.0.0.1:5555 - "POST /v1/completions HTTP/1.1" 200 OK\n' for _ in range(5))
           + "INFO 03-12 14:00:10 [loggers.py:1] Engine 000: Avg prompt throughput: 120.0 tokens/s, Avg generation "
             "throughput: 40.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.0%, "
             "Prefix cache hit rate: 50.0%\n")


def _fleet(root: Path) -> Path:
    _bundle(root / "2024" / "inc-a", {"logs/vllm.log": LOG}, incident="id: A\ncreated: 2024-03-12T14:30:00Z\n")
    _bundle(root / "inc-b", {"logs/vllm.log": HEALTHY}, incident="id: B\ncreated: 2026-03-12T14:30:00Z\n")
    (root / "README.md").write_text("# incidents\n")
    return root


def test_a_directory_of_bundles_is_classified_bundle_by_bundle(runner, tmp_path, monkeypatch):
    root = _fleet(tmp_path / "fleet")
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(main, ["classify", str(root)])
    assert result.exit_code == ExitCode.OK, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    header = next(line for line in lines if line.startswith("BUNDLE"))
    assert "CLASS" in header and "CONF" in header and "SUMMARY" in header
    assert any(line.startswith("2024/inc-a ") and " startup " in line for line in lines), lines
    assert any(line.startswith("inc-b ") and " no_oom " in line for line in lines), lines


def test_json_lines_one_verdict_per_bundle(runner, tmp_path):
    root = _fleet(tmp_path / "fleet")
    result = runner.invoke(main, ["classify", str(root), "--json"])
    assert result.exit_code == ExitCode.OK, result.stderr
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    for doc in docs:
        jsonschema.validate(doc, SCHEMA)
    assert [(d["bundle"], d["verdict"]["class"]) for d in docs] == [
        (str(root / "2024" / "inc-a"), "startup"), (str(root / "inc-b"), "no_oom")]
    # each bundle's incident.yaml dates its own log: never one incident across years
    years = [{i.get("time_note", "")[:40] for i in d["facts"]["inputs"]} for d in docs]
    assert "2024" in str(years[0]) and "2026" in str(years[1]), years


def test_exit_codes_of_several_bundles(runner, tmp_path):
    root = _fleet(tmp_path / "fleet")
    _bundle(root / "inc-c", {"logs/vllm.log": "torch.OutOfMemoryError: CUDA out of memory.\n"},
            incident="id: C\n")
    unknown = runner.invoke(main, ["classify", str(root), "--json"])
    assert unknown.exit_code == ExitCode.UNKNOWN and len(unknown.stdout.splitlines()) == 3
    shutil.rmtree(root / "inc-c")
    _bundle(root / "inc-d", {"README.md": "nothing here\n"}, incident="id: D\n")
    partial = runner.invoke(main, ["classify", str(root), "--json"])
    assert partial.exit_code == ExitCode.UNKNOWN and len(partial.stdout.splitlines()) == 2
    assert "inc-d" in partial.stderr and "no evidence files found" in partial.stderr
    human = runner.invoke(main, ["classify", str(root)])
    assert any(line.startswith("inc-d ") and "unreadable" in line for line in human.stdout.splitlines())
    none = tmp_path / "none"
    _bundle(none / "x", {"README.md": "-\n"}, incident="id: X\n")
    _bundle(none / "y", {"README.md": "-\n"}, incident="id: Y\n")
    failed = runner.invoke(main, ["classify", str(none)])
    assert failed.exit_code == ExitCode.BAD_INPUT and failed.stderr.count("no evidence files found") == 2
    assert "Traceback" not in failed.stderr


def test_files_outside_the_bundles_are_their_own_row(runner, tmp_path):
    root = _fleet(tmp_path / "fleet")
    (root / "stray.log").write_text(OOM_LINE)
    result = runner.invoke(main, ["classify", str(root), "--json"])
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == 3 and "stray.log" in docs[2]["bundle"], [d["bundle"] for d in docs]


def test_a_directory_of_loose_files_is_one_incident(runner, tmp_path):
    (tmp_path / "a.log").write_text(LOG)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.log").write_text(HEALTHY)
    doc = _json(runner.invoke(main, ["classify", str(tmp_path), "--json"]))
    assert {i["source"] for i in doc["facts"]["inputs"]} == {"a.log", "sub/b.log"}


def test_a_directory_holding_one_bundle_is_that_bundle(runner, tmp_path):
    _bundle(tmp_path / "only", {"logs/vllm.log": LOG}, incident="id: O\ncreated: 2024-03-12T14:30:00Z\n")
    doc = _json(runner.invoke(main, ["classify", str(tmp_path), "--json"]))
    assert "2024" in _input(doc, "vllm.log")["time_note"]


def test_the_bundled_samples_are_one_verdict_each(runner):
    result = runner.invoke(main, ["classify", str(SAMPLES), "--json"])
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    bundles = sorted(p for p in SAMPLES.iterdir() if (p / "incident.yaml").exists())
    assert [d["bundle"] for d in docs] == [str(b) for b in bundles]
    assert result.exit_code == (ExitCode.UNKNOWN if any(d["verdict"]["class"] == "unknown" for d in docs)
                                else ExitCode.OK)


def test_metrics_url_with_several_bundles_is_a_usage_error(runner, tmp_path):
    root = _fleet(tmp_path / "fleet")
    result = runner.invoke(main, ["classify", str(root), "--metrics-url", "http://127.0.0.1:9/metrics"])
    assert result.exit_code == ExitCode.USAGE and "one incident" in result.stderr
