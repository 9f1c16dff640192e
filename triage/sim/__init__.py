"""A small simulator of vLLM's OpenAI-compatible server, for drills, demos and end-to-end tests.

`triage sim serve MODEL [vLLM flags] --scenario NAME [--log FILE]` (or `python -m triage.sim
serve ...`) starts a real HTTP server on loopback that answers /health, /v1/models,
/v1/completions and /metrics like vLLM 0.11 (V1 engine) and writes its log in vLLM's own format.
With `--port 0` it picks a free port; the URL is in the log (`Starting vLLM API server 0 on
http://...`) and on stdout together with the PIDs (`triage.sim: <scenario> server at
http://127.0.0.1:PORT (APIServer pid N, EngineCore_DP0 pid M[, Worker_TP0 pid W])`). A scenario
makes it fail the way each OOM class does, with the real log text, so `triage classify` and
`triage recover` can be exercised without a GPU:

    healthy         serves normally
    startup         exits 1 with the start-up KV-cache error when max_model_len does not fit
                    (without --max-model-len the model is a 1M-context one, which does not);
                    any scenario exits 1 with the free-memory error above utilisation 0.95.
                    With --log FILE, one line on stderr says why it exited and names the log
    burst           a step with more than --burst-concurrency running requests once a spike has
                    filled the KV cache to 90% runs out of memory in the sampler (its logits grow
                    with the sequences sampled), a prefill of more than --burst-prompt-tokens
                    tokens in the forward pass (its activations grow with the step's tokens)
    chronic         every request leaves --chronic-leak-mib-per-request of allocator fragments
                    until an OOM with a large reserved-but-unallocated amount
                    (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True prevents it)
    prefix_cache    a prefix-cache bug: cached prompt blocks are never released, KV usage climbs
                    with every unshared prompt, and the scheduler, counting them as evictable,
                    admits a request the block pool cannot serve ("Cannot get N free blocks from
                    the pool"; --no-enable-prefix-caching prevents it)
    hang            /health answers 200 but completions never finish
    ignore_sigterm  SIGTERM is ignored (SIGKILL still works)
    orphan_worker   a worker child process that outlives a SIGKILLed server

Each failure depends on the flags the advice changes (max_model_len, gpu_memory_utilization,
max_num_seqs, max_num_batched_tokens, prefix caching, the allocator setting), so a restart with
the advised flags and the same scenario serves normally.

Driving a drill so the log carries the evidence a classifier needs (tests/test_sim.py does this):
* burst: fill the KV cache for real, e.g. `--sim-gpu-gib 24 --sim-weights-gib 16 --max-model-len
  4096 --max-num-batched-tokens 8192` and 100 concurrent 1,000-word prompts (the README's drill)
  or 12 concurrent 3,200-word prompts (KV 98%, 9 running). With the default 16,384 batched tokens
  a step that admits 16 such prompts at once prefills more than --burst-prompt-tokens (16,000):
  the oversized-prefill failure, on a cache still half empty. The log then shows the load:
  stats lines, the scheduler-stats dump at the crash (running, waiting, KV usage) and an
  allocator message with the memory in use. On the default 80 GiB card a handful of short
  requests does not fill the cache and is served, as on a real server (V1 logs no preemption
  warnings; its /metrics counter has them).
* prefix_cache: pass `--enable-prefix-caching` explicitly and send unshared prompts for over a
  second (the stats line is written every second while busy).
* chronic: the default card; about (0.95 - utilisation) x card / leak requests until the OOM.
"""
