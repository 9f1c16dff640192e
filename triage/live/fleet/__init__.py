"""A fleet classified from the series Prometheus holds (`triage classify --prometheus`)."""
