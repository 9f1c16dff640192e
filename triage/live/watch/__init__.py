"""Watching running servers and their GPUs (`triage watch`): readings, the OOM-risk judgement,
the exporter and the dashboard."""
