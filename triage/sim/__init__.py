"""A small simulator of vLLM's OpenAI-compatible server, for drills, demos and end-to-end tests.

`python -m triage.sim serve MODEL [vLLM flags] --scenario NAME` starts a real HTTP server on
loopback that answers /health, /v1/models, /v1/completions and /metrics like vLLM 0.11 (V1
engine) and writes its log in vLLM's own format. A scenario makes it fail the way each OOM class
does, with the real log text, so `triage classify` and `triage recover` can be exercised
without a GPU:

    healthy         serves normally
    startup         exits 1 with the start-up KV-cache / free-memory error when the flags
                    overflow the simulated GPU (a long-context model when --max-model-len is not given)
    burst           a step with more than --burst-concurrency running requests, or a prefill of
                    more than --burst-prompt-tokens tokens, runs out of activation memory
    chronic         every request leaves --chronic-leak-mib-per-request of allocator fragments
                    until an OOM with a large reserved-but-unallocated amount
                    (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True prevents it)
    prefix_cache    cached prompt blocks are never evicted: KV usage climbs with every unshared
                    prompt until an OOM (--no-enable-prefix-caching prevents it)
    hang            /health answers 200 but completions never finish
    ignore_sigterm  SIGTERM is ignored (SIGKILL still works)
    orphan_worker   a worker child process that outlives a SIGKILLed server

Standard library only, plus prometheus_client for the exposition format.
"""
