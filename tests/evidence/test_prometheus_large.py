"""A /metrics scrape is read in memory bounded by the series triage keeps, whatever its
size: other exporters' series and histogram buckets are passed over unparsed, and of each metric
triage reads at most MAX_SERIES series become records (the rest is counted and noted). The
scrapes are made by tests/bigscrape.py (`python -m tests.bigscrape OUT 2000000` for a timing)."""
from __future__ import annotations

import shutil
import tracemalloc
from collections import Counter

import pytest

from triage.api import classify_paths
from triage.evidence import load_evidence, prometheus
from triage.evidence.base import InputFile, ParseContext
from triage.report import to_json
from triage.timeref import default_reference

from tests import bigscrape
from tests.conftest import sample

SERIES = 200_000
NAME = "2026-03-12T14-16-00Z.prom"
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
          "vllm:cache_config_info")
DCGM = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")


def _parse(data: bytes, name: str = NAME) -> tuple[InputFile, list]:
    src = InputFile(display=f"metrics/{name}", path=None, data=data)
    return src, list(prometheus.parse(src, ParseContext(times=default_reference())))


def _key(rec, line_offset: int = 0) -> tuple:
    return rec.kind, rec.line + line_offset if rec.line else rec.line, rec.text, rec.time, repr(rec.fields)


def test_a_scrape_of_many_servers_keeps_the_first_series_of_each_metric_in_bounded_memory():
    data = "".join(bigscrape.lines(SERIES)).encode()
    shape = bigscrape.shape(SERIES)
    units = [(m, e) for m in range(shape["models"]) for e in range(bigscrape.ENGINES)]
    cap = prometheus.MAX_SERIES
    assert len(units) > cap                          # every vLLM metric has more series than are kept
    import prometheus_client.parser  # noqa: F401  (its import is not what is measured)

    tracemalloc.start()
    try:
        src, recs = _parse(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    metrics = [r for r in recs if r.kind == "metric"]
    assert Counter(r.fields["metric"] for r in metrics) == {
        **{name: cap for name in GAUGES}, "vllm:request_success_total": cap, **{name: bigscrape.GPUS for name in DCGM}}
    # Bounded: the 8,256 records here are as many as for a scrape of 2 million series (the parser once
    # made 31,672 of this one, and ~45 MB of them). No more than they take.
    assert len(recs) == 8 * cap + 4 * bigscrape.GPUS
    assert peak < 32 << 20, f"{peak / 2**20:.1f} MiB"

    # The first series of each metric, in file order, each record citing its own line.
    kv = [r for r in metrics if r.fields["name"] == "kv_cache_usage"]
    assert [r.fields["labels"] for r in kv] == [{"engine": str(e), "model_name": bigscrape.model(m)}
                                                for m, e in units[:cap]]
    assert kv[0].fields["value"] == 0.9987 and kv[0].fields["labels"]["model_name"] == "incident-model"
    assert {r.time.isoformat() for r in recs} == {"2026-03-12T14:16:00+00:00"}
    lines = data.split(b"\n")
    for rec in metrics:
        line = lines[rec.line - 1].decode()
        assert line.startswith(rec.fields["metric"] + "{"), (rec.line, line)
        assert all(f'{k}="{v}"' in line for k, v in rec.fields["labels"].items()), (rec.line, line)
        assert float(line.rsplit(" ", 1)[1]) == rec.fields["value"]
    success = [r.fields["labels"]["finished_reason"] for r in metrics if r.fields["name"] == "request_success_total"]
    assert success == list(bigscrape.REASONS) * (cap // len(bigscrape.REASONS))
    [gpu0] = [r for r in recs if r.kind == "gpu_memory" and (r.fields["host"], r.fields["gpu"]) == ("gpu-node-00", "0")]
    assert (gpu0.fields["used_bytes"], gpu0.fields["total_bytes"]) == (81270 << 20, (81270 + 650) << 20)

    # What was left is counted and said, once.
    per_metric = {name: len(units) for name in GAUGES} | {"vllm:request_success_total": len(units) * len(bigscrape.REASONS)}
    left = sum(n - cap for n in per_metric.values())
    assert src.notes == [f"{left:,} series beyond the first {cap:,} of their metric not read (vllm:request_success_total, "
                         "vllm:cache_config_info, vllm:kv_cache_usage_perc and 5 more): a scrape of many servers? "
                         "Scraped alone, the one that failed is read whole"]


def test_the_limit_counts_series_so_later_readings_of_a_kept_one_are_read(monkeypatch):
    monkeypatch.setattr(prometheus, "MAX_SERIES", 2)
    data = (b"# 2026-03-12 14:16:00Z\n"
            b'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5\n'
            b'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.6\n'
            b'vllm:kv_cache_usage_perc{engine="0",model_name="c"} 0.7\n'
            b'vllm:num_requests_waiting{engine="0",model_name="c"} 3\n'
            b"# 2026-03-12 14:17:00Z\n"
            b'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.9\n'
            b'vllm:kv_cache_usage_perc{engine="0",model_name="d"} 0.8\n')
    src, recs = _parse(data, "scrape.prom")
    assert [(r.line, r.fields["labels"]["model_name"], r.fields["value"], r.time.minute) for r in recs] == [
        (2, "a", 0.5, 16), (3, "b", 0.6, 16), (5, "c", 3, 16), (7, "a", 0.9, 17)]
    assert src.notes[0].startswith("2 series beyond the first 2 of their metric not read (vllm:kv_cache_usage_perc)")


def test_padding_with_other_exporters_changes_no_record_and_no_verdict(tmp_path):
    """A sample bundle whose scrapes carry 60,000 more series of other exporters (before and
    after vLLM's): the same records, one per line of vLLM's, and the same verdict."""
    plain, padded = tmp_path / "plain", tmp_path / "padded"
    shutil.copytree(sample("prefix-cache-oom-b"), plain)
    shutil.copytree(sample("prefix-cache-oom-b"), padded)
    pad = 30_000
    for prom in (padded / "metrics").glob("*.prom"):
        before = "".join(bigscrape.other_lines(0, pad - 4))      # and HELP and TYPE of its two families
        prom.write_text(before + prom.read_text() + "".join(bigscrape.other_lines(pad, pad)))

    def metric_records(bundle, offset):
        return [_key(e, offset if e.source.startswith("metrics/") else 0)
                for e in load_evidence([str(bundle)]).items if e.source.startswith("metrics/")]

    assert metric_records(padded, -pad) == metric_records(plain, 0) != []
    plain_out, padded_out = (to_json(classify_paths([str(b)])[0]) for b in (plain, padded))
    for item in padded_out["evidence"]:
        if item["source"].startswith("metrics/"):
            item["line"] -= pad
    assert padded_out == plain_out
    assert plain_out["verdict"]["class"] == "burst"


@pytest.mark.parametrize("block", [1, 7, 100])
def test_lines_cut_by_the_read_blocks_are_read_whole(monkeypatch, block):
    path = sample("healthy-no-oom") / "metrics" / "2025-10-28T09-07-00Z.prom"
    data = path.read_bytes() + b"vllm:num_requests_waiting 7"            # a last line without newline
    _, expected = _parse(data)
    monkeypatch.setattr(prometheus, "_BLOCK_BYTES", block)
    _, got = _parse(data)
    assert [_key(r) for r in got] == [_key(r) for r in expected] and got[-1].fields["value"] == 7


def test_an_over_long_line_is_skipped_and_the_line_numbers_after_it_stay_right(monkeypatch):
    monkeypatch.setattr(prometheus, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(prometheus, "_BLOCK_BYTES", 64)
    long = b'vllm:kv_cache_usage_perc{model_name="' + b"x" * 5000 + b'"} 0.1\n'
    other = b"".join(b'node_load1{instance="%d"} 0.5\n' % i for i in range(60))
    data = (long + b'vllm:kv_cache_usage_perc{model_name="m"} 0.2\n'         # read line by line
            + other + long + b'vllm:kv_cache_usage_perc{model_name="m"} 0.3\n'     # a block at a time
            + long.rstrip(b"\n"))                                                # the end of the file
    src, recs = _parse(data)
    assert [(r.line, r.fields["value"]) for r in recs] == [(2, 0.2), (64, 0.3)]
    assert src.notes == ["3 lines longer than the 0 MiB line limit skipped; the rest of the file was read"]
