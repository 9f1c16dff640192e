"""`triage prove`: drive a server at the incident's own peak load and say whether the fix holds.

The load profile (concurrency, prompt and output lengths) comes from the incident's evidence
(`peak.py`), a profile file or the command line (`profile.py`); the target is checked before a
request is sent (`target.py`: loopback unless allowed); `load.py` ramps closed-loop workers up to
the profile's concurrency and holds it for the duration while `monitor.py` samples /metrics and
NVML; `result.py` turns it into held or failed, with the first failure, memory headroom and
latency; `record.py` writes the run into the incident's audit log, where the timeline shows it.
"""
from __future__ import annotations

from .profile import Limits, LoadProfile
from .result import ProveResult
from .run import ProveOptions, run_prove

__all__ = ["Limits", "LoadProfile", "ProveOptions", "ProveResult", "run_prove"]
