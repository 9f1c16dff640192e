"""/metrics scrapes (vLLM V0/V1 names, DCGM exporter) through prometheus-client's own parser.

One file is one scrape; several scrape files (metrics/2026-03-12T14-16-00Z.prom, ...) make a
time series. Only the series triage reasons about become records, under one vocabulary across
versions (V0 `gpu_cache_usage_perc` and V1 `kv_cache_usage_perc` are both `kv_cache_usage`).
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Iterator

from ..errors import BadInput
from ..model import Evidence
from ..timeref import parse_iso
from ..units import byte_count, finite_float, whole
from .base import InputFile, ParseContext
from .kinds import Kind

NAME = "prometheus"

# exposed sample name -> concept
CONCEPTS = {
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:cpu_cache_usage_perc": "cpu_kv_cache_usage",
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "requests_waiting",
    "vllm:num_requests_swapped": "requests_swapped",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:gpu_prefix_cache_hit_rate": "prefix_cache_hit_rate",
    "vllm:gpu_prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:gpu_prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
    "vllm:request_success_total": "request_success_total",
    "vllm:cache_config_info": "cache_config",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "fb_reserved_mib",
    "DCGM_FI_DEV_XID_ERRORS": "xid_last",
    "dcgm_fb_used": "fb_used_mib",
    "dcgm_fb_free": "fb_free_mib",
    "dcgm_xid_errors": "xid_last",
}
_SAMPLE_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|NaN|Inf)(?:\s+-?\d+)?\s*$")
_SAMPLE_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?=[{\s])")
_STAMP_IN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[-:](\d{2})[-:](\d{2})(Z)?")


def sniff(head: bytes, name: str) -> int:
    text = head.decode("utf-8", errors="replace")
    lines = [ln for ln in text.splitlines()[:200] if ln.strip()]
    if not lines:
        return 0
    typed = sum(1 for ln in lines if ln.startswith(("# HELP ", "# TYPE ")))
    samples = sum(1 for ln in lines if _SAMPLE_LINE.match(ln))
    content = [ln for ln in lines if not ln.startswith("#")]   # other comments (dates, notes) are neutral
    if typed and samples and (typed + samples) >= 0.8 * len(lines):
        return 80
    if samples >= 3 and samples >= 0.8 * len(content):
        return 60
    return 0


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    """Stream the scrape; only series in CONCEPTS go through prometheus-client's parser (one
    line at a time, so each record cites its own line and a huge scrape stays cheap)."""
    when = scrape_time(src)
    framebuffer: dict[tuple, dict[str, Any]] = {}
    samples = checked = 0
    error: Exception | None = None
    with src.open() as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.decode("utf-8", errors="replace").strip()
            if line.startswith("#"):
                stamp = parse_iso(line.lstrip("# ").strip()) if not line.startswith(("# HELP", "# TYPE", "# EOF")) else None
                when = stamp or when   # "# 2025-06-02 09:00" above a pasted scrape dates it
                continue
            if not line:
                continue
            name = _SAMPLE_NAME.match(line)
            if name is None:
                continue   # a stray line in a pasted excerpt
            if name.group(0) not in CONCEPTS:
                # Other series are not needed; validate a few so that garbage is still refused.
                if checked < 50:
                    checked += 1
                    try:
                        _parse_line(line)
                    except (ValueError, TypeError, IndexError) as exc:
                        error = error or exc
                        continue
                samples += 1
                continue
            try:
                parsed = _parse_line(line)
            except (ValueError, TypeError, IndexError) as exc:
                error = error or exc
                continue
            samples += 1
            for sample_name, labels, value, stamp in parsed:
                yield from _records(src, ctx, sample_name, labels, value, stamp, when, lineno)
                concept = CONCEPTS.get(sample_name, "")
                if concept.startswith("fb_"):
                    key = (when, labels.get("Hostname") or labels.get("hostname"), labels.get("gpu"), labels.get("UUID"))
                    framebuffer.setdefault(key, {"labels": labels, "line": lineno})[concept] = value
    if not samples:
        raise BadInput(src.display, f"not a valid Prometheus exposition ({error or 'no samples'})")
    yield from _framebuffer(src, ctx, framebuffer)


def _parse_line(line: str) -> list[tuple[str, dict[str, str], float, Any]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [(s.name, dict(s.labels), s.value, s.timestamp)
            for fam in text_string_to_metric_families(line + "\n") for s in fam.samples]


def _framebuffer(src: InputFile, ctx: ParseContext, fb: dict[tuple, dict[str, Any]]) -> Iterator[Evidence]:
    """DCGM's used/free/reserved (MiB) per GPU and scrape -> one GPU_MEMORY reading with its total."""
    for (when, host, gpu, uuid), v in fb.items():
        used = v.get("fb_used_mib")
        if used is None:
            continue
        parts = [v.get(k) for k in ("fb_used_mib", "fb_free_mib", "fb_reserved_mib")]
        total = _mib(sum(p for p in parts if p is not None)) if v.get("fb_free_mib") is not None else None
        used_bytes = _mib(used)
        if used_bytes is None:
            continue
        yield ctx.evidence(src, v["line"], Kind.GPU_MEMORY,
                           f"DCGM framebuffer GPU {gpu}{' on ' + host if host else ''}: {used_bytes >> 20} MiB used",
                           time=when, source="dcgm", used_bytes=used_bytes, total_bytes=total,
                           free_bytes=_mib(v["fb_free_mib"]) if v.get("fb_free_mib") is not None else None,
                           gpu=gpu, uuid=uuid, host=host, name=v["labels"].get("modelName"))


def _mib(value: float) -> int | None:
    """MiB (DCGM's unit, a whole number) -> bytes."""
    count = byte_count(value)
    return count << 20 if count is not None else None


def sample_records(src: InputFile, ctx: ParseContext, line: str, lineno: int, when: datetime | None) -> list[Evidence]:
    """A single exposition line found inside a text paste (e.g. a corpus metrics.txt)."""
    try:
        parsed = _parse_line(line.strip())
    except (ValueError, TypeError, IndexError):
        return []
    return [rec for name, labels, value, stamp in parsed
            for rec in _records(src, ctx, name, labels, value, stamp, when, lineno)]


def _records(src: InputFile, ctx: ParseContext, name: str, labels: dict[str, str], value: float,
             stamp: Any, when: datetime | None, line: int | None) -> Iterator[Evidence]:
    concept = CONCEPTS.get(name)
    if concept is None:
        return
    if finite_float(value) is None:
        return          # NaN / ±Inf (valid exposition, but no reading); noted as dropped
    t = when
    if stamp is not None:
        try:
            t = datetime.fromtimestamp(float(stamp), tz=timezone.utc)
        except (OverflowError, ValueError, OSError, TypeError):
            t = when
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    text = f"{name}{{{label_text}}} {value}"
    fields: dict[str, Any] = {"name": concept, "metric": name, "value": value, "labels": labels}
    if concept == "prefix_cache_hit_rate" and value < 0:
        fields["disabled"] = True
    yield ctx.evidence(src, line, Kind.METRIC, text, time=t, **fields)
    code = whole(value) if concept == "xid_last" else None
    if code is not None and code > 0:
        yield ctx.evidence(src, line, Kind.XID, f"DCGM last Xid {code} on GPU {labels.get('gpu')}", time=t,
                           code=code, pci=labels.get("pci_bus_id"), detail="reported by dcgm-exporter")


def scrape_time(src: InputFile) -> datetime | None:
    """A scrape's time: from its name (metrics/2026-03-12T14-16-00Z.prom), else unknown."""
    if src.taken_at is not None:
        return src.taken_at
    m = _STAMP_IN_NAME.search(src.name)
    if not m:
        return None
    return parse_iso(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}Z")
