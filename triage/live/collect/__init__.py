"""Capturing an incident bundle from a live host (`triage collect`): one module per source, the
orchestration and manifest in collect.py."""
