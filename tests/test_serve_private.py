"""What `triage serve` keeps of an alert holds no secret, and only its user can read it; the
exporter of `triage watch` labels a server without its credentials. In-process and fast: the
end-to-end runs are in test_secrets_everywhere.py.
"""
from __future__ import annotations

import json
from pathlib import Path

TOKEN = "Tk9xQ2mL7vRz5a"
PASSWORD = "Pw4hB8nC1dF6gJ"
SIG = "Sg3kM7pQ2rT9wY"


def _payload() -> dict:
    alert = {"status": "firing", "labels": {"alertname": "VLLMDown", "instance": "gpu-1:8000", "token": TOKEN},
             "annotations": {"description": f"db password={PASSWORD}"}, "startsAt": "2024-11-06T14:16:21Z",
             "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "ab12",
             "generatorURL": f"http://p:{PASSWORD}@prom:9090/graph?access_token={TOKEN}&sig={SIG}"}
    return {"version": "4", "status": "firing", "receiver": "triage", "alerts": [alert],
            "externalURL": f"http://am:9093/?token={TOKEN}"}


def _clean(text: str) -> bool:
    return not any(s in text for s in (TOKEN, PASSWORD, SIG))


def test_a_payload_is_masked_as_it_is_read():
    from triage.live.serve.alert_payload import envelope_bytes, from_envelope, parse_payload

    [alert] = parse_payload(json.dumps(_payload()).encode()).alerts
    assert _clean(json.dumps(alert.envelope)) and alert.labels["token"] == "***"
    assert alert.key == "ab12@2024-11-06T14:16:21Z"
    assert from_envelope(alert.envelope).key == alert.key          # as the journal gives it back
    assert _clean(envelope_bytes(alert).decode())


def test_the_journal_is_masked_and_private_even_when_an_older_one_was_not(tmp_path: Path):
    from triage.live.serve.alert_journal import FILENAME, STATE_DIR, Journal
    from triage.live.serve.alert_payload import parse_payload

    state = tmp_path / STATE_DIR
    state.mkdir()
    old = state / FILENAME
    raw = {"op": "accept", "key": "k1@2024-11-06T14:00:00Z", "at": "2099-01-01T00:00:00.000Z",
           "alert": _payload()}
    old.write_text(json.dumps(raw) + "\n")
    old.chmod(0o644)
    journal = Journal(tmp_path)                        # read and rewritten at start
    assert old.stat().st_mode & 0o777 == 0o600 and _clean(old.read_text())
    old.chmod(0o644)
    [alert] = parse_payload(json.dumps(_payload()).encode()).alerts
    journal.accept([(alert.key, alert.envelope)])
    assert old.stat().st_mode & 0o777 == 0o600 and _clean(old.read_text())
    for line in old.read_text().splitlines():
        json.loads(line)
    assert journal.get(alert.key) is not None


def test_a_kept_message_is_masked_and_private(tmp_path: Path):
    from triage.live.serve.alert_post import Poster

    kept = Poster("http://127.0.0.1:9/hook", tmp_path).keep("INC", {"text": f'login password="{PASSWORD} x"',
                                                                    "url": f"https://u:{PASSWORD}@h/?sig={SIG}"})
    assert kept.stat().st_mode & 0o777 == 0o600
    text = kept.read_text()
    assert _clean(text) and json.loads(text)["url"] == "https://u:***@h/?sig=***"


def test_series_labels_are_masked_in_the_bundle():
    from triage.live.fleet.promapi import Series
    from triage.live.serve.alert_sources import exposition

    series = Series({"__name__": "up", "endpoint": f"https://s:{PASSWORD}@h/m?token={TOKEN}"}, ((1.0, 1.0),))
    text = exposition([series]).decode()
    assert _clean(text) and 'endpoint="https://s:***@h/m?token=***"' in text


def test_the_exporter_labels_a_server_with_its_credentials_masked():
    from triage.live.watch.exporter import server_label

    url = f"http://w:{PASSWORD}@127.0.0.1:8000/?token={TOKEN}&access_token={TOKEN}x&sig={SIG}"
    assert server_label(url) == "http://w:***@127.0.0.1:8000/?token=***&access_token=***&sig=***"
    assert server_label("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_a_journal_link_planted_after_the_start_is_not_written_through(tmp_path: Path):
    from triage.errors import TriageError
    from triage.live.serve.alert_journal import Journal

    journal = Journal(tmp_path)
    target = tmp_path / "elsewhere"
    target.write_text("")
    journal.path.unlink()
    journal.path.symlink_to(target)
    try:
        journal.record("fail", "k")
    except TriageError as exc:
        assert "symbolic link" in str(exc)
    else:
        raise AssertionError("a journal that is a symbolic link was written through")
    assert target.read_text() == ""
