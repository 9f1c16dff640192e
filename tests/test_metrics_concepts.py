"""One reader of live /metrics text: `triage.evidence.prometheus.concept_samples`, used by watch
and by recovery's probes; and where the evidence package's names are imported from."""
from __future__ import annotations

import ast
import http.server
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from triage.evidence.prometheus import concept_samples
from triage.live import server
from triage.live.watch.scrape import parse_metrics

ROOT = Path(__file__).resolve().parent.parent

TWO_ENGINES = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.8
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 4.0
python_gc_objects_collected_total{generation="0"} 120.0
"""
HTML = "<html><body>502 Bad Gateway</body></html>\n"


def test_only_the_series_triage_reads_come_back_under_their_concept():
    found = concept_samples(TWO_ENGINES)
    assert found.error is None
    assert [(s.concept, s.metric, s.labels["engine"], s.value) for s in found.samples] == [
        ("kv_cache_usage", "vllm:kv_cache_usage_perc", "0", 0.3),
        ("kv_cache_usage", "vllm:kv_cache_usage_perc", "1", 0.8),
        ("requests_running", "vllm:num_requests_running", "0", 4.0),
        ("requests_running", "vllm:num_requests_running", "1", 3.0)]


def test_v0_names_read_as_the_same_concepts():
    found = concept_samples('vllm:gpu_cache_usage_perc{model_name="m"} 0.42\n'
                            'vllm:gpu_prefix_cache_hit_rate{model_name="m"} -1\n')
    assert [(s.concept, s.value) for s in found.samples] == [("kv_cache_usage", 0.42), ("prefix_cache_hit_rate", -1.0)]


def test_values_come_as_exposed_and_a_broken_line_is_reported_beside_the_good_ones():
    found = concept_samples('vllm:num_requests_waiting{model_name="m"} NaN\n'
                            'vllm:num_requests_running{oops 1\n'
                            'vllm:num_requests_running{model_name="m"} 2\n')
    assert [s.concept for s in found.samples] == ["requests_waiting", "requests_running"]
    assert math.isnan(found.samples[0].value) and found.samples[1].value == 2.0
    assert isinstance(found.error, ValueError)


def test_a_page_that_is_no_exposition_is_refused_only_when_every_line_is_read():
    assert concept_samples(HTML).samples == [] and concept_samples(HTML).error is None
    assert concept_samples(HTML, every_line=True).error is not None
    whole = concept_samples(TWO_ENGINES, every_line=True)
    assert whole.error is None and len(whole.samples) == 4


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = TWO_ENGINES.encode()

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def metrics_url():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        _Metrics.body = TWO_ENGINES.encode()


def test_watch_and_recovery_read_the_same_load(metrics_url):
    watched = parse_metrics(TWO_ENGINES)
    probed = server.metrics(metrics_url, 5)
    assert isinstance(probed, dict)
    assert watched.kv_cache_usage == probed["kv_cache_usage"] == 0.8       # the fullest engine, not the sum
    assert watched.running == probed["requests_running"] == 7.0            # requests add up


def test_recovery_does_not_read_an_error_page_as_no_load(metrics_url):
    _Metrics.body = HTML.encode()
    probed = server.metrics(metrics_url, 5)
    assert isinstance(probed, server.Probe) and not probed.ok
    assert probed.detail.startswith("GET /metrics: not Prometheus text (")


def test_recovery_probes_keep_their_short_words():
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics) as httpd:
        port = httpd.server_port                     # closed again before the probes: nothing listens
    assert server.health(f"http://127.0.0.1:{port}", 2).detail == "GET /health: connection refused"
    assert server.metrics(f"http://127.0.0.1:{port}", 2).detail == "GET /metrics: connection refused"


# --- where things are imported from --------------------------------------------------------------------

def _private_imports_of(module: str) -> list[str]:
    """`file: name` for every private name imported from `module` by a module of triage."""
    found = []
    for path in sorted((ROOT / "triage").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(module.rsplit(".", 1)[-1]):
                dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                if dotted != module:
                    found += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_no_module_reaches_into_the_metrics_parser_or_the_http_module():
    assert _private_imports_of("triage.evidence.prometheus") == []
    assert _private_imports_of("triage.httpget") == []


@pytest.mark.parametrize("module, names", [
    ("triage.evidence", ["load_evidence", "scrape", "scrape_timeout", "SCRAPE_TIMEOUT_S", "SCRAPE_TIMEOUT_ENV",
                         "MAX_SCRAPE_BYTES", "time_reference", "read_bundle_meta", "expand", "ArchiveBundle",
                         "parsers", "pick_parser", "PARSER_MODULES", "NothingUsable", "failed_all",
                         "_NOT_EVIDENCE", "_NOT_EVIDENCE_EXT", "_derived"]),
    ("triage.evidence.logs", ["NAME", "sniff", "parse", "short_path", "BENIGN_EXCEPTIONS", "REQUEST_REJECTED",
                              "is_request_log", "LogScanner", "iter_blocks", "ACCESS_MARK", "_odd_lines"]),
    ("triage.live.watch.scrape", ["BadUrl", "Endpoint", "ServerFetch", "fetch", "parse_metrics"]),
])
def test_names_stay_importable_where_code_imports_them(module, names):
    mod = __import__(module, fromlist=["_"])
    assert [n for n in names if not hasattr(mod, n)] == []


def test_classify_of_a_log_loads_no_http_code():
    """HTTP is only needed for --metrics-url: the cold path of `classify` pays for none of it."""
    # the classify path ends with os._exit once its output is out: the modules are listed there
    code = ("import os, sys, runpy; sys.argv = ['triage', 'classify', sys.argv[1], '--json']\n"
            "def report():\n"
            "    print(sorted(m for m in sys.modules if m in ('triage.httpget', 'http.client', 'requests')), "
            "file=sys.stderr)\n    sys.stderr.flush()\n"
            "_exit = os._exit\n"
            "def exit_reported(code):\n    report()\n    _exit(code)\n"
            "os._exit = exit_reported\n"
            "try:\n    runpy.run_module('triage', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "report()\n")
    log = ROOT / "samples" / "startup-kv-blowout-v1" / "logs" / "vllm.log"
    done = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
