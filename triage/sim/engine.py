"""The simulated V1 engine: a scheduler loop over real requests, a KV cache and the failure rules.

One step every STEP_S: admit waiting requests while `max_num_seqs` and the KV cache allow,
generate one token for every running request (preempting the newest when the cache is full),
finish the ones that reached `max_tokens`. Tokens are whitespace-separated words, and the prefix
cache hashes whole 16-word blocks, so hit rates are real. The scenario rules decide when a
step runs out of GPU memory; the engine then stops and hands a `Failure` to its owner, which
writes the log lines and fails the requests' HTTP calls.
"""
from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from typing import Callable

from .args import SimArgs
from .memory import BLOCK_SIZE, MiB, Device, Sizing
from .texts import BURST_FRAMES, CHRONIC_FRAMES, PREFIX_CACHE_FRAMES, SAMPLER_FRAMES, Frame

STEP_S = 0.01                 # one decode step: one token for every running request
IDLE_WAIT_S = 0.2
RECENT_REQUESTS = 1000        # the V1 stats line's hit rate is over the last 1000 requests
CHRONIC_TRIED = 448 * MiB     # the compiled graph's intermediate buffer (a real 8B value)
MLP_BYTES_PER_TOKEN = 28672 * 2   # gate_up output row, bf16
# Llama-3's vocabulary: the float32 logits, their sorted copy and the sort's int64 indices
SAMPLER_BYTES_PER_SEQUENCE = 128256 * (4 + 4 + 8)
# burst: a step of more than --burst-concurrency requests runs out of memory only once the spike
# has filled the KV cache this far (the contexts in flight then make attention's and the sampler's
# buffers their largest). Below it vLLM serves such a batch, as a real one would: a handful of short
# requests on a nearly empty cache is no burst, and a log of one would not show any.
BURST_KV_USAGE = 0.90


class EngineDead(Exception):
    """The engine failed earlier; requests get a 500 like vLLM's EngineDeadError."""


@dataclass(eq=False)
class Request:
    rid: str
    prompt_tokens: int
    max_tokens: int
    blocks: tuple[int, ...]                       # prefix-chained hashes of the prompt's full blocks
    hit_tokens: int = 0
    generated: int = 0
    looked_up: bool = False
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def from_prompt(cls, rid: str, prompt: str, max_tokens: int) -> "Request":
        words = prompt.split()
        blocks, h = [], 0
        for i in range(0, len(words) - BLOCK_SIZE + 1, BLOCK_SIZE):
            h = hash((h, tuple(words[i:i + BLOCK_SIZE])))
            blocks.append(h)
        return cls(rid, max(1, len(words)), max(1, max_tokens), tuple(blocks))

    @property
    def tail_tokens(self) -> int:
        """Prompt tokens past the last full block (never cached)."""
        return self.prompt_tokens - BLOCK_SIZE * len(self.blocks)


@dataclass(frozen=True)
class Snapshot:
    running: int
    waiting: int
    kv_usage: float
    prompt_tokens: int
    generation_tokens: int
    prefix_queries: int
    prefix_hits: int
    preemptions: int
    finished: int
    recent_hit_rate: float
    dead: bool


@dataclass(frozen=True)
class Failure:
    kind: str                                     # burst | chronic | prefix_cache
    frames: list[Frame]
    oom: str                                      # the allocator's message
    running: int
    waiting: int
    kv_usage: float
    scheduled_tokens: int
    request_ids: tuple[str, ...]
    prefix_stats: tuple[int, int, int]            # requests, queries, hits
    exception: str = ""                           # the exception line, when not the allocator's OOM


def expandable_segments() -> bool:
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the allocator grows segments in place,
    so freed activation blocks do not pile up as unusable fragments."""
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        for opt in os.environ.get(var, "").split(","):
            key, _, value = opt.partition(":")
            if key.strip() == "expandable_segments" and value.strip().lower() == "true":
                return True
    return False


class Engine:
    def __init__(self, args: SimArgs, sizing: Sizing, on_failure: Callable[[Failure], None]) -> None:
        self.args = args
        self.capacity = sizing.kv_tokens
        self.device = Device(sizing)
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        # Prefix cache: block hash -> None, oldest first. In the prefix_cache scenario it is
        # never evicted and its blocks stay counted in KV usage (the leak the scenario models).
        self._cache: OrderedDict[int, None] = OrderedDict()
        self._leaky_cache = args.scenario == "prefix_cache" and args.prefix_caching
        self._fragmenting = args.scenario == "chronic" and not expandable_segments()
        self._recent: deque[tuple[int, int]] = deque(maxlen=RECENT_REQUESTS)
        self._totals = {"prompt": 0, "generation": 0, "queries": 0, "hits": 0, "preemptions": 0, "finished": 0}
        self._interval = [0, 0]                   # prompt, generation tokens since the last stats line
        self.dead = False

    # -- the API side ----------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        with self._cond:
            if self.dead:
                raise EngineDead()
            self._waiting.append(req)
            self._cond.notify()

    def abandon(self, req: Request) -> None:
        """The HTTP side gave up on a request (its deadline passed)."""
        with self._cond:
            if req in self._waiting:
                self._waiting.remove(req)
            if req in self._running:
                self._running.remove(req)

    def mark_dead(self) -> list[Request]:
        """Stop serving (the engine process went away); returns the requests that were in flight."""
        with self._cond:
            self.dead = True
            lost = list(self._running) + list(self._waiting)
            self._running.clear()
            self._waiting.clear()
        for req in lost:
            req.error = "EngineDeadError"
            req.done.set()
        return lost

    def snapshot(self) -> Snapshot:
        with self._cond:
            q = sum(x for x, _ in self._recent)
            h = sum(y for _, y in self._recent)
            t = self._totals
            return Snapshot(len(self._running), len(self._waiting), self._usage(), t["prompt"], t["generation"],
                            t["queries"], t["hits"], t["preemptions"], t["finished"], h / q if q else 0.0, self.dead)

    def take_interval(self) -> tuple[int, int]:
        with self._cond:
            out = (self._interval[0], self._interval[1])
            self._interval = [0, 0]
            return out

    # -- the engine loop ---------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._cond:
                if self.dead:
                    return
                failure = self._step()
                busy = bool(self._running) and self.args.scenario != "hang"
                if failure is None and not busy:
                    self._cond.wait(IDLE_WAIT_S)
                    continue
            if failure is not None:
                self._on_failure(failure)
                return
            time.sleep(STEP_S)

    def _step(self) -> Failure | None:
        prefill, failure = self._admit()
        if failure is not None:
            return failure
        if not self._running:
            return None
        failure = self._check_memory(prefill)
        if failure is not None:
            return failure
        if self.args.scenario == "hang":
            return None        # stuck in a collective: nothing ever progresses
        while self._running and self._used() + len(self._running) > self.capacity:
            if self._leaky_cache:
                return self._prefix_cache_oom()
            victim = self._running.pop()
            self._waiting.appendleft(victim)
            self._totals["preemptions"] += 1
        for req in self._running:
            req.generated += 1
        self._totals["generation"] += len(self._running)
        self._interval[1] += len(self._running)
        for req in [r for r in self._running if r.generated >= r.max_tokens]:
            self._finish(req)
        return None

    def _admit(self) -> tuple[int, Failure | None]:
        prefill = 0
        while self._waiting and len(self._running) < self.args.max_num_seqs:
            req = self._waiting[0]
            cost = self._cost(req)
            overflow = self._used() + cost > self.capacity
            if overflow and not (self._leaky_cache and cost <= self.capacity):
                break          # wait for KV space like vLLM does
            self._waiting.popleft()
            if not req.looked_up:
                self._lookup(req)
            self._running.append(req)
            prefill += min(req.prompt_tokens - req.hit_tokens, self.args.batched_tokens)
            if overflow:
                # The block manager counted the cached blocks as evictable and admitted the
                # request; they were not, and the step's buffers no longer fit.
                return prefill, self._prefix_cache_oom()
        return min(prefill, self.args.batched_tokens), None

    def _lookup(self, req: Request) -> None:
        req.looked_up = True
        hits = 0
        if self.args.prefix_caching:
            for h in req.blocks:
                if h not in self._cache:
                    break
                self._cache.move_to_end(h)
                hits += 1
            for h in req.blocks[hits:]:
                self._cache[h] = None
            if not self._leaky_cache:
                while len(self._cache) * BLOCK_SIZE > self.capacity:
                    self._cache.popitem(last=False)
            req.hit_tokens = min(hits * BLOCK_SIZE, req.prompt_tokens - 1)
            self._totals["queries"] += req.prompt_tokens
            self._totals["hits"] += req.hit_tokens
            self._recent.append((req.prompt_tokens, req.hit_tokens))
        self._totals["prompt"] += req.prompt_tokens
        self._interval[0] += req.prompt_tokens - req.hit_tokens

    def _finish(self, req: Request) -> None:
        self._running.remove(req)
        self._totals["finished"] += 1
        if self._fragmenting:
            self.device.fragments += int(self.args.chronic_leak_mib_per_request * MiB)
        req.done.set()

    # -- KV accounting -----------------------------------------------------------------------------
    def _cost(self, req: Request) -> int:
        """KV tokens admitting `req` takes now."""
        if self._leaky_cache:
            new_blocks = sum(1 for h in req.blocks if h not in self._cache)
            return new_blocks * BLOCK_SIZE + req.tail_tokens + req.generated
        return req.prompt_tokens + req.generated

    def _used(self) -> int:
        if self._leaky_cache:
            live = sum(r.tail_tokens + r.generated for r in self._running)
            return len(self._cache) * BLOCK_SIZE + live
        return sum(r.prompt_tokens + r.generated for r in self._running)

    def _usage(self) -> float:
        return min(1.0, self._used() / self.capacity) if self.capacity else 0.0

    # -- failures ----------------------------------------------------------------------------------
    def _check_memory(self, prefill: int) -> Failure | None:
        a = self.args
        if a.scenario == "burst":
            crowded = len(self._running) > a.burst_concurrency and self._usage() >= BURST_KV_USAGE
            if prefill > a.burst_prompt_tokens:
                return self._burst_oom(prefill + len(self._running))
            if crowded:
                return self._sampler_oom(len(self._running))
        if self._fragmenting and self.device.fragments and self.device.free < CHRONIC_TRIED:
            return self._failure("chronic", CHRONIC_FRAMES, CHRONIC_TRIED, 212 * MiB, len(self._running))
        return None

    def _burst_oom(self, tokens: int) -> Failure:
        """The step's gate_up buffer (one row per scheduled token) does not fit: the batch's other
        buffers already hold all but a sliver of what the card had left, and what is reserved but
        unallocated is smaller than the request (memory in use, not fragments)."""
        tried = _round_alloc(tokens * MLP_BYTES_PER_TOKEN)
        free_left = min(self.device.free, tried // 4)
        return self._failure("burst", BURST_FRAMES, tried, min(120 * MiB, tried // 4), tokens,
                             live=self.device.free - free_left)

    def _sampler_oom(self, sequences: int) -> Failure:
        """The sampler's sorted logits (every running sequence over the vocabulary, float32, twice)
        do not fit beside the step's other buffers."""
        tried = _round_alloc(sequences * SAMPLER_BYTES_PER_SEQUENCE)
        free_left = min(self.device.free, tried // 4)
        return self._failure("burst", SAMPLER_FRAMES, tried, min(120 * MiB, tried // 4), sequences,
                             live=self.device.free - free_left)

    def _prefix_cache_oom(self) -> Failure:
        """The scheduler counted leaked cached blocks as evictable; the pool cannot hand them out."""
        needed = max(1, -(-(self._used() - self.capacity) // BLOCK_SIZE))
        failure = self._failure("prefix_cache", PREFIX_CACHE_FRAMES, 0, 0, len(self._running))
        return replace(failure, exception=f"ValueError: Cannot get {needed} free blocks from the pool")

    def _failure(self, kind: str, frames: list[Frame], tried: int, slack: int, tokens: int, live: int = 0) -> Failure:
        tried = _round_alloc(tried)
        requests = len(self._recent)
        q = sum(x for x, _ in self._recent)
        h = sum(y for _, y in self._recent)
        return Failure(kind, frames, self.device.oom_message(tried, slack, live), len(self._running),
                       len(self._waiting), round(self._usage(), 4), tokens, tuple(r.rid for r in self._running),
                       (requests, q, h))


def _round_alloc(n: int) -> int:
    """The caching allocator rounds a large request up to a multiple of 2 MiB."""
    return -(-n // (2 * MiB)) * (2 * MiB)

