"""No secret planted in an incident reaches any output, of any command.

A bundle is seeded with more than fifty random secrets in every input kind: vLLM logs (the
argparse Namespace, `non-default args`, a logged command line with secret flags whose values
start with `-`, an argv list, request-logger prompts, a quoted password with a space, URLs with
passwords and signed query strings, cloud keys, bearer headers, a bare JWT, a private key
block), a /metrics scrape (labels), nvidia-smi process names, kubectl pod JSON (env, args), an
Alertmanager payload, incident.yaml (`launch:` argv and env, links) and notes.jsonl. Every
command then runs over it as a real process, and each stdout, stderr and written file is
searched for any 6-character piece of any planted secret: a secret masked only in part (cut by
a line wrap, or shortened before it was masked) counts as a leak.

Beyond the bundle: `triage serve` is posted an alert carrying ten more secrets, with the
planted log as its instance's log (its journal, bundle, answers and posted verdicts are
searched), and `triage watch --exporter` watches a URL with four (its gauges are searched).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import string
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "burst-long-prompts-v0"
FRAGMENT = 6
_RNG = random.Random(20260312)


def _rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _jwt() -> str:
    import base64

    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'kid': _rand(12)})}.{part({'sub': _rand(16), 'exp': 1893456000})}.{_rand(43)}"


_UPPER = string.ascii_uppercase + string.digits
_B64 = string.ascii_letters + string.digits + "+/"

# name -> value. Every value is random, so no piece of it can occur in ordinary output.
SECRETS: dict[str, str] = {
    # logs/vllm.log
    "namespace_api_key": _rand(32),
    "namespace_hf_token": "hf_" + _rand(34),
    "namespace_ssl_password": _rand(20),
    "cmdline_api_key": _rand(28),
    "cmdline_hf_token_eq": "hf_" + _rand(34),
    "cmdline_ssl_password": _rand(18),
    "cmdline_db_password": _rand(22),
    "cmdline_dash_password": "-Sx" + _rand(19),          # a secret flag's value that starts with "-"
    "cmdline_dash_eq": "-" + _rand(23),
    "quoted_spaced_password": _rand(8) + " " + _rand(9),  # password="two words", quoted, near the failure
    "nondefault_api_key": _rand(30),
    "nondefault_hf_token": "hf_" + _rand(34),
    "argv_list_api_key": _rand(26),
    "prompt_text": " ".join(_rand(9, string.ascii_lowercase) for _ in range(6)),
    "url_password": _rand(19),
    "url_query_openai": "sk-" + _rand(40),
    "aws_access_key": "AKIA" + _rand(16, _UPPER),
    "aws_secret_key": _rand(40, _B64),
    "bearer_header": _rand(36),
    "log_jwt": _jwt(),
    "gcp_api_key": "AIza" + _rand(35, string.ascii_letters + string.digits + "-_"),
    "github_token": "ghp_" + _rand(36),
    "gitlab_userinfo": _rand(20),
    "slack_bot": "xoxb-" + _rand(12, string.digits) + "-" + _rand(24),
    "azure_account_key": _rand(86, _B64) + "==",
    "presign_signature": _rand(64, "0123456789abcdef"),
    "presign_credential": "ASIA" + _rand(16, _UPPER),
    "sas_sig": _rand(44, _B64),
    "private_key_body": _rand(64, _B64),
    "openai_env": "sk-proj-" + _rand(40),
    "yaml_password": _rand(21),
    "pw_in_log": _rand(17),
    # metrics/*.prom
    "metrics_label_url_password": _rand(18),
    "metrics_label_token": _rand(24),
    "metrics_label_api_key": _rand(25),
    # gpu/nvidia-smi apps CSV
    "smi_api_key": _rand(27),
    "smi_hf_token": "hf_" + _rand(34),
    # k8s/pod.json
    "pod_env_hf_token": "hf_" + _rand(34),
    "pod_env_api_key": _rand(29),
    "pod_env_db_url_password": _rand(20),
    "pod_args_api_key": _rand(31),
    # alerts/*.json
    "alert_label_token": _rand(23),
    "alert_annotation_password": _rand(18),
    "alert_generator_access_token": _rand(33),
    # incident.yaml
    "yaml_launch_api_key": _rand(30),
    "yaml_launch_hf_token": "hf_" + _rand(34),
    "yaml_env_hf_token": "hf_" + _rand(34),
    "yaml_env_aws_secret": _rand(40, _B64),
    "yaml_link_token": _rand(26),
    # notes.jsonl
    "note_pw": _rand(16),
    "note_jwt": _jwt(),
    "note_slack": "xoxp-" + _rand(11, string.digits) + "-" + _rand(26),
    # --metrics-url (userinfo and ?token=), and a note added with `triage note`
    "scrape_password": _rand(17),
    "scrape_token": _rand(29),
    "noted_api_key": _rand(24),
    "noted_bearer": _rand(32),
}
S = SECRETS


@dataclass(frozen=True)
class Output:
    name: str
    text: str


# Outputs hold hex digests of their own (the audit log's keyed chain, checksums): a 6-character
# piece of a hex-only secret turns up among them by chance about once in a hundred runs. Such a
# secret is looked for in 16-character pieces (64 bits, as unlikely by chance as 6 of the others).
HEX_FRAGMENT = 16


def fragments(value: str) -> set[str]:
    size = HEX_FRAGMENT if set(value) <= set("0123456789abcdef") else FRAGMENT
    return {value[i:i + size] for i in range(len(value) - size + 1)}


_FRAGMENTS = {name: fragments(value) for name, value in SECRETS.items()}


def leaked(text: str) -> list[str]:
    """The planted secrets any 6-character piece of which (16 for a hex-only one) occurs in `text`."""
    return sorted(name for name, pieces in _FRAGMENTS.items() if any(p in text for p in pieces))


def test_the_planted_secrets_are_many_distinct_and_random():
    assert len(SECRETS) >= 40 and len(set(SECRETS.values())) == len(SECRETS)
    # No piece of one secret is a piece of the sample bundle's own text: a hit is a leak.
    text = "\n".join(p.read_text(errors="replace") for p in SAMPLE.rglob("*") if p.is_file() and p.suffix != ".gz")
    assert leaked(text) == []


# --- the bundle ------------------------------------------------------------------------------------

def _log(bundle: Path) -> None:
    text = (SAMPLE / "logs" / "vllm.log").read_text()
    namespace = (f"api_key='{S['namespace_api_key']}', hf_token='{S['namespace_hf_token']}', "
                 f"ssl_keyfile_password='{S['namespace_ssl_password']}', lora_modules=None")
    assert "api_key=None, lora_modules=None" in text
    text = text.replace("api_key=None, lora_modules=None", namespace, 1)
    head, sep, tail = text.partition("INFO 11-06 09:58:10 ")
    assert sep
    planted = [
        f"INFO 11-06 09:58:02 launcher.py:12] command: vllm serve meta-llama/Llama-3.1-8B-Instruct "
        f"--max-model-len 32768 --gpu-memory-utilization 0.95 --api-key {S['cmdline_api_key']} "
        f"--hf-token={S['cmdline_hf_token_eq']} --ssl-keyfile-password {S['cmdline_dash_password']} "
        f"--db-password={S['cmdline_db_password']} --kv-store-password={S['cmdline_dash_eq']} "
        f"--storage-secret '{S['cmdline_ssl_password']}'",
        f"INFO 11-06 09:58:03 utils.py:233] non-default args: {{'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', "
        f"'api_key': '{S['nondefault_api_key']}', 'hf_token': '{S['nondefault_hf_token']}', "
        f"'max_model_len': 32768}}",
        f"INFO 11-06 09:58:03 launcher.py:14] argv: ['vllm', 'serve', 'meta-llama/Llama-3.1-8B-Instruct', "
        f"'--api-key', '{S['argv_list_api_key']}']",
        f"INFO 11-06 09:58:04 env.py:20] environment: AWS_ACCESS_KEY_ID={S['aws_access_key']} "
        f"AWS_SECRET_ACCESS_KEY={S['aws_secret_key']} OPENAI_API_KEY={S['openai_env']}",
        f"INFO 11-06 09:58:04 storage.py:31] azure: DefaultEndpointsProtocol=https;AccountName=models;"
        f"AccountKey={S['azure_account_key']};EndpointSuffix=core.windows.net",
        f"INFO 11-06 09:58:05 weights.py:77] fetching https://models.s3.amazonaws.com/w.safetensors?"
        f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={S['presign_credential']}%2F20241106%2Fus-east-1"
        f"&X-Amz-Signature={S['presign_signature']}",
        f"INFO 11-06 09:58:05 weights.py:78] mirror https://acct.blob.core.windows.net/w?sv=2021-08-06&sp=r"
        f"&sig={S['sas_sig']}",
        f"INFO 11-06 09:58:06 git.py:9] cloning https://{S['github_token']}@github.com/org/adapters.git and "
        f"https://oauth2:{S['gitlab_userinfo']}@gitlab.example.com/org/x.git",
        f"WARNING 11-06 09:58:06 tls.py:40] key material: -----BEGIN PRIVATE KEY----- {S['private_key_body']} "
        "-----END PRIVATE KEY-----",
        f"WARNING 11-06 09:58:07 db.py:3] connecting with password: {S['yaml_password']} pw={S['pw_in_log']}",
    ]
    text = head + "\n".join(planted) + "\n" + sep + tail
    # Near the failure, so they sit among the lines classify cites.
    late = [
        f"INFO 11-06 14:16:20 logger.py:37] Received request chat-9f1: "
        f"prompt: '{S['prompt_text']}', params: SamplingParams(n=1, temperature=0.7), "
        f"prompt_token_ids: [128000, 9906, 1917], lora_request: None",
        f"ERROR 11-06 14:16:20 metrics_push.py:88] push to https://pusher:{S['url_password']}"
        f"@gateway.example:9091/metrics/job/vllm?k={S['url_query_openai']} failed: 401",
        f"ERROR 11-06 14:16:20 auth.py:12] rejected headers={{'Authorization': 'Bearer {S['bearer_header']}'}}",
        f"ERROR 11-06 14:16:20 auth.py:13] session {S['log_jwt']} expired",
        f"ERROR 11-06 14:16:20 gemini.py:5] https://generativelanguage.googleapis.com/v1/models?key={S['gcp_api_key']}",
        f"ERROR 11-06 14:16:20 notify.py:5] slack post failed with token {S['slack_bot']}",
        f'ERROR 11-06 14:16:20 db.py:9] login refused for password="{S["quoted_spaced_password"]}" '
        'time_per_token="26.84ms" retrying',
    ]
    head, sep, tail = text.partition("ERROR 11-06 14:16:21 async_llm_engine.py:64] Engine background task failed")
    assert sep
    text = head + "\n".join(late) + "\n" + sep + tail
    (bundle / "logs" / "vllm.log").write_text(text)


def _metrics(bundle: Path) -> None:
    for scrape in sorted((SAMPLE / "metrics").iterdir()):
        text = scrape.read_text()
        text += (f'vllm:cache_config_info{{api_key="{S["metrics_label_api_key"]}",'
                 f'endpoint="https://scraper:{S["metrics_label_url_password"]}@10.0.0.9:8000/metrics?token='
                 f'{S["metrics_label_token"]}",block_size="16"}} 1.0\n')
        (bundle / "metrics" / scrape.name).write_text(text)


def _gpu(bundle: Path) -> None:
    (bundle / "gpu").mkdir()
    (bundle / "gpu" / "apps.csv").write_text(
        "pid, process_name, used_gpu_memory [MiB]\n"
        f"4242, python3 -m vllm.entrypoints.openai.api_server --api-key {S['smi_api_key']} "
        f"--hf-token {S['smi_hf_token']}, 70000 MiB\n")


def _pod(bundle: Path) -> None:
    (bundle / "k8s").mkdir()
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vllm-chat-0", "namespace": "chat", "creationTimestamp": "2024-11-06T09:57:00Z"},
        "spec": {"nodeName": "gpu-node-3", "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.6.3.post1",
            "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--api-key", S["pod_args_api_key"]],
            "env": [{"name": "HF_TOKEN", "value": S["pod_env_hf_token"]},
                    {"name": "VLLM_API_KEY", "value": S["pod_env_api_key"]},
                    {"name": "DATABASE_URL", "value": f"postgres://app:{S['pod_env_db_url_password']}@db:5432/x"}],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "vllm", "ready": False, "restartCount": 1,
            "state": {"running": {"startedAt": "2024-11-06T14:17:00Z"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "startedAt": "2024-11-06T09:57:30Z",
                                         "finishedAt": "2024-11-06T14:16:22Z"}}}]},
    }
    (bundle / "k8s" / "pod.json").write_text(json.dumps(pod, indent=2))


def _alert(bundle: Path) -> None:
    (bundle / "alerts").mkdir()
    alert = {
        "receiver": "pager", "status": "firing",
        "alerts": [{
            "status": "firing",
            "labels": {"alertname": "VLLMEngineDead", "instance": "10.0.0.9:8000", "severity": "critical",
                       "token": S["alert_label_token"]},
            "annotations": {"summary": "vLLM engine died on gpu-node-3",
                            "description": f"restart with password={S['alert_annotation_password']} if needed"},
            "startsAt": "2024-11-06T14:16:35Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": f"http://prometheus:9090/graph?g0.expr=up&access_token={S['alert_generator_access_token']}",
            "fingerprint": "aa11bb22cc33dd44"}],
        "groupLabels": {"alertname": "VLLMEngineDead"}, "commonLabels": {"alertname": "VLLMEngineDead"},
        "commonAnnotations": {}, "externalURL": "http://alertmanager:9093", "version": "4", "groupKey": "{}:{}",
    }
    (bundle / "alerts" / "2024-11-06T14-16-35Z.json").write_text(json.dumps(alert, indent=2))


def _incident_yaml(bundle: Path) -> None:
    meta = yaml.safe_load((SAMPLE / "incident.yaml").read_text())
    meta["links"] = [f"https://grafana.example/d/vllm?orgId=1&auth_token={S['yaml_link_token']}"]
    meta["launch"] = {
        "argv": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "32768",
                 "--api-key", S["yaml_launch_api_key"], "--hf-token", S["yaml_launch_hf_token"]],
        "env": {"HF_TOKEN": S["yaml_env_hf_token"], "AWS_SECRET_ACCESS_KEY": S["yaml_env_aws_secret"]},
    }
    (bundle / "incident.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))


def _notes(bundle: Path) -> None:
    notes = [
        {"time": "2024-11-06T14:18:00.000Z", "author": "dana", "recorded_at": "2024-11-06T14:18:30.000Z",
         "text": f"reset the gateway db, pw={S['note_pw']}"},
        {"time": "2024-11-06T14:19:00.000Z", "author": "dana", "recorded_at": "2024-11-06T14:19:30.000Z",
         "text": f"user session {S['note_jwt']} was the one that sent the 24k prompt"},
        {"time": "2024-11-06T14:20:00.000Z", "author": "lee", "recorded_at": "2024-11-06T14:20:30.000Z",
         "text": f"paged #ml-oncall via {S['note_slack']}"},
    ]
    (bundle / "notes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in notes))


def plant(bundle: Path) -> Path:
    for sub in ("logs", "metrics"):
        (bundle / sub).mkdir(parents=True)
    _log(bundle)
    _metrics(bundle)
    _gpu(bundle)
    _pod(bundle)
    _alert(bundle)
    _incident_yaml(bundle)
    _notes(bundle)
    return bundle


# --- running the commands --------------------------------------------------------------------------

class _Metrics(BaseHTTPRequestHandler):
    body = (SAMPLE / "metrics" / "2024-11-06T14-16-00Z.prom").read_bytes()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def metrics_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]          # closed again when the block ends: connections are refused


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return plant(tmp_path_factory.mktemp("secrets") / "INC")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("home")
    # Module-scoped, so built before the per-test audit key is set: name a key of its own here,
    # never the host's real one.
    return {**os.environ, "TRIAGE_LOCK_FILE": str(home / "recover.lock"), "TRIAGE_KEY_FILE": str(home / "audit.key"),
            "COLUMNS": "80"}


def triage(env: dict[str, str], *args: str, label: str = "", timeout: float = 120) -> list[Output]:
    """Run one command as its own process; its stdout and stderr, named for the report."""
    done = subprocess.run([sys.executable, "-m", "triage", *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=timeout, cwd=ROOT)
    label = label or " ".join(a for a in args if not a.startswith(("/", "http")))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return [Output(f"{label}: stdout", done.stdout), Output(f"{label}: stderr", done.stderr)]


def scan(outputs: list[Output]) -> dict[str, list[str]]:
    return {o.name: found for o in outputs if (found := leaked(o.text))}


def _url(port: int) -> str:
    return f"http://scrape:{S['scrape_password']}@127.0.0.1:{port}/metrics?token={S['scrape_token']}"


COMMANDS: dict[str, tuple[str, ...]] = {
    "classify": ("classify", "{b}"),
    "classify --explain": ("classify", "{b}", "--explain"),
    "classify --json": ("classify", "{b}", "--json"),
    "classify --metrics-url": ("classify", "{b}", "--explain", "--metrics-url", "{url}"),
    "classify --json --metrics-url": ("classify", "{b}", "--json", "--metrics-url", "{url}"),
    "classify --metrics-url refused": ("classify", "{b}", "--metrics-url", "{refused}"),
    "recover": ("recover", "{b}"),
    "recover --json": ("recover", "{b}", "--json"),
    "timeline": ("timeline", "{b}"),
    "timeline --json": ("timeline", "{b}", "--json"),
    "timeline --csv": ("timeline", "{b}", "--csv"),
    "postmortem -": ("postmortem", "{b}", "-o", "-"),
    "audit verify": ("audit", "verify", "{b}"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_secret_reaches_any_output(command, bundle, env, metrics_port):
    args = [a.format(b=bundle, url=_url(metrics_port), refused=_url(_closed_port())) for a in COMMANDS[command]]
    outputs = triage(env, *args, label=command)
    if command.startswith("classify --json"):
        assert json.loads(outputs[0].text)["schema"] == "triage.verdict/v1"
    if "--json" in args:
        json.loads(outputs[0].text)             # JSON, whatever the planted lines hold
    found = scan(outputs)
    assert not found, f"{sum(map(len, found.values()))} secret(s) leaked: {found}"


def test_the_new_command_shows_the_flag_with_its_value_masked(bundle, env):
    verdict = json.loads(triage(env, "classify", str(bundle), "--json")[0].text)
    assert verdict["command"] and "--api-key" in verdict["command"] and "***" in verdict["command"]
    assert "--ssl-keyfile-password ***" in verdict["command"]


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_the_scrape_is_cited_without_its_credentials(bundle, env, metrics_port):
    verdict = json.loads(triage(env, "classify", str(bundle), "--json", "--metrics-url", _url(metrics_port))[0].text)
    assert f"http://scrape:***@127.0.0.1:{metrics_port}/metrics?token=***" in set(_strings(verdict))
    assert not leaked(json.dumps(verdict))


def test_postmortem_files_hold_no_secret(bundle, env, tmp_path):
    out = tmp_path / "pm"
    out.mkdir()
    outputs = triage(env, "postmortem", str(bundle), "-o", str(out / "postmortem.md"))
    written = sorted(p for p in out.iterdir() if p.is_file())
    assert any(p.suffix == ".md" for p in written)
    outputs += [Output(str(p.name), p.read_text(errors="replace")) for p in written]
    found = scan(outputs)
    assert not found, f"{sum(map(len, found.values()))} secret(s) leaked: {found}"


def test_a_note_with_secrets_is_echoed_and_stored_masked(bundle, env, tmp_path):
    copy = tmp_path / "INC"
    shutil.copytree(bundle, copy)
    before = (copy / "notes.jsonl").read_text()
    text = f"rotated the key: api_key={S['noted_api_key']}, curl -H 'Authorization: Bearer {S['noted_bearer']}'"
    outputs = triage(env, "note", str(copy), text, "--at", "14:25")
    added = (copy / "notes.jsonl").read_text()[len(before):]
    assert added.strip()
    found = scan(outputs + [Output("notes.jsonl (added line)", added)])
    assert not found, f"{sum(map(len, found.values()))} secret(s) leaked: {found}"


# --- triage serve: an alert carrying secrets, the planted log as its instance's log --------------

SERVE_SECRETS = {
    "alert_label_token2": _rand(27),
    "alert_label_api_key": _rand(29),
    "alert_summary_password": _rand(19),
    "alert_description_url_password": _rand(21),
    "alert_generator_password": _rand(18),
    "alert_generator_access_token2": _rand(31),
    "alert_generator_sig": _rand(40, _B64),
    "alert_external_token": _rand(26),
    "alert_common_label_password": _rand(20),
    "alert_common_annotation_api_key": _rand(28),
}
_FRAGMENTS.update({name: fragments(value) for name, value in SERVE_SECRETS.items()})
SERVE_STARTS = "2024-11-06T14:16:21Z"
SERVE_ENDS = "2024-11-06T14:40:00Z"


def _serve_payload(status: str) -> dict:
    x = SERVE_SECRETS
    one = {
        "status": status,
        "labels": {"alertname": "VLLMEngineDead", "instance": "gpu-node-3:8000", "severity": "critical",
                   "token": x["alert_label_token2"], "api_key": x["alert_label_api_key"]},
        "annotations": {"summary": f"vLLM engine died; db password={x['alert_summary_password']}",
                        "description": f"runbook https://ops:{x['alert_description_url_password']}@wiki.example/r"},
        "startsAt": SERVE_STARTS, "endsAt": SERVE_ENDS if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": f"http://prom:{x['alert_generator_password']}@prometheus:9090/graph?g0.expr=up"
                        f"&access_token={x['alert_generator_access_token2']}&sig={x['alert_generator_sig']}",
        "fingerprint": "5ec7e75ec7e7aa01"}
    return {"version": "4", "groupKey": '{}:{alertname="VLLMEngineDead"}', "truncatedAlerts": 0, "status": status,
            "receiver": "triage", "groupLabels": {"alertname": "VLLMEngineDead"},
            "commonLabels": {"alertname": "VLLMEngineDead", "db_password": x["alert_common_label_password"]},
            "commonAnnotations": {"runbook": f"https://wiki.example/r?api_key={x['alert_common_annotation_api_key']}"},
            "externalURL": f"http://alertmanager:9093/?token={x['alert_external_token']}", "alerts": [one]}


class _Sink(BaseHTTPRequestHandler):
    posts: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.posts.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode("utf-8", "replace"))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait(what: str, check, timeout: float = 90.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


class _Serve:
    """`triage serve` as a process of its own, on a free loopback port."""

    def __init__(self, env: dict[str, str], incidents: Path, logs: Path, post: str, stderr: Path) -> None:
        import time

        from .fleetkit import free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        self.stderr = stderr
        argv = [sys.executable, "-m", "triage", "serve", "--listen", self.url.split("//")[1], "--incidents",
                str(incidents), "--logs-from", str(logs), "--post", post]
        with open(stderr, "ab") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         start_new_session=True, env=env)
        deadline = time.monotonic() + 30
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                if _http("GET", self.url + "/healthz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"triage serve did not start: {stderr.read_text(errors='replace')[-3000:]}")

    def post(self, doc: dict) -> tuple[int, str]:
        return _http("POST", self.url + "/alertmanager", json.dumps(doc).encode())

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def _files(root: Path) -> list[Output]:
    return [Output(str(p.relative_to(root)), p.read_text(errors="replace")) for p in sorted(root.rglob("*"))
            if p.is_file()]


def test_serve_keeps_no_secret_of_an_alert_or_its_log(bundle, env, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(bundle / "logs" / "vllm.log", logs / "gpu-node-3.log")
    incidents = tmp_path / "incidents"
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    _Sink.posts = []
    post_url = f"http://127.0.0.1:{sink.server_address[1]}/hook"
    answers: list[Output] = []
    try:
        serve = _Serve(env, incidents, logs, post_url, tmp_path / "serve.log")
        try:
            answers.append(Output("firing answer", serve.post(_serve_payload("firing"))[1]))
            _wait("the verdict posted", lambda: _Sink.posts)
            answers.append(Output("resolved answer", serve.post(_serve_payload("resolved"))[1]))
            _wait("the resolution posted", lambda: len(_Sink.posts) >= 2)
            code, text = serve.post({**_serve_payload("firing"), "version": "3"})
            answers.append(Output("400 answer", text))
            assert code == 400
        finally:
            serve.stop()
        journal = incidents / ".triage-serve" / "journal.jsonl"
        journal.chmod(0o644)                       # as an older receiver left it
        again = _Serve(env, incidents, logs, post_url, tmp_path / "serve.log")
        try:
            answers.append(Output("duplicate answer", again.post(_serve_payload("firing"))[1]))
        finally:
            again.stop()
    finally:
        sink.shutdown()
        sink.server_close()

    [bundle_dir] = [p for p in incidents.iterdir() if not p.name.startswith(".")]
    assert json.loads(answers[-1].text)["duplicates"] == 1
    outputs = answers + [Output(f"post {i}", body) for i, body in enumerate(_Sink.posts)]
    outputs += [Output("serve stderr", (tmp_path / "serve.log").read_text(errors="replace"))]
    outputs += _files(incidents)                   # the journal, the outbox, the bundle (log copy included)
    assert "Traceback" not in outputs[-1].text
    found = scan(outputs)
    assert not found, f"{sum(map(len, found.values()))} secret(s) leaked: {found}"

    assert oct(journal.stat().st_mode & 0o777) == oct(0o600)
    alert_files = sorted((bundle_dir / "alerts").glob("*.json"))
    assert len(alert_files) == 2 and all(p.stat().st_mode & 0o777 == 0o600 for p in alert_files)
    for line in journal.read_text().splitlines():
        json.loads(line)
    for p in alert_files:
        json.loads(p.read_text())
    meta = yaml.safe_load((bundle_dir / "incident.yaml").read_text())
    assert meta["title"] == "VLLMEngineDead on gpu-node-3:8000: vLLM engine died; db password=***"
    assert meta["links"] == ["http://prom:***@prometheus:9090/graph?g0.expr=up&access_token=***&sig=***"]
    assert json.loads(_Sink.posts[0])["alert"]["labels"]["token"] == "***"


# --- triage watch --exporter: the server label of a URL with credentials --------------------------

EXPORTER_SECRETS = {
    "watch_url_password": _rand(19),
    "watch_url_token": _rand(27),
    "watch_url_access_token": _rand(30),
    "watch_url_sig": _rand(43, _B64),
}
_FRAGMENTS.update({name: fragments(value) for name, value in EXPORTER_SECRETS.items()})


def test_the_exporter_labels_a_server_without_its_credentials(env, metrics_port):
    import signal
    import time
    import urllib.parse
    import urllib.request

    x = EXPORTER_SECRETS
    sig = urllib.parse.quote(x["watch_url_sig"], safe="")
    url = (f"http://watcher:{x['watch_url_password']}@127.0.0.1:{metrics_port}/?token={x['watch_url_token']}"
           f"&access_token={x['watch_url_access_token']}&sig={sig}")
    proc = subprocess.Popen([sys.executable, "-m", "triage", "watch", "--vllm-url", url, "--interval", "0.3",
                             "--exporter", "0", "--no-nvml"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    scraped = ""
    try:
        first = proc.stderr.readline()
        m = re.search(r"exporter (http://127\.0\.0\.1:\d+/metrics)", first)
        assert m, first

        def labelled() -> bool:
            nonlocal scraped
            with urllib.request.urlopen(m.group(1), timeout=5) as resp:
                scraped = resp.read().decode()
            return 'triage_source_up{' in scraped and "server=" in scraped
        deadline = time.monotonic() + 20
        while not labelled() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    assert "Traceback" not in err, err[-3000:]
    found = scan([Output("exporter scrape", scraped), Output("watch stdout", out), Output("watch stderr", first + err)])
    assert not found, f"{sum(map(len, found.values()))} secret(s) leaked: {found}"
    masked = f"http://watcher:***@127.0.0.1:{metrics_port}/?token=***&access_token=***&sig=***"
    assert f'server="{masked}"' in scraped, scraped[:3000]


def test_at_least_sixty_distinct_secrets_are_planted():
    every = {**SECRETS, **SIM_SECRETS, **SERVE_SECRETS, **EXPORTER_SECRETS}
    assert len(every) >= 60 and len(set(every.values())) == len(every)


# --- recover --execute against a live server started with secrets on its command line ------------

SIM_SECRETS = {
    "sim_api_key": _rand(30),
    "sim_hf_token": "hf_" + _rand(34),
    "sim_ssl_password": _rand(22),
    "sim_env_hf_token": "hf_" + _rand(34),
    "sim_env_url_password": _rand(20),
}
_FRAGMENTS.update({name: fragments(value) for name, value in SIM_SECRETS.items()})


def _records(incident: Path) -> list[dict]:
    path = incident / "actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _relaunched_pids(incident: Path) -> list[int]:
    return [r["data"]["launched"]["pid"] for r in _records(incident)
            if r.get("phase") == "end" and isinstance((r.get("data") or {}).get("launched"), dict)
            and r["data"]["launched"].get("pid")]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="recovery identifies processes through /proc")
def test_recover_execute_masks_the_running_servers_secrets(tmp_path, env):
    from .simkit import MODEL, START_S, complete, get, kill_group, wait_until, words

    incident = tmp_path / "LIVE"
    (incident / "logs").mkdir(parents=True)
    argv = [sys.executable, "-m", "triage.sim", "serve", MODEL, "--port", "0", "--scenario", "chronic",
            "--api-key", SIM_SECRETS["sim_api_key"], "--hf-token", SIM_SECRETS["sim_hf_token"],
            "--ssl-keyfile-password", SIM_SECRETS["sim_ssl_password"]]
    server_env = {**os.environ, "HF_TOKEN": SIM_SECRETS["sim_env_hf_token"],
                  "HF_ENDPOINT": f"https://mirror:{SIM_SECRETS['sim_env_url_password']}@hf-mirror.example"}
    with open(incident / "logs" / "vllm.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True, env=server_env)
    try:
        url_line = re.compile(r"Starting vLLM API server \d+ on (http://\S+)")

        def serving() -> str | None:
            m = url_line.search((incident / "logs" / "vllm.log").read_text(errors="replace"))
            return m.group(1) if m and get(m.group(1) + "/health") == 200 else None

        assert wait_until(lambda: serving() is not None, START_S), "the simulator did not start"
        url = serving()
        assert any(complete(url, f"request {i} " + words(50, f"r{i}"), 2) != 200 for i in range(1, 41))

        outputs = triage(env, "recover", str(incident), "--execute", "--yes", "--param", "steady.window_s=2")
        launched = _relaunched_pids(incident)
        assert launched, outputs[1].text[-3000:]
        # Masked on the way out only: the relaunched server got the real values.
        cmdline = Path(f"/proc/{launched[-1]}/cmdline").read_bytes().split(b"\0")
        assert SIM_SECRETS["sim_api_key"].encode() in cmdline
        outputs.append(Output("actions.jsonl", (incident / "actions.jsonl").read_text()))
        for args in (("audit", "verify", str(incident)), ("timeline", str(incident)),
                     ("postmortem", str(incident), "-o", "-")):
            outputs += triage(env, *args)
        found = scan(outputs)
        assert not found, f"{sum(map(len, found.values()))} secret(s) leaked: {found}"
    finally:
        kill_group(proc.pid)
        for pid in _relaunched_pids(incident):
            kill_group(pid)


# --- the masking function, kind by kind ---------------------------------------------------------

_K = _rand(24)            # one random value, placed in each form in turn
_PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{_rand(64, _B64)}\n{_K}\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize("text, kept", [
    (f"Namespace(model='m', api_key='{_K}', port=8000)", "api_key='***'"),
    (f"Namespace(api_key=['{_K}'])", "api_key=***"),
    (f"argv: ['vllm', 'serve', '--api-key', '{_K}', '--port', '8000']", "'--api-key', '***'"),
    (f'["vllm", "serve", "--hf-token", "{_K}"]', '"--hf-token", "***"'),
    (f"vllm serve m --ssl-keyfile-password {_K} --port 1", "--ssl-keyfile-password *** --port 1"),
    (f"run --db-password={_K}", "--db-password=***"),
    (f"run --client-secret {_K}", "--client-secret ***"),
    (f"run --storage-key {_K}", "--storage-key ***"),
    (f"HF_TOKEN={_K} AZURE_STORAGE_KEY={_K}", "HF_TOKEN=*** AZURE_STORAGE_KEY=***"),
    (f"login pw={_K} then pwd={_K}", "pw=*** then pwd=***"),
    (f"passwd: {_K}", "passwd: ***"),
    (f'{{"spring.datasource.password": "{_K}"}}', '"spring.datasource.password": "***"'),
    (f"note: api_key={_K}", "note: api_key=***"),
    (f"https://bob:{_K}@db.example/x", "https://bob:***@db.example/x"),
    (f"https://h/p?token={_K}&x=1", "?token=***&x=1"),
    (f"https://h/p?a=1&access_token={_K}", "&access_token=***"),
    (f"https://h/p?key={_K}", "?key=***"),
    (f"https://h/p?sv=2021&sig={_K}", "&sig=***"),
    (f"https://h/p?X-Amz-Signature={_K}&X-Amz-Date=1", "X-Amz-Signature=***&X-Amz-Date=1"),
    (f"Authorization: Basic {_K}", "Authorization: Basic ***"),
    (f"headers={{'authorization': 'Bearer {_K}'}}", "Bearer ***"),
    (f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={_K}==;EndpointSuffix=x", "AccountKey=***;"),
    (f"session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.{_K} expired", "session eyJ*** expired"),
    (f"key AKIA{_rand(16, _UPPER)} and ASIA{_rand(16, _UPPER)}", "key AKIA*** and AKIA***"),
    (f"maps AIza{_rand(35)}", "maps AIza***"),
    (f"gh ghp_{_rand(36)} and github_pat_{_rand(40)}", "gh gh_*** and gh_***"),
    (f"slack xoxb-{_rand(12, string.digits)}-{_K}", "slack xox-***"),
    (f"openai sk-proj-{_K}{_K}", "openai sk-***"),
    (f"hf hf_{_rand(34)}", "hf hf_***"),
    (f"gitlab glpat-{_K}", "gitlab glpat-***"),
    (f"tls {_PEM} done", "-----BEGIN RSA PRIVATE KEY----- *** -----END RSA PRIVATE KEY----- done"),
    (f"Received request cmpl-1: prompt: 'tell me {_K}', params: x", "prompt: '***', params: x"),
])
def test_each_kind_is_masked(text, kept):
    from triage.redact import redact_output

    out = redact_output(text)
    assert kept in out, out
    assert not any(p in out for p in fragments(_K)), out
    assert redact_output(out) == out                        # masking twice changes nothing


def test_shapes_leave_no_piece_behind():
    from triage.redact import redact_output

    for value in [v for v in (*SECRETS.values(), *SIM_SECRETS.values()) if " " not in v]:
        in_url = value.replace("/", "%2F").replace("+", "%2B")       # a URL carries them percent-encoded
        for text in (f"HF_TOKEN={value}", f"--api-key {value}", f"Bearer {value}", f"https://u:{in_url}@h/x",
                     f"'api_key': '{value}'"):
            assert not leaked(redact_output(text)), (text, redact_output(text))


@pytest.mark.parametrize("text", [
    "PWD=/home/dana OLDPWD=/tmp",
    "/srv/bundle/secret.log: not readable (permission denied)",
    "vllm serve m --max-num-batched-tokens 8192 --tokenizer foo --max-tokens 16 --ssl-keyfile /etc/k.pem",
    "max_num_batched_tokens=8192 eos_token_id=2 api_key=None allow_credentials=False tokenizer='x'",
    "https://example.com/a:b?page=2&sort=asc PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free",
])
def test_harmless_text_is_left_alone(text):
    from triage.redact import redact_output

    assert redact_output(text) == text


def test_dataclasses_are_masked_as_copies_that_keep_their_types():
    from triage.model import Evidence, OomClass, Step, Verdict
    from triage.redact import redact_output

    e = Evidence("logs/x.log", 3, "launch_config", f"vllm serve m --api-key {_K}", fields={"api_key": _K})
    v = Verdict(OomClass.BURST, 0.9, "s", path=[Step("q", "yes", "why", (e,))], evidence=[e],
                command=f"vllm serve m --api-key {_K}")
    out = redact_output(v)
    assert out.oom_class is OomClass.BURST and out.command == "vllm serve m --api-key ***"
    assert out.evidence[0] is out.path[0].evidence[0] and out.evidence[0].fields == {"api_key": "***"}
    assert v.command.endswith(_K) and e.fields["api_key"] == _K        # the original is untouched


@pytest.mark.parametrize("line", [
    "a=" * 100_000, "a:" * 100_000, "api_key=" * 25_000, "key: " * 40_000, "-" * 200_000,
    "eyJ-" * 50_000, "eyJaaaaaaa." * 18_000, "sk-" * 66_000, "a://u:" + "p:" * 100_000,
    "-----BEGIN PRIVATE KEY-----" + "-" * 200_000, "-----BEGIN PRIVATE KEY-----" * 7_000,
    "bearer " * 28_000, "authorization: " * 13_000, "'--api-key', " * 15_000, "--a" * 66_000,
    "prompt: '" * 22_000, "api_key=[" * 22_000, "password='" + "\\a" * 100_000, "?token=&" * 25_000,
    "Namespace(" + "a=1, " * 40_000, "token" * 40_000 + "=x", "a_key_" * 33_000, "x" * 200_000,
    "-a." * 66_000,            # flag-like runs joined by dots: 60 KB took 17 s, 120 KB 62 s before
])
def test_masking_is_linear_on_hostile_lines(line):
    import time

    from triage.redact import redact_output

    began = time.perf_counter()
    redact_output(line)
    assert time.perf_counter() - began < 3.0       # ~0.2 s here; a quadratic pattern takes minutes


# --- the output layer ------------------------------------------------------------------------------

def test_the_stream_masks_a_secret_written_in_pieces():
    import io

    from triage.output import MaskedStream

    inner = io.StringIO()
    stream = MaskedStream(inner)
    for piece in ("vllm serve m --api", f"-key {_K[:10]}", f"{_K[10:]} --port 1\nnext ", "line"):
        stream.write(piece)
    assert inner.getvalue() == "vllm serve m --api-key *** --port 1\n"
    stream.write(f" token={_K}")
    stream.flush()                                    # a prompt waiting for an answer goes out now
    assert inner.getvalue().endswith("next line token=***") and _K not in inner.getvalue()
    with pytest.raises(TypeError):
        stream.write(b"bytes")                        # nothing writes around the mask


def test_the_console_masks_before_it_wraps():
    import io

    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from triage.console import Console

    out = io.StringIO()
    console = Console(file=out, width=30, highlight=False)
    long_line = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 4096 --api-key " + _K
    console.print(Text(long_line, style="bold"))
    console.print(f"[bold]New[/bold] {long_line}")
    table = Table(title=f"token={_K}")
    table.add_column("event")
    table.add_row(Text(long_line))
    console.print(table)
    console.print(Panel(Text(long_line), title=f"Bearer {_K}"))
    assert not any(p in out.getvalue() for p in fragments(_K)), out.getvalue()
    assert "***" in out.getvalue()


# One example of every known secret shape, alone in an ordinary log line: the literal pre-checks
# that let mask_text skip most text must never skip one of these.
SHAPE_EXAMPLES = [
    "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3",
    "sk-" + "proj4f9Kd82LmZq0Xw7y",
    "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "rk_test_" + "51H8dkfj38fhJDKs93kdLq",
    "ghp_" + "x7Yb2Kc9Lm4Np6Qr8St0Uv2Wx4Yz6Ab8Cd0E",
    "github_pat_" + "11ABCDEFG0abcdefghijklmnopqrstuvwxyz",
    "glpat-" + "xY7zK2mN9pQ4rS6tV8wB",
    "npm_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5h",
    "xoxb-" + "1234567890-abcdefABCDEF",
    "AIza" + "SyA1bC2dE3fG4hI5jK6lM7nO8pQ9rS0tU",
    "ya29." + "a0AfH6SMBx7Yb2Kc9Lm4Np6Qr8",
    "ASIA" + "Y3FDSNDKFKSIDJSH",
    "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlX2hlcmU",
]


@pytest.mark.parametrize("secret", SHAPE_EXAMPLES, ids=lambda s: s[:6])
def test_every_known_secret_shape_is_masked_in_plain_text(secret):
    from triage.redact import mask_text

    line = f"INFO 11-06 10:05:01 engine.py:288] downloading with {secret} from the hub"
    masked = mask_text(line)
    assert secret not in masked and "***" in masked
