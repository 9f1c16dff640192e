"""`triage note`: back-dating with --at, the date and zone it resolves against, refusals, redaction,
and appends that never interleave."""
from __future__ import annotations

import json
import multiprocessing
from datetime import datetime, timezone

import pytest

from triage.cli import main
from triage.errors import BadInput, ExitCode
from triage.timeline import build_timeline
from triage.timeline.notes import append_note, read_notes

NOW = datetime(2026, 3, 12, 15, 30, tzinfo=timezone.utc)


@pytest.fixture
def incident(tmp_path):
    def make(created: str = "2026-03-12T14:17:05Z", tz: str = "UTC"):
        root = tmp_path / f"inc-{tz.replace('/', '-')}-{created[:10]}"
        root.mkdir()
        (root / "incident.yaml").write_text(f'id: INC-1\ncreated: "{created}"\ntimezone: {tz}\n')
        return root
    return make


def lines(root) -> list[dict]:
    return [json.loads(ln) for ln in (root / "notes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("given, expected", [
    ("14:19", "2026-03-12T14:19:00.000Z"),
    ("14:19:30", "2026-03-12T14:19:30.000Z"),
    ("2026-03-12 14:19", "2026-03-12T14:19:00.000Z"),
    ("2026-03-12T15:19:00+01:00", "2026-03-12T14:19:00.000Z"),
    ("2026-03-12T14:19:00Z", "2026-03-12T14:19:00.000Z"),
])
def test_at_formats(incident, given, expected):
    root = incident()
    record = append_note(root, "scaled fleet to 32 nodes", at=given, author="dana", now=NOW)
    assert record["time"] == expected and record["at_given"] == given
    assert record["recorded_at"] == "2026-03-12T15:30:00.000Z" and record["author"] == "dana"
    assert lines(root) == [record]


def test_bare_time_says_which_date_and_zone_it_used(incident):
    record = append_note(incident(), "scaled out", at="14:19", now=NOW)
    assert "2026-03-12" in record["at_note"] and "incident.yaml" in record["at_note"] and "UTC" in record["at_note"]


def test_bare_time_is_in_the_incident_zone(incident):
    root = incident(created="2026-03-12T13:17:05Z", tz="Europe/Berlin")     # 14:17 in Berlin
    record = append_note(root, "scaled out", at="14:19", now=NOW)
    assert record["time"] == "2026-03-12T13:19:00.000Z"
    assert "Europe/Berlin" in record["at_note"]


def test_bare_time_after_midnight_lands_on_the_next_day(incident):
    root = incident(created="2026-03-11T23:50:00Z")
    assert append_note(root, "still down", at="00:10", now=NOW)["time"] == "2026-03-12T00:10:00.000Z"


def test_bare_time_before_midnight_lands_on_the_day_before(incident):
    # Opened just after midnight; the impact began before it. The day after, --at 23:55 is that evening.
    root = incident(created="2026-03-12T00:10:00Z")
    record = append_note(root, "first errors", at="23:55", now=NOW)
    assert record["time"] == "2026-03-11T23:55:00.000Z" and "2026-03-11" in record["at_note"]
    assert append_note(root, "paged", at="00:12", now=NOW)["time"] == "2026-03-12T00:12:00.000Z"


def test_without_incident_yaml_a_bare_time_is_today(tmp_path):
    record = append_note(tmp_path, "paged", at="09:00", now=NOW)
    assert record["time"] == "2026-03-12T09:00:00.000Z" and "today" in record["at_note"]


@pytest.mark.parametrize("given, words", [
    ("16:00", "in the future"), ("2026-03-13 10:00", "in the future"), ("25:00", "not a time of day"),
    ("yesterday", "not a time"), ("2026-03-12", "no time of day"),
])
def test_bad_or_future_times_are_refused(incident, given, words):
    root = incident()
    with pytest.raises(BadInput) as err:
        append_note(root, "x", at=given, now=NOW)
    assert words in str(err.value)
    assert not (root / "notes.jsonl").exists()          # nothing written half-way


def test_secrets_are_masked_and_the_text_is_one_line(incident):
    root = incident()
    record = append_note(root, "used token hf_abcdefghijklmnopqrstuvwxyz0123456789\nand --api-key sk-abcdefghijklmnopqrst",
                         now=NOW)
    assert "abcdefghijklmnopqrstuvwxyz0123456789" not in record["text"] and "hf_***" in record["text"]
    assert "sk-abcdefghijklmnopqrst" not in record["text"] and "\n" not in record["text"]
    assert record["time"] == record["recorded_at"] and "at_given" not in record


def test_empty_text_and_missing_directory_are_errors(incident, tmp_path):
    with pytest.raises(BadInput):
        append_note(incident(), "   ", now=NOW)
    with pytest.raises(BadInput):
        append_note(tmp_path / "nope", "x", now=NOW)


def _writer(args) -> None:
    root, n = args
    for i in range(10):
        append_note(root, f"writer {n} note {i} " + "x" * 300, author=f"w{n}", now=NOW)


def test_concurrent_appends_never_interleave(incident):
    root = incident()
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        pool.map(_writer, [(str(root), n) for n in range(6)])
    notes, problems = read_notes(root)
    assert problems == [] and len(notes) == 60
    assert sorted(n.text.split(" ")[1] for n in notes) == sorted(str(n) for n in range(6) for _ in range(10))


def test_a_note_can_set_a_moment_by_hand(incident):
    root = incident()
    (root / "logs").mkdir()
    (root / "logs" / "vllm.log").write_text(
        "ERROR 03-12 14:16:52 async_llm_engine.py:63] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "1.19 GiB. GPU 0 has a total capacity of 79.35 GiB of which 318.00 MiB is free.\n")
    append_note(root, "pager went off", at="14:18", moment="detected", now=NOW)
    append_note(root, "all good again #resolved", at="14:40", now=NOW)
    tl = build_timeline(root)
    assert tl.moments["detected"].time == datetime(2026, 3, 12, 14, 18, tzinfo=timezone.utc)
    assert tl.moments["detected"].source == "notes.jsonl:1" and tl.moments["detected"].computed.time is None
    assert tl.moments["resolved"].source == "notes.jsonl:2"
    assert tl.durations["total"].total_seconds() == 23 * 60 + 8


def test_cli_note_prints_what_it_wrote(runner, tmp_path):
    root = tmp_path / "inc"
    root.mkdir()
    (root / "incident.yaml").write_text('id: INC-2\ncreated: "2024-10-17T14:47:06Z"\ntimezone: UTC\n')
    result = runner.invoke(main, ["note", str(root), "scaled fleet to 32 nodes", "--at", "14:19", "--author", "dana"])
    assert result.exit_code == ExitCode.OK, result.stderr
    assert "noted at 2024-10-17T14:19:00.000Z" in result.stdout and "2024-10-17" in result.stdout
    assert lines(root)[0]["text"] == "scaled fleet to 32 nodes"
    bad = runner.invoke(main, ["note", str(root), "x", "--at", "2999-01-01 00:00"])
    assert bad.exit_code == ExitCode.BAD_INPUT and bad.stderr.count("\n") == 1 and "in the future" in bad.stderr
    moment = runner.invoke(main, ["note", str(root), "over", "--moment", "resolved"])
    assert moment.exit_code == ExitCode.OK and "(sets resolved)" in moment.stdout


def test_a_note_is_kept_when_incident_yaml_is_broken(runner, tmp_path):
    # In the middle of an outage a typo in incident.yaml must not stop people from taking notes.
    root = tmp_path / "inc"
    root.mkdir()
    (root / "incident.yaml").write_text('id: x\ntitle: "unterminated\n')
    result = runner.invoke(main, ["note", str(root), "rolled back gpu-node-05"])
    assert result.exit_code == ExitCode.OK, result.stderr
    assert lines(root)[0]["text"] == "rolled back gpu-node-05"
    assert "warning" in result.stderr and "incident.yaml" in result.stderr
    at = runner.invoke(main, ["note", str(root), "x", "--at", "14:19"])   # --at needs the date and zone
    assert at.exit_code == ExitCode.BAD_INPUT and "incident.yaml" in at.stderr and len(lines(root)) == 1
