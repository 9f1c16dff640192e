"""The command line as a user and a runbook bot see it: output, JSON, exit codes, streams."""
from __future__ import annotations

import json

import pytest

from triage.cli import main
from triage.errors import ExitCode

KV_ERROR = ("ERROR 04-05 01:12:55 [core.py:390] ValueError: To serve at least one request with the models's max seq "
            "len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (8.52 GiB). "
            "Based on the available memory, the estimated maximum model length is 69776. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
ARGS = ("(APIServer pid=1) INFO 04-05 01:12:00 [utils.py:233] non-default args: {'model': "
        "'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 131072, 'gpu_memory_utilization': 0.9}\n")


@pytest.fixture
def kv_log(tmp_path):
    path = tmp_path / "vllm.log"
    path.write_text(ARGS + KV_ERROR)
    return path


def test_classify_json_is_the_verdict_object(runner, kv_log):
    result = runner.invoke(main, ["classify", str(kv_log), "--json"])
    assert result.exit_code == ExitCode.OK, result.stderr
    out = json.loads(result.stdout)
    assert out["schema"] == "triage.verdict/v1"
    assert out["verdict"]["class"] == "startup"
    assert out["causes"][0]["id"] == "kv_cache_blowout"
    rec = {r["setting"]: r for r in out["recommendations"]}
    assert rec["max_model_len"]["to"] == 69776 and rec["max_model_len"]["basis"] == "incident"
    assert out["command"] == "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 69776 --gpu-memory-utilization 0.9"
    cited = out["evidence"][out["causes"][0]["evidence"][0]]
    assert cited["source"].endswith("vllm.log") and cited["line"] == 2 and cited["time"] == "2026-04-05T01:12:55Z"


def test_classify_human_output_cites_source_and_line(runner, kv_log):
    result = runner.invoke(main, ["classify", str(kv_log)])
    assert result.exit_code == 0
    assert "STARTUP" in result.stdout
    assert "vllm.log:2" in result.stdout
    assert "--max-model-len 69776" in result.stdout.replace("\n", " ")


def test_unknown_exits_3_and_says_what_to_attach(runner, tmp_path):
    path = tmp_path / "bare.log"
    path.write_text("RuntimeError: CUDA error: out of memory\n")
    result = runner.invoke(main, ["classify", str(path), "--json"])
    assert result.exit_code == ExitCode.UNKNOWN
    out = json.loads(result.stdout)
    assert out["verdict"]["class"] == "unknown" and out["attach"]


def test_stdin_and_several_paths(runner, tmp_path, kv_log):
    result = runner.invoke(main, ["classify", "-", "--json"], input=KV_ERROR)
    assert result.exit_code == 0 and json.loads(result.stdout)["evidence"][0]["source"] == "-"
    other = tmp_path / "dmesg.txt"
    other.write_text("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    both = runner.invoke(main, ["classify", str(kv_log), str(other), "--json"])
    out = json.loads(both.stdout)
    # A stated GPU OOM is never dismissed; the untimed Xid is named beside it, not dropped.
    assert out["verdict"]["class"] == "startup"
    first_step = out["path"][0]
    assert "Xid 79" in first_step["why"]
    assert any(out["evidence"][i]["source"].endswith("dmesg.txt") for i in first_step["evidence"])


def test_usage_error_is_exit_2(runner):
    assert runner.invoke(main, ["classify"]).exit_code == ExitCode.USAGE
    assert runner.invoke(main, ["classify", "x", "--no-such-flag"]).exit_code == ExitCode.USAGE


@pytest.mark.parametrize("command", [[], ["classify"], ["eval"], ["schema"]])
def test_every_command_has_help(runner, command):
    result = runner.invoke(main, command + ["--help"])
    assert result.exit_code == 0 and "Usage:" in result.stdout


def test_schema_command_prints_the_schema(runner):
    schema = json.loads(runner.invoke(main, ["schema"]).stdout)
    assert schema["title"] == "triage.verdict/v1"


def test_eval_reports_figures(runner):
    from tests.conftest import CORPUS

    result = runner.invoke(main, ["eval", str(CORPUS), "--json"])
    out = json.loads(result.stdout)
    assert out["total"] >= 80 and out["misroutes"] == 0 and out["confident_wrong"] == 0
    assert out["scored_accuracy"] >= 0.9 and out["false_alarms"] == 0
    assert set(out["per_class"]) >= {"startup", "burst", "not_gpu_oom", "no_oom"}
    assert {"vllm", "sglang"} <= set(out["per_engine"])
    human = runner.invoke(main, ["eval", str(CORPUS)]).stdout
    assert "Per engine family" in human and "exact on in-scope, log-sufficient cases" in human


def test_year_and_tz_options_change_times(runner, kv_log):
    out = json.loads(runner.invoke(main, ["classify", str(kv_log), "--json", "--year", "2024",
                                          "--tz", "America/New_York"]).stdout)
    times = [e["time"] for e in out["evidence"] if e["time"]]
    assert times and all(t.startswith("2024-04-05T05:12") for t in times)
    assert "2024" in out["facts"]["inputs"][0]["time_note"]


def test_metrics_url_scrapes_a_live_endpoint(runner, kv_log):
    """A real HTTP server on loopback serves vLLM's /metrics; the scrape is dated and cited."""
    import http.server
    import threading

    body = (b'# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n'
            b'# TYPE vllm:kv_cache_usage_perc gauge\n'
            b'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97\n')

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.end_headers()
            self.wfile.write(body if self.path == "/metrics" else b"")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        result = runner.invoke(main, ["classify", str(kv_log), "--metrics-url", url, "--json", "--explain"])
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)
        assert any(i["source"] == url and i["parser"] == "prometheus" for i in out["facts"]["inputs"])
        missing = runner.invoke(main, ["classify", "--metrics-url", url.replace("/metrics", "/nope")])
        assert missing.exit_code == ExitCode.BAD_INPUT and "cannot scrape" in missing.stderr
    finally:
        server.shutdown()


@pytest.mark.parametrize("args", [[], ["--json"], ["--explain"]])
def test_a_reader_that_goes_away_is_not_reported_as_bad_input(args):
    """`triage classify ... | head`: the pipe closes under the writer. That is the shell's SIGPIPE
    status (141), silent, not exit 1 ("bad input") and not a traceback."""
    import os
    import subprocess
    import sys

    from tests.conftest import sample

    read_end, write_end = os.pipe()
    os.close(read_end)                    # closed before the first write: deterministic
    try:
        done = subprocess.run([sys.executable, "-m", "triage", "classify", str(sample("incident-a-multimodal-fleet")),
                               *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert done.stderr == ""


def test_human_output_keeps_numbers_and_settings_whole_at_80_columns(runner):
    """On an 80-column terminal (or a pager, a CI log) no value is split across lines: the
    recommended setting and each --explain field can be read and copied as printed."""
    from tests.test_real_gpu_captures import HERE

    result = runner.invoke(main, ["classify", str(HERE / "h100" / "oom-fragmented"), "--explain"],
                           env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "PYTORCH_CUDA_ALLOC_CONF (env): — → expandable_segments:True" in result.output
    assert "inactive_split_bytes=20897923072" in result.output
