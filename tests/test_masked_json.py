"""`--json` is always JSON, and masking reads secret names as whole names.

Values are masked before a document is serialised; the serialised text is never masked again, so
no escape of it can be cut. A secret flag's value is masked whatever its first character, and
key names such as `time_per_token` or `max_tokens` are not secrets.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TGI_CASE = ROOT / "tests" / "corpus_synthetic" / "b05-tgi-prefill-request-failed.yaml"


def _tgi_log(extra: str = "") -> str:
    """The TGI case's log, with span fields (and `extra`) on the line classify cites."""
    lines = yaml.safe_load(TGI_CASE.read_text())["log"].splitlines()
    fields = 'generate_stream{total_time="14.2031s" time_per_token="26.84ms" parameters='
    lines[2] = lines[2].replace("generate_stream{parameters=", fields, 1)
    if extra:
        lines[2] = lines[2].replace("Server error:", f"{extra} Server error:", 1)
    return "\n".join(lines) + "\n"


def _classify_json(path: Path) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-m", "triage", "classify", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return json.loads(done.stdout), done.stdout


def test_a_real_tgi_line_gives_valid_json_and_keeps_time_per_token(tmp_path):
    log = tmp_path / "tgi.log"
    log.write_text(_tgi_log())
    doc, text = _classify_json(log)
    assert doc["schema"] == "triage.verdict/v1"
    assert 'time_per_token="26.84ms"' in text.replace('\\"', '"')


def test_a_quoted_password_beside_the_failure_gives_valid_json_without_it(tmp_path):
    log = tmp_path / "pw.log"
    log.write_text(_tgi_log('db password="hunter two"'))
    doc, text = _classify_json(log)
    assert doc["schema"] == "triage.verdict/v1"
    assert "hunter" not in text and 'password=\\"***\\"' in text


@pytest.mark.parametrize("text", [
    'connect failed password="hunter two" retry',
    'connect failed password="hunter two"',
    'x time_per_token="26.84ms" token="abc def" y',
    "token=abc\\ def api_key='a\"b' --api-key \"q\\\"r\"",
    'Authorization: Bearer abcdefgh123\\" tail',
    "--api-key abc\\",
])
def test_echo_json_is_valid_json_for_any_text(text, monkeypatch):
    from triage.output import MaskedStream, echo_json

    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", MaskedStream(out))
    for indent in (None, 2):
        echo_json({"excerpt": text, "lines": [text]}, indent=indent)
        sys.stdout.flush()
        doc = json.loads(out.getvalue())
        out.seek(0)
        out.truncate()
        assert doc["excerpt"] == doc["lines"][0]
        assert "hunter" not in doc["excerpt"] and "abc" not in doc["excerpt"]


@pytest.mark.parametrize("text", [
    'password="hunter two" and more',
    'time_per_token="26.84ms" token="abc def"',
    "token=abc\\ def then api_key='a\"b'",
    'Authorization: Bearer abcdefgh123\\" tail',
    "--api-key abc\\",
    "--api-key -abc\\",
])
def test_masking_serialised_json_never_breaks_it(text):
    """A document serialised elsewhere and masked as text (a file written whole): still JSON."""
    from triage.redact import mask_text

    for dumped in (json.dumps({"e": text}), json.dumps([text], indent=2)):
        masked = mask_text(dumped)
        json.loads(masked)
        assert mask_text(masked) == masked


def test_dict_keys_are_masked_too():
    from triage.redact import redact_output

    out = redact_output({"https://u:hunter2pw@h/x?token=abcdef": 1, "plain": 2})
    assert list(out) == ["https://u:***@h/x?token=***", "plain"]


@pytest.mark.parametrize("name", ["time_per_token", "max_tokens", "num_tokens", "prompt_tokens", "eos_token",
                                  "bos_token_id", "time_to_first_token", "tokens_per_second", "max_new_tokens",
                                  "timePerToken", "token_count", "auth_type", "sig_figs",
                                  "PWD", "tokenizer", "max_num_batched_tokens", "prompt_token_ids", "key",
                                  "ssl_keyfile", "--ssl-keyfile"])
def test_names_that_are_not_secrets(name):
    from triage.redact import is_secret_key

    assert not is_secret_key(name)


@pytest.mark.parametrize("name", ["token", "access_token", "api_key", "password", "HF_TOKEN", "hf_token",
                                  "--hf-token", "X-Amz-Signature", "X-Amz-Security-Token", "sig", "signature",
                                  "accessToken", "clientSecret", "AccountKey", "AWS_SECRET_ACCESS_KEY",
                                  "AWS_ACCESS_KEY_ID", "db_password", "pw", "pwd", "passwd", "--ssl-keyfile-password",
                                  "refresh_token", "x-auth-token", "auth_token", "apikey", "X-Api-Key", "cookie",
                                  "credentials", "X-Amz-Credential", "spring.datasource.password", "secret"])
def test_names_that_are_secrets(name):
    from triage.redact import is_secret_key

    assert is_secret_key(name)


@pytest.mark.parametrize("text, kept", [
    ("total_time=\"1.2s\" time_per_token=\"26.84ms\" seed=\"None\"", 'time_per_token="26.84ms"'),
    ("max_tokens=16 num_tokens=5 prompt_tokens=40 eos_token=2", "max_tokens=16 num_tokens=5 prompt_tokens=40"),
    ('{"time_per_token": "26.84ms", "max_tokens": "16"}', '"time_per_token": "26.84ms", "max_tokens": "16"'),
])
def test_token_statistics_stay_visible(text, kept):
    from triage.redact import mask_text, redact_output

    assert kept in mask_text(text)
    assert redact_output({"time_per_token": "26.84ms"}) == {"time_per_token": "26.84ms"}


@pytest.mark.parametrize("text, kept, secret", [
    ("vllm serve m --ssl-keyfile-password -SxQ9pLmW2rT --port 8000", "--ssl-keyfile-password *** --port 8000",
     "SxQ9pLmW2rT"),
    ("vllm serve m --api-key=-abcQ9pLmW2rT --port 1", "--api-key=*** --port 1", "abcQ9pLmW2rT"),
    ("vllm serve m --api-key -abcQ9pLmW2rT", "--api-key ***", "abcQ9pLmW2rT"),
    ("argv: ['vllm', '--hf-token', '-abcQ9pLmW2rT']", "'--hf-token', '***'", "abcQ9pLmW2rT"),
    ("Namespace(ssl_keyfile_password='-SxQ9pLmW2rT', port=1)", "ssl_keyfile_password='***'", "SxQ9pLmW2rT"),
    ("--enforce-eager --api-key -SxQ9pLmW2rT --port 1", "--enforce-eager --api-key *** --port 1", "SxQ9pLmW2rT"),
    ("--max-model-len 4096 --db-password --SxQ9pLmW2rT", "--max-model-len 4096 --db-password ***", "SxQ9pLmW2rT"),
])
def test_a_secret_flags_value_is_masked_whatever_its_first_character(text, kept, secret):
    from triage.redact import mask_text, redact_argv

    out = mask_text(text)
    assert kept in out and secret not in out, out
    assert mask_text(out) == out
    assert secret not in " ".join(redact_argv(["vllm", "--ssl-keyfile-password", "-" + secret]))


def test_harmless_flags_keep_their_dash_values():
    from triage.redact import mask_text

    text = "vllm serve m --max-model-len 4096 --enforce-eager --port -1 --tokenizer-mode auto"
    assert mask_text(text) == text


@pytest.mark.parametrize("url, secrets", [
    ("http://scraper:Pw9xQ2mL7vR@10.0.0.9:8000/metrics", ["Pw9xQ2mL7vR"]),
    ("http://10.0.0.9:8000/?token=Tk9xQ2mL7vR&x=1", ["Tk9xQ2mL7vR"]),
    ("http://h:1/p?a=1&access_token=At9xQ2mL7vR", ["At9xQ2mL7vR"]),
    ("https://acct.blob.core.windows.net/w?sv=2021&sig=Sg9xQ2mL7vR%2B", ["Sg9xQ2mL7vR"]),
    ("https://h/x?signature=Sn9xQ2mL7vR&key=Ky9xQ2mL7vR&api_key=Ak9xQ2mL7vR", ["Sn9xQ2mL7vR", "Ky9xQ2mL7vR",
                                                                              "Ak9xQ2mL7vR"]),
    ("https://b.s3.amazonaws.com/o?X-Amz-Signature=Az9xQ2mL7vR&X-Amz-Security-Token=St9xQ2mL7vR",
     ["Az9xQ2mL7vR", "St9xQ2mL7vR"]),
])
def test_urls_lose_their_passwords_and_secret_parameters(url, secrets):
    from triage.redact import mask_text

    out = mask_text(url)
    assert not any(s in out for s in secrets), out
    assert out.split("://")[0] + "://" in out and "***" in out
