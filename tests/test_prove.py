"""`triage prove` without a server: profiles, the incident's peak, target checks, bad input, schema."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from triage.cli import main
from triage.evidence.kinds import Kind
from triage.model import Evidence
from triage.prove.peak import peak_profile
from triage.prove.profile import Limits, read_profile_file, vllm_bench_argv
from triage.prove.target import is_loopback, parse_target
from triage.errors import BadInput, TriageError

from .test_exit_code_table import command_code


def _stats(line: int, running: float, waiting: float, kv: float) -> Evidence:
    return Evidence("logs/vllm.log", line, Kind.STATS.value, "stats", fields={"running": running, "waiting": waiting,
                                                                              "kv_usage": kv})


def test_the_peak_is_the_most_requests_at_once_and_the_kv_tokens_per_request_at_the_fullest_cache():
    records = [_stats(10, 4, 0, 0.30), _stats(11, 9, 3, 0.80), _stats(12, 8, 0, 0.976),
               Evidence("logs/vllm.log", 5, Kind.KV_CAPACITY.value, "cap", fields={"kv_tokens": 29488})]
    profile = peak_profile(records, {"launch_args": {"model": "m"}})
    assert profile.concurrency.value == 12 and profile.concurrency.source.startswith("logs/vllm.log:11")
    assert profile.prompt_tokens.value == round(0.976 * 29488 / 8)
    assert profile.prompt_tokens.source.startswith("logs/vllm.log:12")
    assert profile.from_incident and profile.model == "m"
    assert profile.output_tokens.origin == "default"


def test_without_stats_the_profile_says_it_is_not_the_incidents_peak():
    profile = peak_profile([], {})
    assert not profile.from_incident
    assert any("no stats lines" in n for n in profile.notes)
    given = profile.with_overrides(concurrency=4, prompt_tokens=100)
    assert given.concurrency.origin == "flag" and not given.from_incident


def test_a_vllm_bench_result_is_a_profile_and_a_profile_exports_to_vllm_bench(tmp_path: Path):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({"max_concurrency": 16, "completed": 4, "input_lens": [100, 2000, 300, 50],
                                  "output_lens": [128, 128, 64, 10], "model_id": "m"}))
    profile, timing = read_profile_file(str(result))
    assert (profile.concurrency.value, profile.prompt_tokens.value, profile.output_tokens.value) == (16, 2000, 128)
    assert profile.concurrency.origin == "file" and timing == {}
    argv = vllm_bench_argv(profile, "http://127.0.0.1:8000/", "m", 50)
    assert argv[:3] == ["vllm", "bench", "serve"]
    assert argv[argv.index("--max-concurrency") + 1] == "16"
    assert argv[argv.index("--random-input-len") + 1] == "2000"
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8000"


def test_an_exported_profile_reads_back(runner, tmp_path: Path):
    out = tmp_path / "peak.yaml"
    result = runner.invoke(main, ["prove", "--url", "http://127.0.0.1:9", "--concurrency", "3", "--prompt-tokens",
                                  "700", "--duration", "20", "--dry-run", "--export-profile", str(out)])
    assert result.exit_code == 0, result.output
    assert "3 concurrent requests of 700 prompt + 128 output tokens" in result.output
    assert "vllm bench serve" in result.output
    profile, timing = read_profile_file(str(out))
    assert (profile.concurrency.value, profile.prompt_tokens.value) == (3, 700)
    assert timing["duration_s"] == 20


@pytest.mark.parametrize("text, problem", [
    ("concurrency: 0\n", "concurrency: expected a positive whole number"),
    ("concurency: 4\n", "unknown key 'concurency'"),
    ("[1, 2]\n", "expected a mapping"),
    ("{max_concurrency: null, completed: 1}", "without max_concurrency"),
    ("a: [\n", "neither JSON nor YAML"),
])
def test_a_bad_profile_file_is_one_line_naming_it(runner, tmp_path: Path, text: str, problem: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(BadInput) as err:
        read_profile_file(str(path))
    assert str(path) in str(err.value) and problem in str(err.value)
    result = runner.invoke(main, ["prove", "--url", "http://127.0.0.1:9", "--profile", str(path), "--dry-run"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.count("\n") == 1 and str(path) in result.output


def test_a_missing_source_is_bad_input(runner, tmp_path: Path):
    gone = tmp_path / "no-incident"
    result = runner.invoke(main, ["prove", str(gone), "--url", "http://127.0.0.1:9", "--dry-run"])
    assert result.exit_code == 1 == command_code("prove", "a source that is not there")
    assert "no such incident directory or log" in result.output and "Traceback" not in result.output


def test_loopback_only_unless_allowed():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.3.4.5")
    assert not is_loopback("192.0.2.10") and not is_loopback("no-such-host.invalid")
    with pytest.raises(TriageError, match="--allow-remote"):
        parse_target("http://192.0.2.10:8000", allow_remote=False)
    assert not parse_target("http://192.0.2.10:8000/", allow_remote=True).loopback
    for bad in ("ftp://127.0.0.1", "http://127.0.0.1:0", "127.0.0.1:8000", "http://127.0.0.1:8000/?x=1"):
        with pytest.raises(BadInput):
            parse_target(bad, allow_remote=False)


def test_a_remote_target_is_refused_before_anything_is_sent(runner):
    result = runner.invoke(main, ["prove", "--url", "http://192.0.2.10:8000", "--concurrency", "1"])
    assert result.exit_code == 1 == command_code("prove", "a target that is not loopback without --allow-remote")
    assert "--allow-remote" in result.output and "will send" not in result.output


def test_a_remote_target_shows_the_load_and_needs_a_confirmation(runner):
    # No terminal and no --yes: the load is shown, then refused as a usage error; nothing is sent.
    result = runner.invoke(main, ["prove", "--url", "http://192.0.2.10:8000", "--allow-remote", "--concurrency", "2",
                                  "--prompt-tokens", "10", "--duration", "1"])
    assert result.exit_code == 2, result.output
    assert "will send: target http://192.0.2.10:8000 (NOT loopback)" in result.output
    assert "2 concurrent requests of 10 prompt + 128 output tokens" in result.output


def test_every_run_is_bounded():
    limits = Limits(max_requests=10, duration_s=5, ramp_s=1, request_timeout_s=2, drain_s=30)
    assert limits.wall_s == 1 + 5 + 2
    for conc, lim in ((0, Limits()), (Limits.MAX_CONCURRENCY + 1, Limits()), (1, Limits(max_requests=0)),
                      (1, Limits(duration_s=Limits.MAX_DURATION_S + 1))):
        with pytest.raises(BadInput):
            lim.check(conc)


def test_the_schema_is_valid_json_schema():
    import jsonschema

    from triage.paths import data_file

    schema = json.loads(data_file("prove.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == "triage.prove/v1"
