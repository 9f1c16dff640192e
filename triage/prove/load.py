"""The load itself: closed-loop workers over one aiohttp session, ramped up, held, bounded.

Worker k starts at k/concurrency of the ramp and then sends one completion after another, so
the server holds `concurrency` requests at once for the whole hold — the shape of a peak, not an
open-loop rate a slow server would let pile up without bound. Every prompt is a fresh list of
random token ids (vLLM takes token ids as the prompt; the lengths are exact and no two requests
share a cached prefix), `ignore_eos` makes every output full length. The first failed request
stops the load at once: a server that is dying needs no more traffic to prove it.

Bounds: the request count (`Limits.max_requests`), the hold, each request's timeout, and a
drain after the hold (requests still in flight then are cut, not failed). Cancelling the run's
task (Ctrl-C) cancels every request in flight; closing the session closes their connections.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .monitor import Peaks, sample_once
from .profile import Limits, LoadProfile

ERROR_BODY_BYTES = 1 << 20
TOKEN_LOW, TOKEN_HIGH = 1000, 30000        # ids inside every common vocabulary, away from specials


@dataclass(frozen=True)
class Failure:
    time_s: float            # since the load started
    phase: str               # ramp | hold | drain
    kind: str                # http_status | connection | timeout | bad_answer
    status: int | None
    detail: str


@dataclass
class LoadState:
    started: float = 0.0
    hold_from: float = 0.0
    sent: int = 0
    served: int = 0
    failed: int = 0
    cut: int = 0
    latencies: list[float] = field(default_factory=list)
    first_failure: Failure | None = None
    interrupted: bool = False
    request_bound_hit: bool = False          # --max-requests ended the hold early
    load_end_s: float | None = None          # when the last request was sent, or the hold ended
    elapsed_s: float = 0.0
    peaks: Peaks = field(default_factory=Peaks)

    def now(self) -> float:
        return time.monotonic() - self.started


def request_body(model: str, profile: LoadProfile, rng: random.Random) -> dict[str, Any]:
    return {"model": model, "prompt": [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(profile.prompt_tokens.value)],
            "max_tokens": profile.output_tokens.value, "temperature": 0, "ignore_eos": True, "stream": False}


class LoadRun:
    def __init__(self, url: str, model: str, profile: LoadProfile, limits: Limits, *, nvml: bool = True,
                 progress: Callable[[LoadState], None] = lambda s: None, seed: int | None = None) -> None:
        self.url = url
        self.model = model
        self.profile = profile
        self.limits = limits
        self.nvml = nvml
        self.progress = progress
        self.state = LoadState()
        if not nvml:
            self.state.peaks.gpu_note = "--no-nvml: GPU memory not read"
        self._stop: asyncio.Event | None = None
        self._rng = random.Random(seed)

    async def run(self) -> LoadState:
        """Drive the load; returns the state, also when interrupted (cancelled) part-way."""
        import aiohttp

        st = self.state
        self._stop = asyncio.Event()
        conc = self.profile.concurrency.value
        timeout = aiohttp.ClientTimeout(total=self.limits.request_timeout_s)
        # trust_env=False: no proxy from the environment stands between the proof and the server it checked
        connector = aiohttp.TCPConnector(limit=conc + 2)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
            st.started = time.monotonic()
            st.hold_from = self.limits.ramp_s
            hold_end = self.limits.ramp_s + self.limits.duration_s
            workers = [asyncio.create_task(self._worker(session, k, conc, hold_end)) for k in range(conc)]
            watcher = asyncio.create_task(self._watch(session))
            try:
                await self._wait_stop(hold_end)
                await self._drain(workers)
            except asyncio.CancelledError:
                st.interrupted = True
            finally:
                self._stop.set()
                for task in (*workers, watcher):
                    task.cancel()
                await asyncio.gather(*workers, watcher, return_exceptions=True)
                st.elapsed_s = st.now()
                st.cut = st.sent - st.served - st.failed     # in flight when the load stopped: not failures
            try:   # the last reading after the load (the server's state at the end), when not interrupted
                if not st.interrupted:
                    await sample_once(session, self.url, st.peaks, st.now(), 5.0, self.nvml)
            except asyncio.CancelledError:
                st.interrupted = True
        return st

    async def _wait_stop(self, hold_end: float) -> None:
        assert self._stop is not None
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, hold_end - self.state.now()))
        except asyncio.TimeoutError:
            pass

    async def _drain(self, workers: list[asyncio.Task[None]]) -> None:
        """After the hold: no new requests; the ones in flight get `drain_s` to finish, then are cut."""
        assert self._stop is not None
        self._stop.set()
        self.state.load_end_s = round(self.state.now(), 3)
        if self.state.first_failure is not None:
            return                                   # the load stops at once on a failure
        grace = min(self.limits.drain_s, self.limits.request_timeout_s)
        await asyncio.wait(workers, timeout=grace)

    async def _worker(self, session: Any, k: int, conc: int, hold_end: float) -> None:
        assert self._stop is not None
        st = self.state
        delay = self.limits.ramp_s * k / conc
        if delay > 0:
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
                return
            except asyncio.TimeoutError:
                pass
        while not self._stop.is_set() and st.now() < hold_end and st.sent < self.limits.max_requests:
            st.sent += 1
            body = request_body(self.model, self.profile, self._rng)
            began = st.now()
            failure = await self._one(session, body, began)
            if failure is None:
                st.served += 1
                st.latencies.append(st.now() - began)
                continue
            st.failed += 1
            if st.first_failure is None:
                st.first_failure = failure
            self._stop.set()
            return
        if st.sent >= self.limits.max_requests and not self._stop.is_set():
            st.request_bound_hit = True
            self._stop.set()                         # the bound ends the hold: drain what is in flight

    async def _one(self, session: Any, body: dict[str, Any], began: float) -> Failure | None:
        import aiohttp

        def failure(kind: str, status: int | None, detail: str) -> Failure:
            t = self.state.now()
            phase = "ramp" if began < self.state.hold_from else "hold" if not self._stop or not self._stop.is_set() \
                else "drain"
            return Failure(round(t, 3), phase, kind, status, detail[:300])

        try:
            async with session.post(self.url + "/v1/completions", json=body) as resp:
                raw = await resp.content.read(ERROR_BODY_BYTES)
                if resp.status != 200:
                    return failure("http_status", resp.status, f"HTTP {resp.status}: {_error_text(raw)}")
                try:
                    answer = json.loads(raw)
                    answer["choices"][0]
                except (ValueError, KeyError, IndexError, TypeError):
                    return failure("bad_answer", 200, "HTTP 200 without a completion in the body")
                return None
        except asyncio.TimeoutError:
            return failure("timeout", None, f"no answer within {self.limits.request_timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return failure("connection", None, f"{type(exc).__name__}: {exc}")

    async def _watch(self, session: Any) -> None:
        st = self.state
        interval = self.limits.interval_s
        while True:
            await sample_once(session, self.url, st.peaks, st.now(), max(1.0, interval * 3), self.nvml)
            self.progress(st)
            await asyncio.sleep(interval)


def _error_text(raw: bytes) -> str:
    """The server's error message (OpenAI shape), else the start of the body."""
    text = raw.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
        message = doc.get("error", {}).get("message") if isinstance(doc.get("error"), dict) else doc.get("detail")
        if isinstance(message, str) and message:
            return " ".join(message.split())
    except (ValueError, AttributeError):
        pass
    return " ".join(text.split())[:200] or "(empty body)"
