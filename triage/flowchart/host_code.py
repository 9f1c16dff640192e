"""A failure raised in code that runs on the host CPU only: a lean away from a GPU OOM.

A request's tokenizing and chat template, tool-call and reasoning parsers, the grammar compilers of
structured output and the tokenizers run on the CPU: vLLM V1's API server process
never initialises the GPU, and its engine core compiles a request's grammar before any device work.
A failure whose stack ends in such code, or that such a module logged, allocated no GPU memory; with
nothing else failing and no memory words anywhere, an expert reads it as a software fault there. A
lean (triage/data/lookalikes.yaml `failure_in_host_code`), named as such. Which code is host code
is data (triage/data/phase_frames.yaml `host_code`).
"""
from __future__ import annotations

from ..evidence.kinds import Kind
from ..model import Evidence
from .context import Context
from .silent_on_memory import derived, open_failures, points_elsewhere, quiet_about_memory


def failure_in_host_code(ctx: Context) -> Evidence | None:
    """The derived record of failures that all happened in host-only code, or None."""
    failures = open_failures(ctx)
    if not failures:
        return None
    from .frames import frames    # the frame vocabulary is read only when a stack must decide

    vocab = frames()
    if not all(_in_host_code(rec, vocab) for rec in failures) or any(points_elsewhere(rec) for rec in failures):
        return None
    if not quiet_about_memory(ctx):
        return None
    return derived(failures, Kind.FAILURE_IN_HOST_CODE, "failure in host-only code")


def _in_host_code(rec: Evidence, vocab) -> bool:
    if rec.kind == Kind.TRACEBACK.value:
        # The innermost frame of known code decides: device work (or the engine relaying it) below
        # host code is a device failure reported through the host.
        for frame in reversed(rec.fields.get("frames") or []):
            if vocab.is_device(frame):
                return False
            if vocab.is_host(frame):
                return True
        return False
    logger = str(rec.fields.get("logger_file") or "")
    return rec.kind == Kind.EXCEPTION.value and bool(logger) and logger.endswith(vocab.host_loggers)
