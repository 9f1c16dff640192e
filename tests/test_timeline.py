"""The incident timeline on the real sample bundles and on small bundles built for one behaviour:
merging, collapsing, node grouping, order problems, corrupt journal lines, missing parts, CLI output."""
from __future__ import annotations

import csv
import io
import json
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from triage.cli import main
from triage.errors import BadInput, ExitCode
from triage.timeline import build_timeline, to_csv, to_frame, to_json
from triage.timeline.raw import node_from_file

from tests.conftest import sample

A = "incident-a-multimodal-fleet"
B = "prefix-cache-oom-b"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def bundle(tmp_path, files: dict[str, str], created: str = "2024-10-17T14:47:06Z", **meta) -> str:
    root = tmp_path / "incident"
    root.mkdir()
    lines = [f"id: INC-test", f"title: test incident", f'created: "{created}"', "timezone: UTC"]
    lines += [f"{k}: {v}" for k, v in meta.items()]
    (root / "incident.yaml").write_text("\n".join(lines) + "\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


def alert_payload(status: str, name: str, starts: str, ends: str = "0001-01-01T00:00:00Z", **labels) -> str:
    labels = {"alertname": name, "severity": "critical", **labels}
    return json.dumps({
        "receiver": "pager", "status": status, "version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0,
        "alerts": [{"status": status, "labels": labels, "annotations": {"summary": name},
                    "startsAt": starts, "endsAt": ends, "fingerprint": f"fp-{name}"}],
        "groupLabels": {"alertname": name}, "commonLabels": labels, "commonAnnotations": {},
    }, indent=2)


OOM = ("ERROR 10-17 14:47:06 async_llm_engine.py:63] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
       "245.61 MiB. GPU 0 has a total capacity of 79.35 GiB of which 96.00 MiB is free.\n")
PREEMPT = ("WARNING 10-17 {t} scheduler.py:1261] Sequence group cmpl-{i:032x}-0 is preempted by PreemptionMode.RECOMPUTE "
           "mode because there is not enough KV cache space. total_num_cumulative_preemption={n}\n")


# -- the two incidents of the write-ups -------------------------------------------------------------


def test_incident_a_moments_and_durations_match_the_write_up():
    tl = build_timeline(sample(A))
    m = tl.moments
    assert m["impact_start"].time == utc("2026-03-12T14:16:52Z")
    assert m["impact_start"].source == "logs/gpu-node-07.log:515" and "OOM" in m["impact_start"].how
    assert m["detected"].time == utc("2026-03-12T14:17:05Z")               # the page, not the alert's startsAt
    assert m["detected"].source == "alerts/2026-03-12T14-17-05Z.json:25"
    assert m["first_response"].time == utc("2026-03-12T14:19:00Z") and m["first_response"].source == "notes.jsonl:1"
    assert m["mitigated"].time == utc("2026-03-12T14:46:12.904Z") and "ChatAPIHighErrorRate" in m["mitigated"].how
    # "outage declared over" was noted by hand; the value computed from the alerts is kept beside it
    assert m["resolved"].time == utc("2026-03-12T14:46:39Z") and m["resolved"].source == "notes.jsonl:10"
    assert m["resolved"].computed is not None and m["resolved"].computed.time == utc("2026-03-12T14:46:12.904Z")
    d = tl.durations
    assert d["total"] == timedelta(minutes=29, seconds=47)                  # "29 min 47 s outage"
    assert d["ttd"] == timedelta(seconds=13)                                # 14:17 OOM -> 14:17 alert
    assert d["ttr"] == timedelta(minutes=1, seconds=55)                     # on-call joined 14:19
    assert d["ttm"] == timedelta(minutes=29, seconds=20, milliseconds=904)  # 14:46 error rate 0%
    assert tl.fleet_size == 16 and tl.problems == []
    assert {"gpu-node-03", "gpu-node-05", "gpu-node-07", "gpu-node-21"} <= set(tl.nodes)


def test_incident_b_moments_and_durations():
    tl = build_timeline(sample(B))
    m, d = tl.moments, tl.durations
    assert m["impact_start"].time == utc("2024-10-17T14:47:06Z")
    assert m["detected"].time == utc("2024-10-17T14:48:06Z")
    assert m["first_response"].source == "notes.jsonl:1"
    assert m["mitigated"].source == "actions.jsonl:10" and "health check" in m["mitigated"].how
    assert m["resolved"].time == utc("2024-10-17T14:59:06Z") and m["resolved"].computed is None
    assert (d["ttd"], d["ttr"], d["ttm"], d["total"]) == (timedelta(minutes=1), timedelta(minutes=1, seconds=6),
                                                          timedelta(minutes=11), timedelta(minutes=12))
    steps = [e for e in tl.events if e.sources[0].startswith("actions.jsonl")]
    assert len(steps) == 6 and all(e.until is not None and e.until >= e.time for e in steps)
    assert [e.kind for e in steps][-2:] == ["health_check_passed", "health_check_passed"]


def test_same_event_in_several_sources_is_one_row_listing_all():
    tl = build_timeline(sample(A))
    death = next(e for e in tl.events if e.kind == "engine_dead" and e.node == "gpu-node-07")
    # the engine's own line, AsyncEngineDeadError (no time of its own), the API server terminating, and
    # the container ending in kubectl
    assert death.sources == ("logs/gpu-node-07.log:444", "logs/gpu-node-07.log:557", "logs/gpu-node-07.log:563",
                             "k8s/pod.json:215")
    assert death.count == 1 and death.time == utc("2026-03-12T14:16:52Z")
    firing = [e for e in tl.events if e.kind == "alert_firing" and "GPUMemoryExhausted" in e.text]
    assert len(firing) == 1 and len(firing[0].sources) == 2     # the firing and the resolved payload


def test_kernel_oom_kill_and_pod_oomkilled_are_one_row_on_the_pod_node():
    tl = build_timeline(sample("not-gpu-host-oom"))
    kills = [e for e in tl.events if e.kind == "host_oom_kill"]
    assert len(kills) == 1 and kills[0].node == "gpu-node-14"
    assert kills[0].sources[0] == "gpu/dmesg.txt:1" and "k8s/pod.json:149" in kills[0].sources
    assert tl.moments["impact_start"].source == "gpu/dmesg.txt:1"


def test_fleet_events_are_grouped_per_node():
    tl = build_timeline(sample(A))
    groups = tl.by_node()
    assert [e.kind for e in groups["gpu-node-21"]] == ["server_start", "startup_complete", "engine_dead", "gpu_oom"]
    assert [e.kind for e in groups["gpu-node-07"] if e.category == "recovery"][0] == "restart"   # pod restart 14:17:14
    assert "memory_discrepancy" in {e.kind for e in groups["gpu-node-05"]}                      # 99.2% vs 0.95 budget
    assert all(e.node is None for e in groups[None])           # notes and fleet-wide alerts belong to no node


@pytest.mark.parametrize("name, node", [
    ("logs/gpu-node-07.log", "gpu-node-07"), ("gpu/nvidia-smi-gpu-node-05.csv", "gpu-node-05"),
    ("logs/vllm.log.gz", None), ("gpu/nvidia-smi.csv", None), ("metrics/2026-03-12T14-16-00Z.prom", None),
    ("gpu/nvidia-smi-compute-apps.csv", None), ("logs/vllm-0.log", "vllm-0"),
])
def test_node_from_file_name(name, node):
    assert node_from_file(name) == node


# -- collapsing, ordering, problems -----------------------------------------------------------------


def test_a_thousand_identical_preemption_warnings_become_one_row(tmp_path):
    start = datetime(2024, 10, 17, 13, 0, 0)
    lines = [PREEMPT.format(t=(start + timedelta(seconds=2 * i)).strftime("%H:%M:%S"), i=i, n=i + 1)
             for i in range(1000)]
    root = bundle(tmp_path, {"logs/vllm.log": "".join(lines) + OOM})
    tl = build_timeline(root)
    rows = [e for e in tl.events if e.kind == "preemption"]
    assert len(rows) == 1
    row = rows[0]
    assert row.count == 1000
    assert row.time == utc("2024-10-17T13:00:00Z") and row.until == utc("2024-10-17T13:33:18Z")
    assert row.sources[0] == "logs/vllm.log:1" and row.sources[-1] == "logs/vllm.log:1000"
    assert [e.kind for e in tl.events] == ["preemption", "gpu_oom"]


def test_repeats_are_not_collapsed_across_a_failure(tmp_path):
    text = (PREEMPT.format(t="14:40:00", i=1, n=1) + OOM
            + "INFO 10-17 14:49:00 api_server.py:459] vLLM API server version 0.6.0\n"
            + PREEMPT.format(t="14:55:00", i=2, n=51))
    tl = build_timeline(bundle(tmp_path, {"logs/vllm.log": text}))
    assert [(e.kind, e.count) for e in tl.events] == [("preemption", 1), ("gpu_oom", 1), ("restart", 1),
                                                       ("preemption", 1)]
    assert tl.events[2].category == "recovery"


def test_gpu_readings_without_an_engine_budget_mark_a_full_card_and_its_release(tmp_path):
    smi = ("timestamp, index, name, memory.used [MiB], memory.total [MiB]\n"
           "2024/10/17 14:40:00.000, 0, NVIDIA A100-SXM4-80GB, 70000 MiB, 81920 MiB\n"
           "2024/10/17 14:45:00.000, 0, NVIDIA A100-SXM4-80GB, 81000 MiB, 81920 MiB\n"
           "2024/10/17 14:48:00.000, 0, NVIDIA A100-SXM4-80GB, 0 MiB, 81920 MiB\n")
    tl = build_timeline(bundle(tmp_path, {"logs/vllm.log": OOM, "gpu/nvidia-smi.csv": smi}))
    assert [(e.kind, e.time.strftime("%H:%M")) for e in tl.events] == [
        ("gpu_memory_full", "14:45"), ("gpu_oom", "14:47"), ("gpu_memory_released", "14:48")]
    assert tl.events[0].sources == ("gpu/nvidia-smi.csv:3",)


def test_resolution_before_its_start_is_reported(tmp_path):
    root = bundle(tmp_path, {
        "logs/vllm.log": OOM,
        "alerts/2024-10-17T14-48-00Z.json": alert_payload("firing", "VLLMDown", "2024-10-17T14:47:30Z"),
        "alerts/2024-10-17T14-50-00Z.json": alert_payload("resolved", "VLLMDown", "2024-10-17T14:47:30Z",
                                                          "2024-10-17T14:40:00Z"),
    })
    tl = build_timeline(root)
    assert any(p.startswith("alerts/2024-10-17T14-50-00Z.json:") and "resolved" in p and "before it fired" in p
               for p in tl.problems), tl.problems
    # the resolution (14:40) is before the impact (14:47:06): said, not silently accepted
    assert tl.durations["total"] < timedelta(0)
    assert any("resolved" in p and "would be negative" in p for p in tl.problems)


def test_hand_set_moment_in_incident_yaml_keeps_the_computed_value(tmp_path):
    root = tmp_path / "b"
    shutil.copytree(sample(B), root)
    with open(root / "incident.yaml", "a") as fh:
        fh.write('moments:\n  detected: "2024-10-17T14:47:50Z"\n  bogus: "x"\n')
    tl = build_timeline(root)
    detected = tl.moments["detected"]
    assert detected.time == utc("2024-10-17T14:47:50Z") and detected.source == "incident.yaml"
    assert "incident.yaml moments.detected" in detected.how
    assert detected.computed.time == utc("2024-10-17T14:48:06Z")
    assert detected.computed.source == "alerts/2024-10-17T14-48-06Z.json:20"
    assert tl.durations["ttd"] == timedelta(seconds=44)
    assert any(p.startswith("incident.yaml moments.bogus") for p in tl.problems)


def test_corrupt_notes_lines_are_reported_with_their_line_number(tmp_path):
    good = json.dumps({"time": "2024-10-17T14:49:00Z", "text": "looking", "author": "a"})
    root = bundle(tmp_path, {"logs/vllm.log": OOM, "notes.jsonl": "\n".join([
        good, '{"time": "2024-10-17T14:5', '{"text": "no time"}', '["a list"]',
        json.dumps({"time": "yesterday", "text": "x"}), json.dumps({"time": "2024-10-17T14:52:00Z", "text": "ok"}),
    ]) + "\n"})
    tl = build_timeline(root)
    assert [p.split(":", 2)[:2] for p in tl.problems] == [["notes.jsonl", "2"], ["notes.jsonl", "3"],
                                                           ["notes.jsonl", "4"], ["notes.jsonl", "5"]]
    assert "not JSON" in tl.problems[0]
    assert [e.text for e in tl.events if e.kind == "note"] == ["looking", "ok"]


def test_corrupt_or_edited_audit_lines_are_reported_with_their_line_number(tmp_path):
    root = tmp_path / "b"
    shutil.copytree(sample(B), root)
    lines = (root / "actions.jsonl").read_text().splitlines(keepends=True)
    assert '"step":"stop"' in lines[2]
    lines[2] = lines[2].replace('"step":"stop"', '"step":"STOP"')           # an edited record
    lines[4] = lines[4][: len(lines[4]) // 2] + "\n"                        # a line cut in half
    (root / "actions.jsonl").write_text("".join(lines))
    tl = build_timeline(root)
    assert "actions.jsonl:3: hash mismatch (record edited)" in tl.problems, tl.problems
    assert "actions.jsonl:5: truncated or corrupt JSON" in tl.problems


def test_a_bundle_with_missing_parts_still_builds_and_says_what_is_missing(tmp_path):
    tl = build_timeline(bundle(tmp_path, {"logs/vllm.log": OOM}))
    assert [e.kind for e in tl.events] == ["gpu_oom"]
    assert tl.moments["impact_start"].time == utc("2024-10-17T14:47:06Z")
    assert tl.moments["detected"].time is None and tl.durations["ttd"] is None
    text = "\n".join(tl.missing)
    for part in ("no alerts/ — detection time unknown", "no notes.jsonl", "no actions.jsonl", "metrics/",
                 "mitigation time unknown", "resolution time unknown"):
        assert part in text


def test_notes_alone_make_a_timeline_and_no_incident_yaml_is_said(tmp_path):
    (tmp_path / "notes.jsonl").write_text(json.dumps({"time": "2024-10-17T14:49:00Z", "text": "paged"}) + "\n")
    tl = build_timeline(tmp_path)
    assert [e.kind for e in tl.events] == ["note"]
    assert any("no incident.yaml" in m for m in tl.missing) and any("no server logs" in m for m in tl.missing)


def test_bad_incident_paths_are_one_line_errors(tmp_path, runner):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.log").write_text(OOM)
    for path, words in ((tmp_path / "nope", "no such incident directory"), (tmp_path / "empty", "empty"),
                        (tmp_path / "file.log", "not a directory")):
        with pytest.raises(BadInput):
            build_timeline(path)
        result = runner.invoke(main, ["timeline", str(path)])
        assert result.exit_code == ExitCode.BAD_INPUT
        assert result.stderr.count("\n") == 1 and words in result.stderr and "Traceback" not in result.output


def test_event_texts_are_redacted(tmp_path):
    leak = "ERROR 10-17 14:46:00 serving.py:10] ValueError: bad header Authorization: Bearer abcdefghijklmnop1234\n"
    tl = build_timeline(bundle(tmp_path, {"logs/vllm.log": leak + OOM}))
    assert all("abcdefghijklmnop1234" not in e.text for e in tl.events)


# -- output -----------------------------------------------------------------------------------------


def test_to_frame_has_one_row_per_event_in_utc():
    tl = build_timeline(sample(B))
    frame = to_frame(tl)
    assert len(frame) == len(tl.events)
    assert list(frame.columns) == ["time", "until", "count", "node", "category", "kind", "text", "sources"]
    assert str(frame["time"].dt.tz) == "UTC" and frame["time"].is_monotonic_increasing


def test_cli_json_and_csv_parse(runner):
    out = runner.invoke(main, ["timeline", str(sample(A)), "--json"])
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "triage.timeline/v1"
    assert doc["durations"]["total"] == 1787.0 and doc["durations_text"]["total"] == "29m 47s"
    assert doc["moments"]["resolved"]["computed"]["time"] == "2026-03-12T14:46:12.904Z"
    assert all(e["time"].endswith("Z") for e in doc["events"])
    rows = list(csv.DictReader(io.StringIO(runner.invoke(main, ["timeline", str(sample(A)), "--csv"]).stdout)))
    assert len(rows) == len(doc["events"]) and rows[0]["time"] == doc["events"][0]["time"]
    assert {r["kind"] for r in rows} >= {"gpu_oom", "engine_dead", "alert_firing", "alert_resolved", "note"}


def test_cli_table_shows_moments_and_durations(runner):
    result = runner.invoke(main, ["timeline", str(sample(B))], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert "TTD 1m 00s" in result.stdout and "TTM 11m 00s" in result.stdout and "total 12m 00s" in result.stdout
    assert "health_check_passed" in result.stdout


def test_json_and_csv_together_is_a_usage_error(runner):
    assert runner.invoke(main, ["timeline", str(sample(B)), "--json", "--csv"]).exit_code == ExitCode.USAGE


def test_classification_ignores_notes_and_actions():
    from triage.api import classify_paths

    _, evidence = classify_paths([str(sample(B))])
    assert not any(s.path.endswith(".jsonl") for s in evidence.sources)
    assert not any(".jsonl" in w for w in evidence.warnings)


def test_preemptions_logged_in_one_second_are_each_counted(tmp_path):
    # The scheduler preempts many sequence groups in one step and warns once for each.
    lines = [PREEMPT.format(t=f"13:00:0{s}", i=10 * s + k, n=10 * s + k + 1) for s in range(3) for k in range(10)]
    tl = build_timeline(bundle(tmp_path, {"logs/vllm.log": "".join(lines) + OOM}))
    row = next(e for e in tl.events if e.kind == "preemption")
    assert row.count == 30 and row.time == utc("2024-10-17T13:00:00Z") and row.until == utc("2024-10-17T13:00:02Z")
    (tmp_path / "one").mkdir()
    one = build_timeline(bundle(tmp_path / "one", {"logs/vllm.log": "".join(lines[:5]) + OOM}))
    row = next(e for e in one.events if e.kind == "preemption")
    assert row.count == 5 and row.until == row.time


def test_node_labels_are_masked_like_the_text(tmp_path):
    # A blackbox probe's `instance` label is a URL, sometimes with credentials in it.
    root = bundle(tmp_path, {"logs/vllm.log": OOM, "alerts/2024-10-17T14-48-00Z.json": alert_payload(
        "firing", "VLLMDown", "2024-10-17T14:47:30Z", instance="https://probe:Pl4ntedPa55w0rd@10.0.0.7:9115")})
    tl = build_timeline(root)
    assert "https://probe:***@10.0.0.7" in tl.nodes
    assert "Pl4ntedPa55w0rd" not in json.dumps(to_json(tl)) and "Pl4ntedPa55w0rd" not in to_csv(tl)


def test_a_recovery_step_output_is_masked_before_it_is_cut(tmp_path):
    token = "hf_" + "Zq8Wn3Lp5Rt7Yv9Bx2Cd4Fg6Hj8Km0Ns"
    recs = [{"time": "2024-10-17T14:50:00Z", "run_id": "r", "step": "s", "action": "verify", "phase": "start"},
            {"time": "2024-10-17T14:51:00Z", "run_id": "r", "step": "s", "action": "verify", "phase": "end",
             "result": "ok", "output_tail": "x" * 185 + " " + token}]       # the 200-character cut falls in the token
    root = bundle(tmp_path, {"logs/vllm.log": OOM, "actions.jsonl": "".join(json.dumps(r) + "\n" for r in recs)})
    text = next(e.text for e in build_timeline(root).events if e.kind == "health_check_passed")
    assert "Zq8Wn3" not in text and "hf_***" in text


def test_unusable_incident_yaml_values_are_reported(tmp_path):
    root = bundle(tmp_path, {"logs/vllm.log": OOM}, fleet_size="sixteen", moments="[14:19]")
    text = (tmp_path / "incident" / "incident.yaml").read_text().replace('created: "2024-10-17T14:47:06Z"',
                                                                         'created: "yesterday-ish"')
    (tmp_path / "incident" / "incident.yaml").write_text(text)
    tl = build_timeline(root)
    problems = "\n".join(tl.problems)
    for words in ("incident.yaml created: 'yesterday-ish' is not a time", "incident.yaml fleet_size: 'sixteen'",
                  "incident.yaml moments: not a mapping"):
        assert words in problems, problems
    assert tl.fleet_size is None


def test_given_evidence_is_used_and_left_as_it_was(tmp_path, monkeypatch):
    import triage.evidence as ev_mod
    from triage.evidence import load_evidence

    root = tmp_path / "a"
    shutil.copytree(sample(A), root, ignore=shutil.ignore_patterns("postmortem*"))
    (root / "recovery").mkdir()
    (root / "recovery" / "relaunch.log").write_text(
        "INFO 03-12 14:40:00 api_server.py:459] vLLM API server version 0.7.1\n")
    evidence = load_evidence([str(root)], require=False)
    before = len(evidence.items)
    calls = []
    real = ev_mod.load_evidence
    monkeypatch.setattr(ev_mod, "load_evidence", lambda paths, **kw: calls.append(paths) or real(paths, **kw))
    tl = build_timeline(root, evidence=evidence)
    assert calls == [[str(root / "recovery")]]          # the bundle is not parsed again; only the relaunch logs
    assert len(evidence.items) == before                 # what was classified did not gain the relaunch logs
    assert any(s.startswith("recovery/") for e in tl.events for s in e.sources)
    assert [(e.kind, e.sources) for e in tl.events if not any(s.startswith("recovery/") for s in e.sources)] == \
        [(e.kind, e.sources) for e in build_timeline(sample(A)).events]


def test_a_watch_warning_is_a_signal_not_the_first_response(tmp_path):
    """`triage watch --incident` writes its warnings as notes; one written after the OOM, before the
    on-call engineer's first note, must not become the time to respond."""
    bundle = tmp_path / "A"
    shutil.copytree(sample(A), bundle)
    notes = bundle / "notes.jsonl"
    watch = json.dumps({"time": "2026-03-12T14:17:30Z", "author": "triage watch",
                        "text": "triage watch: http://10.0.0.7:8000: OOM risk burst (critical): KV cache 97% full"})
    notes.write_text(watch + "\n" + notes.read_text())
    tl = build_timeline(bundle)
    assert tl.moments["first_response"].time == utc("2026-03-12T14:19:00Z")
    (event,) = [e for e in tl.events if e.text.startswith("triage watch:")]
    assert (event.category, event.kind) == ("signal", "monitor_warning")
