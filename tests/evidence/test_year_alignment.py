"""Year-less log stamps placed in the year of the bundle's dated evidence when the file's mtime
would put them far from it (a bundle analysed long after it was copied)."""
from __future__ import annotations

from pathlib import Path

import yaml

from triage.evidence import load_evidence

LOG = (
    "INFO 09-05 11:58:47 [loggers.py:123] Engine 000: Avg prompt throughput: 1104.0 tokens/s, Avg generation "
    "throughput: 234.0 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 17.7%, Prefix cache hit rate: 22.4%\n"
    "ERROR 09-05 12:03:31 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. "
    "GPU 0 has a total capacity of 79.19 GiB of which 58.06 MiB is free. Of the allocated memory 77.95 GiB is "
    "allocated by PyTorch, and 236.40 MiB is reserved by PyTorch but unallocated.\n"
)


def csv(year: int) -> str:
    return ("timestamp, name, memory.used [MiB], memory.total [MiB]\n"
            + "".join(f"{year}/09/0{d} 12:00:00.412, NVIDIA H100 80GB HBM3, {74000 + d * 1000} MiB, 81559 MiB\n"
                      for d in range(1, 6)))


def bundle(tmp_path: Path, csv_year: int, incident: dict | None = None) -> Path:
    (tmp_path / "server.log").write_text(LOG)
    (tmp_path / "gpu.csv").write_text(csv(csv_year))
    if incident:
        (tmp_path / "incident.yaml").write_text(yaml.safe_dump(incident))
    return tmp_path


def log_years(ev) -> set[int]:
    return {e.time.year for e in ev.items if e.source == "server.log" and e.time is not None}


def log_note(ev) -> str:
    return next(s.time_note for s in ev.sources if s.path == "server.log")


def test_a_log_guessed_into_the_wrong_year_moves_to_the_dated_evidence(tmp_path):
    # The files were written today (2026 or later): the mtime would date the log a year after the CSV.
    ev = load_evidence([str(bundle(tmp_path, 2024))])
    assert log_years(ev) == {2024}
    assert "dates in gpu.csv" in log_note(ev)
    oom = next(e for e in ev.items if e.kind == "torch_oom")
    last_reading = max(e.time for e in ev.items if e.kind == "gpu_memory")
    assert oom.time > last_reading          # the OOM follows the readings, as it did


def test_a_log_already_near_the_dated_evidence_is_left_alone(tmp_path):
    from datetime import datetime, timezone

    this_year = datetime.now(timezone.utc).year
    ev = load_evidence([str(bundle(tmp_path, this_year))])
    assert "file mtime" in log_note(ev)


def test_the_incident_metadata_year_is_never_overridden(tmp_path):
    ev = load_evidence([str(bundle(tmp_path, 2024, {"id": "INC-1", "created": "2025-09-06T10:00:00Z"}))])
    assert log_years(ev) == {2025}
    assert "incident.yaml" in log_note(ev)


def test_a_forced_year_is_never_overridden(tmp_path):
    ev = load_evidence([str(bundle(tmp_path, 2024))], year=2023)
    assert log_years(ev) == {2023}


def test_a_log_that_runs_on_for_days_after_the_last_reading_stays_in_its_year(tmp_path):
    (tmp_path / "gpu.csv").write_text("timestamp, name, memory.used [MiB], memory.total [MiB]\n"
                                      "2024/09/01 12:00:00.000, NVIDIA H100 80GB HBM3, 74000 MiB, 81559 MiB\n"
                                      "2024/09/02 12:00:00.000, NVIDIA H100 80GB HBM3, 75000 MiB, 81559 MiB\n")
    (tmp_path / "server.log").write_text(LOG.replace("09-05", "09-08"))   # six days after the last reading
    ev = load_evidence([str(tmp_path)])
    assert log_years(ev) == {2024}
    assert log_note(ev).startswith("year-less times read as 2024 (nearest the dates in gpu.csv)")


def test_a_realigned_log_keeps_its_place_and_the_other_inputs_their_records(tmp_path):
    root = bundle(tmp_path, 2024)
    (root / "zz.csv").write_text(csv(2024))
    # the log named again beside its directory is read once
    ev = load_evidence([str(root), str(root / "server.log")])
    assert [s.path.rsplit("/", 1)[-1] for s in ev.sources] == ["gpu.csv", "server.log", "zz.csv"]
    per_source = {s.path: s.records for s in ev.sources}
    assert all(sum(1 for e in ev.items if e.source == path) == n for path, n in per_source.items())
    assert [e.seq for e in ev.items] == sorted(e.seq for e in ev.items)
    assert {e.time.year for e in ev.items if e.source.endswith("server.log")} == {2024}
