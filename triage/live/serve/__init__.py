"""The Alertmanager webhook receiver (`triage serve`): payloads, queue, incidents, posts."""
