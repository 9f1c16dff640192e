"""Live systems. Shared: nvml.py (GPU readings), server.py (a server's /health and a real completion),
command.py (host commands with a timeout), source.py (one source's limits and status), staging.py
(a bundle written whole), procs.py (processes as /proc shows them). Per command: collect/, watch/, fleet/ (classify --prometheus), serve/."""
