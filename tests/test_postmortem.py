"""`triage postmortem`: golden documents for the two write-up incidents, the figures they must
carry, templates (validation, StrictUndefined), redaction of every output, bad bundles, atomic
writes, the chart and the mermaid diagram."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import typing
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from triage.cli import main
from triage.model import Evidence, EvidenceSet
from triage.postmortem import (
    PostmortemError, chart_name_for, default_output, render_postmortem, write_postmortem,
)
from triage.postmortem import render as render_mod
from triage.postmortem import views
from triage.postmortem.chart import Marker, build_chart
from triage.postmortem.context import Inputs, build_context, load_inputs
from triage.postmortem.mermaid import gantt
from triage.redact import mask_prompts, redact, redact_output

from tests.conftest import ROOT, sample

UTC = timezone.utc
GOLDEN = [
    ("incident-a-multimodal-fleet", None, sample("incident-a-multimodal-fleet") / "postmortem.md"),
    ("prefix-cache-oom-b", None, sample("prefix-cache-oom-b") / "postmortem.md"),
    ("incident-a-multimodal-fleet", "atlassian", ROOT / "tests" / "golden" / "incident-a-atlassian.md"),
]


# -- golden documents -----------------------------------------------------------------------------

@pytest.mark.parametrize("bundle, template, golden", GOLDEN, ids=[f"{b}-{t or 'google'}" for b, t, _ in GOLDEN])
def test_golden_postmortem(bundle, template, golden, update_golden):
    pm = render_postmortem(sample(bundle), template=template, output=golden)
    chart = golden.parent / chart_name_for(golden)
    if update_golden:
        write_postmortem(pm, golden)
        return
    assert golden.exists(), f"{golden} missing: run pytest --update-golden"
    assert pm.markdown == golden.read_text(encoding="utf-8"), f"{golden} is stale: review, then pytest --update-golden"
    assert pm.chart_svg == chart.read_text(encoding="utf-8"), f"{chart} is stale"


def test_rendering_is_deterministic_and_reads_no_clock(monkeypatch):
    import triage.postmortem.context as ctx_mod

    class NoClock(datetime):
        @classmethod
        def now(cls, tz=None):
            raise AssertionError("the renderer read the clock")

        @classmethod
        def utcnow(cls):
            raise AssertionError("the renderer read the clock")

    monkeypatch.setattr(ctx_mod, "datetime", NoClock)
    bundle = sample("prefix-cache-oom-b")
    first = render_postmortem(bundle, output=Path("pm.md"))
    second = render_postmortem(bundle, output=Path("pm.md"))
    assert first.markdown == second.markdown and first.chart_svg == second.chart_svg
    stamped = render_postmortem(bundle, output=Path("pm.md"), now=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert "2030-01-02 03:04:05 UTC (the --now value)" in stamped.markdown
    assert "2024-10-17 14:59:06 UTC (the resolution time)" in first.markdown


# -- the incidents' figures -------------------------------------------------------------------------

def test_incident_a_figures_are_the_write_ups():
    pm = render_postmortem(sample("incident-a-multimodal-fleet"), output=Path("postmortem.md"))
    ctx = pm.context
    assert ctx.durations["total"].text == "29 min 47 s"           # the write-up's outage
    assert ctx.moments["impact_start"].time == "14:16:52" and ctx.moments["resolved"].time == "14:46:39"
    assert ctx.durations["ttd"].text and ctx.durations["ttm"].text
    assert ctx.impact.fleet_size == 16 and ctx.impact.nodes_affected == 3
    assert ctx.impact.nodes_added == ("gpu-node-21",)               # the scale-out's node is not one of the 16
    assert "2 of 16 nodes of support-chat-api (and 1 node added during the incident)" in ctx.summary[0].text
    assert "13 of 16 nodes down, as noted at 14:19:00" in ctx.summary[0].text
    assert ctx.root_cause.oom_class == "burst"
    assert {c.id for c in ctx.root_cause.causes} >= {"accounting_discrepancy", "known_engine_bug"}
    text = pm.markdown
    assert "29 min 47 s" in text and "82%" in text and "13 of 16 nodes down" in text
    assert "Scaling out before diagnosing" in text                  # the write-up's wrong turn
    assert "memory discrepancy" in text                              # what would have detected it sooner
    # the write-up's 0.6.0 accounting bug is confirmed by no upstream source: no upgrade is advised on it
    assert "0.6.0 → 0.7.1" not in text and "gpu_memory_utilization" in text
    assert "```mermaid\ngantt" in text and "](postmortem-memory.svg)" in text


def test_incident_b_figures_are_the_write_ups():
    pm = render_postmortem(sample("prefix-cache-oom-b"), output=Path("postmortem.md"))
    ctx = pm.context
    assert ctx.durations["total"].text == "12 min 00 s"             # "12 minutes of downtime"
    assert ctx.moments["impact_start"].time == "14:47:06"
    assert ctx.root_cause.oom_class == "burst"        # a low hit rate costs no memory: nothing ties it to the cache
    assert [s.action for s in ctx.response.steps][:2] == ["drain", "stop_server"]
    alerts = " ".join(s.alert for s in ctx.detection.sooner)
    assert "memory delta" in alerts                                 # the write-up's trend alert
    assert "prefix cache" not in alerts       # a hit-rate alert precedes only an OOM tied to the cache
    assert "10,207 requests were in flight" in pm.markdown
    assert "enable_prefix_caching true → false" not in pm.markdown   # the advice follows the sampler that failed


def test_every_claim_cites_a_source():
    ctx = render_postmortem(sample("incident-a-multimodal-fleet"), output=Path("pm.md")).context
    claims = list(ctx.summary) + list(ctx.impact.claims) + list(ctx.trigger) + list(ctx.detection.claims)
    claims += list(ctx.lessons.went_well) + list(ctx.lessons.went_wrong) + list(ctx.lessons.lucky)
    for claim in claims:
        assert claim.sources, claim.text
        assert all(re.match(r"^[\w./\-]+(:\d+)?$", s) for s in claim.sources), claim.sources
    assert all(a.sources for a in ctx.action_items)
    assert all(s.sources for s in ctx.detection.sooner)


# -- templates --------------------------------------------------------------------------------------

def test_user_template_is_validated_before_rendering(tmp_path):
    bundle = sample("prefix-cache-oom-b")
    cases = {
        "syntax.j2": ("# {{ incident.title }\n", r"syntax\.j2:1: template syntax error"),
        "unknown.j2": ("{{ incident.title }} {{ verdict }}\n", r"unknown variable\(s\) verdict"),
        "field.j2": ("line one\n{{ incident.titel }}\n", r"field\.j2:2: incident has no field 'titel'"),
        "deep.j2": ("a\nb\n{{ impact.duration.minutes }}\n", r"deep\.j2:3: UndefinedError"),
        "filter.j2": ("a\n{{ incident.title | cites }}\n",
                      r"filter\.j2:2: template syntax error: No filter named 'cites'"),
        "test.j2": ("{% if incident.title is bogus %}x{% endif %}\n",
                    r"test\.j2:1: template syntax error: no test named 'bogus'"),
    }
    for name, (body, message) in cases.items():
        path = tmp_path / name
        path.write_text(body)
        with pytest.raises(PostmortemError, match=message):
            render_postmortem(bundle, template=str(path), output=tmp_path / "pm.md")
    assert not (tmp_path / "pm.md").exists()


def test_user_template_can_use_the_bundled_macros(tmp_path):
    path = tmp_path / "mine.md.j2"
    path.write_text('{% import "_postmortem_macros.j2" as m %}# {{ incident.id }} {{ durations.total.text }}\n'
                    '{{ m.steps_table(response.steps) }}\n')
    pm = render_postmortem(sample("prefix-cache-oom-b"), template=str(path), output=tmp_path / "pm.md")
    assert pm.markdown.startswith("# INC-2024-10-17-prefix-cache 12 min 00 s\n")
    assert "| 1 | 14:55:30 |" in pm.markdown


def test_templates_readme_documents_every_variable_and_field():
    readme = (ROOT / "templates" / "README.md").read_text()
    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for name, hint in typing.get_type_hints(cls).items():
            assert f"`{name}`" in readme, f"templates/README.md does not document {cls.__name__}.{name}"
            for arg in _types(hint):
                if dataclasses.is_dataclass(arg):
                    walk(arg)

    walk(views.Context)
    for name in ("cite", "refs", "cell", "code", "ucfirst"):
        assert f"`{name}`" in readme


def _types(hint) -> list:
    args = typing.get_args(hint)
    return [hint] if not args else [t for a in args for t in _types(a)]


# -- redaction --------------------------------------------------------------------------------------

HF = "hf_" + "Zq8Wn3Lp5Rt7Yv9Bx2Cd4Fg6Hj8Km0Ns"
SK = "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7"
AKIA = "AKIAJ7QXEXAMPLEKEY42"
AWS_SECRET = "u8Kq/Zr3+Tn9Wx2Yb5Vc7Ld1Mf4Ph6Sj0Ga8EXMPL"
BEARER = "eyJhbGciOiJSUzI1NiJ9.cGxhbnRlZA.c2lnbmVk"
URL_PW = "Pl4nted-Pa55w0rd"
PROMPT = "my bank account is 12345678 and my doctor said"
SECRETS = [HF, SK, AKIA, AWS_SECRET, BEARER, URL_PW, PROMPT, "12345678"]
EVERYTHING = (f"token {HF} key {SK} aws {AKIA} aws_secret_access_key={AWS_SECRET} "
              f"Authorization: Bearer {BEARER} https://ops:{URL_PW}@grafana.internal/d/x "
              f"Received request chatcmpl-9: prompt: '{PROMPT}', params: SamplingParams(n=1), "
              f"prompt_token_ids: [1, 12345678, 3], lora_request: None")


def _planted_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "leaky"
    shutil.copytree(sample("incident-a-multimodal-fleet"), bundle,
                    ignore=shutil.ignore_patterns("postmortem*", "expected.yaml", "README.md"))
    meta = (bundle / "incident.yaml").read_text()
    meta = meta.replace('title: "', f'title: "{HF} ').replace("links: []", f'links: ["https://ops:{URL_PW}@wiki/x"]')
    (bundle / "incident.yaml").write_text(meta)
    for log in (bundle / "logs").glob("*.log"):              # the launch line (cited as evidence) and a request log
        lines = log.read_text().split("\n")
        lines[1] = lines[1].replace("api_key=None", f"api_key='{SK}'").replace(
            "download_dir='/models'", f"download_dir='s3://{AKIA}:{AWS_SECRET}@models'")
        lines.insert(2, lines[1].split(" api_server")[0] + f" logger.py:36] Received request chatcmpl-1: prompt: "
                     f"'{PROMPT}', params: SamplingParams(n=1), prompt_token_ids: [1, 12345678], lora_request: None.")
        log.write_text("\n".join(lines))
    for alert in (bundle / "alerts").glob("*.json"):
        data = json.loads(alert.read_text())
        for a in data["alerts"]:
            a["annotations"]["summary"] = f"{a['annotations'].get('summary', '')} {EVERYTHING}"
        alert.write_text(json.dumps(data))
    pod = json.loads((bundle / "k8s" / "pod.json").read_text())
    pod.setdefault("metadata", {}).setdefault("annotations", {})["note"] = EVERYTHING
    (bundle / "k8s" / "pod.json").write_text(json.dumps(pod))
    with (bundle / "notes.jsonl").open("a") as fh:           # written by hand, not through `triage note`
        fh.write(json.dumps({"time": "2026-03-12T14:30:00Z", "author": "x", "text": "wrong: " + EVERYTHING}) + "\n")
    actions = [{"seq": 1, "time": "2026-03-12T14:31:00Z", "run_id": "r", "step": "restart", "action": "restart",
                "phase": "start", "args": {"argv": ["vllm", "serve", "--api-key", SK], "env": {"HF_TOKEN": HF}},
                "prev": "0" * 64, "hash": "0" * 64},
               {"seq": 2, "time": "2026-03-12T14:31:05Z", "run_id": "r", "step": "restart", "action": "restart",
                "phase": "end", "result": "ok", "args": {}, "output_tail": EVERYTHING, "prev": "0" * 64, "hash": "0" * 64}]
    (bundle / "actions.jsonl").write_text("".join(json.dumps(a) + "\n" for a in actions))
    _plant_more(bundle)
    return bundle


def _plant_more(bundle: Path) -> None:
    """The other source kinds, and secrets placed where outputs cut text (a cut secret is no longer
    recognisable, so it must be masked before the cut)."""
    launch = bundle / "logs" / "gpu-node-21.log"             # its launch line is cited as evidence, cut at 300
    lines = launch.read_text().split("\n")
    lines[1] = lines[1].replace("response_role='assistant'", f"hf_token='{HF}'")
    lines = [ln + f" {EVERYTHING}" if "Engine background task failed" in ln else ln for ln in lines]
    launch.write_text("\n".join(lines))
    for prom in (bundle / "metrics").glob("*.prom"):        # label values and comments of a scrape
        text = prom.read_text().replace('model_name="support-chat-mm"', f'model_name="mm {HF} {SK}"')
        prom.write_text(text + f"# HELP planted {EVERYTHING}\n")
    for smi in (bundle / "gpu").glob("*.csv"):                # nvidia-smi's name column
        smi.write_text(smi.read_text().replace("NVIDIA A100-SXM4-80GB", f"NVIDIA A100 {HF}"))
    (bundle / "gpu" / "dmesg.txt").write_text(
        f"Mar 12 14:30:01 gpu-node-09 kernel: python3 --api-key {SK} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), "
        "order=0, oom_score_adj=0\n"
        "Mar 12 14:30:01 gpu-node-09 kernel: Out of memory: Killed process 4242 (python3) total-vm:1000kB, "
        f"anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:0 {EVERYTHING}\n")
    pod = json.loads((bundle / "k8s" / "pod.json").read_text())
    pod["spec"]["containers"][0]["env"] = [{"name": "HF_TOKEN", "value": HF}]
    for cs in pod["status"]["containerStatuses"]:             # the termination message: the log's last lines
        cs["lastState"]["terminated"]["message"] = EVERYTHING
    (bundle / "k8s" / "pod.json").write_text(json.dumps(pod, indent=2))
    (bundle / "k8s" / "events.json").write_text(json.dumps({"kind": "EventList", "items": [{
        "reason": "OOMKilling", "message": f"Memory cgroup out of memory: Killed process 77 (vllm) {EVERYTHING}",
        "type": "Warning", "involvedObject": {"kind": "Node", "name": "gpu-node-09"}, "source": {"host": "gpu-node-09"},
        "lastTimestamp": "2026-03-12T14:30:02Z", "count": 1}]}))
    for alert in (bundle / "alerts").glob("*.json"):          # a probe URL with credentials as the node label
        data = json.loads(alert.read_text())
        for a in data["alerts"]:
            a["labels"]["instance"] = f"https://probe:{URL_PW}@10.12.4.37:9400"
            a["labels"].pop("Hostname", None)
            a["generatorURL"] = f"https://admin:{URL_PW}@prometheus/graph"
        alert.write_text(json.dumps(data))
    (bundle / "recovery").mkdir()                             # a relaunched server's log
    (bundle / "recovery" / "relaunch-20260312T143500Z.log").write_text(
        "INFO 03-12 14:35:00 api_server.py:459] vLLM API server version 0.7.1\n"
        f"INFO 03-12 14:35:00 api_server.py:460] args: Namespace(api_key='{SK}', hf_token='{HF}')\n"
        f"INFO 03-12 14:36:00 logger.py:36] Received request chatcmpl-2: prompt: '{PROMPT}', params: "
        "SamplingParams(n=1), prompt_token_ids: [1, 12345678], lora_request: None.\n"
        f"ERROR 03-12 14:36:01 async_llm_engine.py:63] Engine background task failed {EVERYTHING}\n")
    records = [json.loads(ln) for ln in (bundle / "actions.jsonl").read_text().splitlines()]
    records += [{"seq": 3, "time": "2026-03-12T14:32:00Z", "run_id": "r", "step": "healthy", "action": "wait_healthy",
                 "phase": "start", "args": {}},
                {"seq": 4, "time": "2026-03-12T14:33:00Z", "run_id": "r", "step": "healthy", "action": "wait_healthy",
                 "phase": "end", "result": "ok", "output_tail": "x" * 185 + " " + HF}]   # cut at 200 inside the token
    (bundle / "actions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with (bundle / "notes.jsonl").open("a") as fh:           # a note quoted (and cut) in the key moments
        fh.write(json.dumps({"time": "2026-03-12T14:46:39Z", "text": "y" * 70 + f" {HF} #resolved"}) + "\n")


def _fragments(secret: str) -> list[str]:
    """Pieces of a secret's own characters (past a kept prefix such as `hf_`): a cut secret leaks one."""
    body = secret[8:] if secret.startswith("sk-proj-") else secret[3:] if secret.startswith("hf_") else secret
    return [secret] if " " in secret else [body[i:i + 6] for i in range(0, len(body) - 5, 3)]


def _assert_clean(outputs: dict[str, str]) -> None:
    leaks = [f"{piece} of {secret[:12]}... in {where}" for where, text in outputs.items() for secret in SECRETS
             for piece in _fragments(secret) if piece in text]
    assert not leaks, leaks


def test_no_planted_secret_survives_in_the_postmortem(tmp_path, runner):
    bundle = _planted_bundle(tmp_path)
    outputs: dict[str, str] = {}
    for template in ("google", "atlassian"):
        pm = render_postmortem(bundle, template=template, output=tmp_path / f"{template}.md")
        outputs[f"postmortem {template}"] = pm.markdown
        outputs[f"chart {template}"] = pm.chart_svg or ""
        outputs[f"context {template}"] = repr(pm.context)
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", "-"])
    assert result.exit_code == 0, result.output
    outputs["postmortem -o -"] = result.output
    _assert_clean(outputs)
    assert "https://probe:***@10.12.4.37" in outputs["postmortem google"]     # the node label, masked
    assert "hf_***" in outputs["postmortem google"] and "prompt: '***'" in outputs["postmortem google"]


def test_no_planted_secret_survives_in_the_timeline_exports(tmp_path, runner):
    bundle = _planted_bundle(tmp_path)
    outputs: dict[str, str] = {}
    for args in (["timeline", str(bundle), "--json"], ["timeline", str(bundle), "--csv"], ["timeline", str(bundle)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        outputs[" ".join(args[:1] + args[2:])] = result.output
    _assert_clean(outputs)


def test_redact_output_masks_prompts_and_keeps_redact_as_it_was():
    line = f"INFO logger.py:36] Received request cmpl-1: prompt: 'it\\'s {PROMPT}', params: x, prompt_token_ids: [1, 2]"
    assert redact(line) == line                                     # redact() keeps its contract: secrets only
    assert redact_output(line) == "INFO logger.py:36] Received request cmpl-1: prompt: '***', params: x, " \
                                  "prompt_token_ids: [***]"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": PROMPT}], "prompt": PROMPT})
    assert PROMPT not in redact_output(body) and PROMPT not in redact_output(json.loads(body)).__repr__()
    assert redact_output({"prompt": PROMPT, "token": HF, "n": 1}) == {"prompt": "***", "token": "hf_***", "n": 1}
    assert mask_prompts("prompt: None, output: ''") == "prompt: None, output: '***'"
    assert redact("api_key=None allow_credentials=False api_key=abc") == "api_key=None allow_credentials=False api_key=***"
    for text in ("prompt: '" + "a" * 200_000, '"content": "' + "\\\\" * 100_000, "prompt_token_ids: [" + "1, " * 70_000):
        mask_prompts(text)                                          # linear: returns at once


# -- bad bundles --------------------------------------------------------------------------------------

def test_a_bundle_with_missing_parts_still_renders_and_says_what_is_missing(tmp_path):
    bundle = tmp_path / "bare"
    (bundle / "logs").mkdir(parents=True)
    shutil.copy(sample("startup-kv-blowout-v1") / "logs" / "vllm.log", bundle / "logs" / "vllm.log")
    pm = render_postmortem(bundle, output=bundle / "postmortem.md")
    text = pm.markdown
    assert "## Root cause" in text and "start-up OOM" in text
    gaps = text.split("### D. Gaps in the bundle")[1]
    for what in ("notes.jsonl", "actions.jsonl", "incident.yaml"):
        assert what in gaps
    assert "No recovery steps were recorded" in text
    assert pm.context.moments["resolved"].time is None and "**Duration:** unknown" in text


def test_no_readings_means_no_chart_and_says_why(tmp_path):
    bundle = tmp_path / "no-readings"
    (bundle / "logs").mkdir(parents=True)
    (bundle / "logs" / "vllm.log").write_text(
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n")
    out = bundle / "postmortem.md"
    pm = render_postmortem(bundle, output=out)
    assert pm.chart_svg is None and pm.chart_name is None
    assert "no GPU memory or KV-cache readings" in pm.markdown and ".svg)" not in pm.markdown
    assert write_postmortem(pm, out) == [out]


def test_corrupt_actions_line_is_reported_with_its_line_number(tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(sample("prefix-cache-oom-b"), bundle, ignore=shutil.ignore_patterns("postmortem*"))
    lines = (bundle / "actions.jsonl").read_text().splitlines(keepends=True)
    lines[4] = lines[4][: len(lines[4]) // 2] + "\n"               # line 5: cut in half
    (bundle / "actions.jsonl").write_text("".join(lines))
    pm = render_postmortem(bundle, output=bundle / "pm.md")
    assert any(p.startswith("actions.jsonl:5:") for p in pm.context.problems), pm.context.problems
    assert "actions.jsonl:5:" in pm.markdown.split("### D. Gaps in the bundle")[1]
    steps = pm.context.response.steps
    assert [s.step for s in steps][:2] == ["drain", "stop"] and "gpu-free" in [s.step for s in steps]
    assert any("damaged" in c.text for c in pm.context.lessons.went_wrong)


def test_a_damaged_audit_log_is_one_lesson_and_a_lost_start_leaves_the_start_unknown(tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(sample("prefix-cache-oom-b"), bundle, ignore=shutil.ignore_patterns("postmortem*"))
    lines = (bundle / "actions.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"                                # the start of step 'stop', cut
    lines.insert(9, "not json\n")
    (bundle / "actions.jsonl").write_text("".join(lines))
    ctx = render_postmortem(bundle, output=bundle / "pm.md").context
    damaged = [c for c in ctx.lessons.went_wrong if "damaged" in c.text]
    assert len(damaged) == 1 and "more problems, listed in the appendix" in damaged[0].text
    assert sum(p.startswith("actions.jsonl") for p in ctx.problems) >= 4
    stop = next(s for s in ctx.response.steps if s.step == "stop")
    assert stop.started is None and stop.ended == "14:55:44" and stop.sources == ("actions.jsonl:4",)
    assert "1 skipped" in " ".join(c.text for c in ctx.lessons.went_well)


def test_not_a_directory_is_one_clear_error(tmp_path, runner):
    result = runner.invoke(main, ["postmortem", str(tmp_path / "nope")])
    assert result.exit_code == 1 and "no such incident directory" in result.output   # bad input, as for timeline
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(main, ["postmortem", str(empty)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert not (empty / "postmortem.md").exists()


# -- writing ----------------------------------------------------------------------------------------

def test_cli_writes_markdown_and_chart_beside_it(tmp_path, runner):
    bundle = tmp_path / "b"
    shutil.copytree(sample("prefix-cache-oom-b"), bundle, ignore=shutil.ignore_patterns("postmortem*"))
    result = runner.invoke(main, ["postmortem", str(bundle), "--now", "2024-10-18T09:00:00Z"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"wrote {default_output(bundle)}", f"wrote {bundle / 'postmortem-memory.svg'}"]
    text = default_output(bundle).read_text()
    assert "2024-10-18 09:00:00 UTC" in text and "](postmortem-memory.svg)" in text
    ET.fromstring((bundle / "postmortem-memory.svg").read_text())  # well-formed
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", "-", "--template", "atlassian"])
    assert result.exit_code == 0 and result.output.startswith("# Incident postmortem:")
    assert ".svg)" not in result.output                            # no chart file for stdout
    for bad, message in ((["--now", "soon"], "--now: 'soon' is not an ISO 8601 time"),
                         (["--template", str(tmp_path / "missing.j2")], "no such template file"),
                         (["-o", str(tmp_path / "no" / "dir" / "pm.md")], "output directory does not exist")):
        result = runner.invoke(main, ["postmortem", str(bundle), *bad])
        assert result.exit_code == 1 and message in result.output and len(result.output.splitlines()) == 1


def test_output_directory_empty_name_and_unwritable_targets(tmp_path, runner):
    bundle = sample("prefix-cache-oom-b")
    out = tmp_path / "out"
    out.mkdir()
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", str(out), "--now", "2024-10-18T09:00:00Z"])
    assert result.exit_code == 0, result.output                 # a directory: postmortem.md in it
    assert sorted(p.name for p in out.iterdir()) == ["postmortem-memory.svg", "postmortem.md"]
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", ""])
    assert result.exit_code == 2 and "empty file name" in result.output
    assert not (bundle / "postmortem.md").read_text().startswith("x")    # the sample's own file untouched
    pm = render_postmortem(bundle, output=tmp_path / "pm.md")
    with pytest.raises(PostmortemError, match="is a directory"):
        write_postmortem(pm, out)                                # nothing written beside it first
    assert not (tmp_path / "out-memory.svg").exists()


def test_output_with_a_trailing_slash_is_a_folder_created_or_refused(tmp_path, runner):
    bundle = sample("prefix-cache-oom-b")
    target = tmp_path / "reports" / "b"
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", f"{target}/", "--now", "2024-10-18T09:00:00Z"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in target.iterdir()) == ["postmortem-memory.svg", "postmortem.md"]
    assert not (tmp_path / "reports" / "b-memory.svg").exists()          # never a file called b
    (tmp_path / "plain").write_text("a file\n")
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", f"{tmp_path / 'plain' / 'sub'}/"])
    assert result.exit_code == 1 and "exists and is not a directory" in result.output
    assert len(result.output.splitlines()) == 1 and (tmp_path / "plain").read_text() == "a file\n"


def test_written_files_get_the_usual_mode(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        render_mod.write_atomic(tmp_path / "new.md", "x\n")
        (tmp_path / "kept.md").write_text("old\n")
        (tmp_path / "kept.md").chmod(0o640)
        render_mod.write_atomic(tmp_path / "kept.md", "new\n")
    finally:
        os.umask(old)
    assert (tmp_path / "new.md").stat().st_mode & 0o777 == 0o644      # not mkstemp's 0600: the team reads it
    assert (tmp_path / "kept.md").stat().st_mode & 0o777 == 0o640     # a replaced file keeps its mode


def test_write_is_atomic(tmp_path, monkeypatch):
    out = tmp_path / "pm.md"
    out.write_text("previous version\n")

    def broken_rename(src, dst, **dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render_mod.os, "rename", broken_rename)     # the rename over the target fails
    with pytest.raises(PostmortemError, match="No space left on device"):
        render_mod.write_atomic(out, "new version\n")
    assert out.read_text() == "previous version\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pm.md"]   # no temp file left behind


# -- chart and diagram --------------------------------------------------------------------------------

def _ev(kind: str, minute: int, line: int, source: str = "gpu/nvidia-smi-gpu-node-01.csv", **fields) -> Evidence:
    return Evidence(source, line, kind, f"{kind} {line}", datetime(2026, 1, 1, 10, minute, tzinfo=UTC), fields)


def test_chart_series_come_from_the_evidence_records():
    gib = 1 << 30
    ev = EvidenceSet([
        _ev("gpu_memory", 0, 2, used_bytes=70 * gib, total_bytes=80 * gib, gpu=0),
        _ev("gpu_memory", 0, 3, used_bytes=76 * gib, total_bytes=80 * gib, gpu=1),      # same reading, fuller GPU
        _ev("gpu_memory", 5, 4, used_bytes=79 * gib, total_bytes=80 * gib, gpu=0),
        _ev("stats", 1, 10, source="logs/gpu-node-01.log", kv_usage=0.5, running=3),
        _ev("stats", 4, 11, source="logs/gpu-node-01.log", kv_usage=0.97, running=9),
        _ev("metric", 3, 12, source="metrics/a.prom", name="kv_cache_usage", value=0.9),
        _ev("torch_oom", 6, 50, source="logs/gpu-node-01.log", capacity_bytes=80 * gib, free_bytes=gib // 2),
    ])
    chart = build_chart(ev, title="t", budget=0.9)
    by_label = {s.label: s for s in chart.series}
    gpu = by_label["GPU memory, gpu-node-01 (nvidia-smi)"]
    assert [round(p.value, 1) for p in gpu.points] == [95.0, 98.8] and gpu.points[0].where.endswith(":3")
    assert [p.value for p in by_label["KV cache, gpu-node-01 (vLLM stats)"].points] == [50.0, 97.0]
    assert by_label["KV cache (/metrics scrape)"].points[0].value == 90.0
    assert by_label["GPU memory at each OOM (PyTorch message)"].points[0].where == "logs/gpu-node-01.log:50"
    root = ET.fromstring(chart.svg)
    assert root.tag.endswith("svg") and "engine budget 90%" in chart.svg
    assert build_chart(ev, title="t", budget=0.9).svg == chart.svg
    assert build_chart(EvidenceSet([]), title="t").svg is None


def test_gantt_is_valid_mermaid_shape():
    from triage.timeline import Event, Moment

    t0 = datetime(2026, 3, 12, 14, 16, 52, tzinfo=UTC)
    moments = {"impact_start": Moment("impact_start", t0, "a:1", "x"),
               "detected": Moment("detected", t0 + timedelta(seconds=13), "b:1", "y"),
               "first_response": Moment("first_response", None, None, "not found"),
               "mitigated": Moment("mitigated", t0 + timedelta(minutes=20), "c:1", "z"),
               "resolved": Moment("resolved", t0 + timedelta(minutes=29, seconds=47), "d:1", "w")}
    events = [Event(t0, "gpu_oom", "failure", "torch.OutOfMemoryError: CUDA out of memory; #1", ("l:5",), "node-1"),
              Event(t0, "engine_dead", "failure", "Engine died", ("l:4",), "node-1"),
              Event(t0 + timedelta(minutes=2), "note", "note", "scaling 16 -> 32: assuming a spike", ("notes.jsonl:1",))]
    text = gantt("INC-1", moments, events)
    lines = text.splitlines()
    assert lines[:4] == ["gantt", "    title INC-1 (UTC)", "    dateFormat YYYY-MM-DD HH:mm:ss", "    axisFormat %H:%M"]
    assert "    Impact (29 min 47 s) :crit, p0, 2026-03-12 14:16:52, 2026-03-12 14:46:39" in lines
    tasks = [ln for ln in lines if ln.startswith("    ") and ":" in ln and not ln.startswith(("    title", "    date", "    axis"))]
    for task in tasks:
        name, _, data = task.partition(" :")
        assert not re.search(r"[:#;]", name), task
        assert re.match(r"(crit, |milestone, )?(p|m)\d+, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, ", data), task
    assert "    GPU OOM node-1 :milestone, m1, 2026-03-12 14:16:52, 0d" in lines   # the OOM, not the engine-dead line
    assert sum(1 for ln in lines if "node-1" in ln) == 1


def test_gantt_task_names_that_read_as_statements_are_prefixed():
    from triage.timeline import Event, Moment

    t0 = datetime(2026, 3, 12, 14, 0, tzinfo=UTC)
    texts = ["click the rollback button", "section 3 of the fleet down", "Title: wrong", "%% not a comment",
             "weekday traffic", "accDescr { x", "call the vendor", ":;#", "scaled out"]
    events = [Event(t0 + timedelta(minutes=i), "note", "note", t, ("notes.jsonl:1",)) for i, t in enumerate(texts)]
    text = gantt("INC-1", {"impact_start": Moment("impact_start", t0, "a:1", "x")}, events)
    names = [ln.strip().partition(" :milestone")[0] for ln in text.splitlines() if ":milestone" in ln]
    assert names == ["- click the rollback button", "- section 3 of the fleet down", "- Title wrong",
                     "- %% not a comment", "- weekday traffic", "- accDescr { x", "- call the vendor", "(no text)",
                     "scaled out"]


def test_chart_keeps_released_memory_on_the_axis_and_breaks_lines_at_gaps():
    from triage.postmortem.chart import Marker, collect_series

    gib = 1 << 30
    used = {0: 76, 1: 77, 2: 78, 3: 79, 4: 0, 5: 0, 6: 74, 7: 75}       # crash at :04, restart reloads at :06
    ev = [_ev("gpu_memory", m, 2 + m, used_bytes=u * gib, total_bytes=80 * gib, gpu=0) for m, u in used.items()]
    ev += [_ev("stats", m, 100 + m, source="logs/gpu-node-01.log", kv_usage=0.5) for m in (0, 1, 2, 3, 4, 40, 41, 42)]
    ev += [_ev("metric", m, 200 + m, source="metrics/a.prom", name="kv_cache_usage", value=0.9) for m in (3, 10)]
    ev = EvidenceSet(ev)
    chart = build_chart(ev, [Marker(datetime(2026, 1, 1, 10, 4, tzinfo=UTC), "impact start")], title="t", budget=0.9)
    gpu = next(s for s in chart.series if s.kind == "gpu_memory")
    assert [round(p.value) for p in gpu.points] == [95, 96, 98, 99, 0, 0, 92, 94]
    assert all(p.value > 0 for s in collect_series(ev) for p in s.points)      # the early-signal checks skip them
    root = ET.fromstring(chart.svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(ns + "text")]
    # zoomed scale kept (80-100%), the released readings on a 0% line under an axis break, named
    assert {"80%", "90%", "100%", "0%", "memory released"} <= set(texts)
    axes = [float(ln.get("y1")) for ln in root.iter(ns + "line")                # each panel's time axis
            if ln.get("stroke") == "#000" and ln.get("y1") == ln.get("y2") and ln.get("x1") == "56"]
    panel_bottom = min(axes)
    line = next(p for p in root.iter(ns + "polyline") if p.get("stroke") == "#0072B2")
    ys = [float(pt.split(",")[1]) for pt in line.get("points").split()]
    assert ys[4] == ys[5] == panel_bottom and max(ys[:4] + ys[6:]) < panel_bottom - 24    # drop, then reload
    # the KV stats line breaks at the 36-minute hole; two scrapes are two dots, not a line
    kv = [p for p in root.iter(ns + "polyline") if p.get("stroke-dasharray")]
    assert len(kv) == 2 and [len(p.get("points").split()) for p in kv] == [5, 3]
    assert len(list(root.iter(ns + "circle"))) == 2 + 1                          # the scrapes, and the legend's dot
    legend = " ".join(texts)
    assert "dotted vertical line: a key moment" in legend and "impact start 10:04:00" in legend
    assert "left blank" in legend and "axis break" in legend
    assert "left blank" in chart.legend and "axis break" in chart.legend and "key moments (impact start)" in chart.legend


def test_chart_labels_have_a_box_not_a_halo():
    svg = build_chart(EvidenceSet([_ev("stats", m, m + 1, source="logs/a.log", kv_usage=0.5) for m in range(5)]),
                      [Marker(datetime(2026, 1, 1, 10, m, tzinfo=UTC), name) for m, name in ((1, "impact start"),
                                                                                        (1, "detected"), (4, "resolved"))],
                      title="t").svg
    assert "paint-order" not in svg and 'stroke="#fff"' not in svg
    kids = list(ET.fromstring(svg))
    labels = [(r, t) for r, t in zip(kids, kids[1:]) if t.get("fill") == "#444" and t.text in ("impact start", "detected",
                                                                                               "resolved")]
    assert [t.text for _, t in labels] == ["impact start", "detected", "resolved"]
    assert all(r.tag.endswith("rect") and r.get("fill") == "#ffffff" for r, _ in labels)
    assert labels[0][1].get("y") != labels[1][1].get("y")                        # same moment: stacked, not overlaid


def test_chart_labels_read_in_a_non_browser_renderer():
    """cairosvg (like rsvg and Inkscape) paints a `paint-order` halo over its text: a white blob.
    Rasterise the golden chart and look for the glyphs inside each label's box."""
    try:
        import cairosvg
        from PIL import Image
    except (ImportError, OSError) as e:                 # OSError: no libcairo on this machine
        pytest.skip(f"cairosvg unusable here: {e}")
    import io

    svg = (sample("incident-a-multimodal-fleet") / "postmortem-memory.svg").read_text(encoding="utf-8")
    image = Image.open(io.BytesIO(cairosvg.svg2png(bytestring=svg.encode()))).convert("L")
    kids = list(ET.fromstring(svg))
    labels = [(r, t) for r, t in zip(kids, kids[1:]) if r.tag.endswith("rect") and t.tag.endswith("text")
              and t.get("fill") in ("#444", "#000")]
    assert [t.text for _, t in labels] == ["impact start", "detected", "first response", "mitigated", "resolved",
                                           "memory released"]
    for rect, text in labels:
        x, y, w, h = (float(rect.get(k)) for k in ("x", "y", "width", "height"))
        box = image.crop((int(x), int(y), int(x + w), int(y + h)))
        dark = sum(box.histogram()[:128])
        assert 4 * len(text.text) <= dark < 0.5 * box.width * box.height, (text.text, dark)


def test_gantt_says_what_it_leaves_out():
    from triage.postmortem.mermaid import MAX_MILESTONES, omitted
    from triage.timeline import Event

    t0 = datetime(2026, 3, 12, 14, 0, tzinfo=UTC)
    notes = [Event(t0 + timedelta(minutes=i), "note", "note", f"note {i}", (f"notes.jsonl:{i + 1}",)) for i in range(20)]
    alerts = [Event(t0 + timedelta(minutes=i, seconds=30), "alert_resolved", "recovery", f"ALERT X{i} resolved",
                    ("alerts/a.json:1",)) for i in range(10, 13)]
    assert gantt("INC-1", {}, notes + alerts).count(":milestone") == MAX_MILESTONES
    assert omitted(notes + alerts) == ("The diagram shows 1 of 3 recovery events and 13 of 20 notes (at most 14 "
                                       "events: the earliest, and the last); the timeline table lists them all.")
    assert omitted(notes[:MAX_MILESTONES]) == ""


def test_fragmentation_names_its_measure_and_why_it_counts():
    """A share of the reserved pool alone (13%) reads as no fragmentation at all: the cause says
    which measure that is, and what made it count (the amount against the request and the card)."""
    pm = render_postmortem(sample("chronic-fragmentation"))
    line = next(ln for ln in pm.markdown.splitlines() if ln.startswith("- **allocator_fragmentation**"))
    assert "9.87 GiB reserved but unallocated" in line
    assert "23x the failed request and 12% of the 79.19 GiB card" in line
    assert "reserved-but-unallocated / reserved it is 13% of the 77.69 GiB reserved" in line
    assert "fragmentation = " not in line


def test_excerpts_are_masked_before_they_are_cut():
    from triage.postmortem.signals import excerpt

    line = "args: Namespace(" + "x" * 250 + f", api_key='{SK}', hf_token='{HF}')"
    for limit in range(len(line) - 80, len(line), 3):
        cut = excerpt(line, limit)
        assert all(piece not in cut for secret in (SK, HF) for piece in _fragments(secret)), (limit, cut)


# -- the context contract, with an in-memory timeline --------------------------------------------------

@dataclasses.dataclass
class FakeTimeline:
    incident_id: str = "INC-X"
    title: str = "fake"
    events: list = dataclasses.field(default_factory=list)
    moments: dict = dataclasses.field(default_factory=dict)
    durations: dict = dataclasses.field(default_factory=dict)
    nodes: list = dataclasses.field(default_factory=list)
    fleet_size: int | None = None
    problems: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)


def test_context_from_a_fake_timeline_states_lessons_from_notes():
    from triage.postmortem.audit_steps import AuditSteps
    from triage.timeline import Event, Moment

    real = load_inputs(sample("incident-a-multimodal-fleet"))
    t0 = datetime(2026, 3, 12, 14, 16, 52, tzinfo=UTC)
    notes = [Event(t0 + timedelta(minutes=3), "note", "note", "scaling the fleet 16 -> 32, assuming load", ("notes.jsonl:1",)),
             Event(t0 + timedelta(minutes=4), "note", "note", "lucky: the staging cluster had spare A100s", ("notes.jsonl:2",)),
             Event(t0 + timedelta(minutes=5), "note", "note", "well: the bridge was up in two minutes", ("notes.jsonl:3",))]
    fake = FakeTimeline(events=notes, moments={
        "impact_start": Moment("impact_start", t0, "logs/gpu-node-07.log:515", "first GPU OOM"),
        "mitigated": Moment("mitigated", t0 + timedelta(minutes=20), "notes.jsonl:9", "note")},
        durations={"ttm": timedelta(minutes=20)}, fleet_size=16, missing=["no alerts"], problems=["x.log: out of order"])
    ctx, _ = build_context(Inputs(real.bundle, real.verdict, real.evidence, fake, {}, AuditSteps()),
                           now=datetime(2026, 3, 13, tzinfo=UTC))
    assert ctx.generated_at == "2026-03-13 00:00:00 UTC"
    assert ctx.durations["ttm"].text == "20 min 00 s" and ctx.durations["total"].text is None
    wrong = " ".join(c.text for c in ctx.lessons.went_wrong)
    assert "Scaling out before diagnosing" in wrong and "gpu-node-21" in wrong
    assert [c.text for c in ctx.lessons.lucky][-1] == "the staging cluster had spare A100s"
    assert [c.text for c in ctx.lessons.went_well] == ["the bridge was up in two minutes"]
    assert "no alerts" in ctx.missing and "x.log: out of order" in ctx.problems
    assert ctx.moments["detected"].time is None
    assert all(s.lead and s.lead.endswith("before impact") for s in ctx.detection.sooner)


def test_a_bundle_with_notes_but_no_evidence_still_renders_and_says_what_to_attach(tmp_path, runner):
    from triage.cli import main

    bundle = tmp_path / "bare"
    bundle.mkdir()
    (bundle / "notes.jsonl").write_text(json.dumps({"time": "2026-03-12T14:19:00Z", "recorded_at": "2026-03-12T14:19:05Z",
                                                    "author": "oncall", "text": "pods crash-looping"}) + "\n")
    result = runner.invoke(main, ["postmortem", str(bundle), "-o", "-"])
    assert result.exit_code == 0, result.stderr
    assert "triage verdict `unknown`" in result.stdout and "pods crash-looping" in result.stdout


def test_a_user_template_cannot_reach_python_internals(tmp_path, runner):
    from triage.cli import main

    evil = tmp_path / "evil.md.j2"
    evil.write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}\n")
    result = runner.invoke(main, ["postmortem", str(sample("incident-a-multimodal-fleet")), "--template", str(evil),
                                  "-o", "-"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "__subclasses__" not in result.stdout
