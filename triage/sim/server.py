"""`serve(argv)`: start-up, the HTTP server and the background loops, until a signal stops it.

Process layout like vLLM 0.11: this process is the API server; a forked child plays the
engine core (and, in the orphan_worker scenario, a worker). Start-up writes the real log
lines and exits 1 when the flags do not fit the simulated GPU. Then one thread runs the
engine loop, one the stats line, one watches the engine child; the main thread serves HTTP.
SIGTERM/SIGINT shut down gracefully (uvicorn's lines, children stopped), except that the
ignore_sigterm scenario ignores SIGTERM.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Sequence

from .args import PROG, SimArgs, parse_args
from .engine import Engine, Failure
from .failures import write_engine_died, write_fatal_error, write_shutdown
from .handlers import App, Handler, SimHTTPServer
from .memory import GiB, Sizing
from .metrics import SimMetrics
from .procs import (ENGINE_NAME, WORKER_NAME, Child, can_fork, reap, spawn_engine_core, spawn_orphan_worker, stop,
                    terminate)
from .startup import engine_config, start_engine, write_frontend, write_serving, write_startup_failure
from .stats import StatsLogger
from .vlog import Proc, VllmLog

MONITOR_S = 0.25
JOIN_S = 2.0


def sizing_for(args: SimArgs) -> Sizing:
    return Sizing(total=int(args.sim_gpu_gib * GiB), util=args.gpu_memory_utilization,
                  weights=int(args.sim_weights_gib * GiB), kv_bytes_per_token=args.sim_kv_bytes_per_token,
                  model_len=args.model_len, eager=args.enforce_eager)


def serve(argv: Sequence[str], prog: str = PROG) -> int:
    args = parse_args(argv, prog)
    log = VllmLog(args.log)
    try:
        return Simulator(args, log).run()
    finally:
        log.close()


class Simulator:
    def __init__(self, args: SimArgs, log: VllmLog) -> None:
        self.args = args
        self.log = log
        self.api = Proc("APIServer", os.getpid())
        self.sizing = sizing_for(args)
        self.engine_child: Child | None = None
        self.worker: Child | None = None
        self.stopping = threading.Event()       # set when we end the engine child ourselves
        self._child_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------------
    def run(self) -> int:
        write_frontend(self.log, self.api, self.args)
        self._spawn_children()
        engine_proc = Proc(ENGINE_NAME, self.engine_child.pid if self.engine_child else self.api.pid)
        error = start_engine(self.log, engine_proc, self.args, self.sizing)
        if error is not None:
            codes = {ENGINE_NAME: self._stop_engine_child(1) or 1}
            write_startup_failure(self.log, self.api, engine_proc, *error, codes)
            self._stop_worker()
            self._exit_reason(f"simulated start-up OOM, EngineCore failed to start: ValueError: {error[1]}")
            return 1
        try:
            httpd = SimHTTPServer((self.args.host, self.args.port), Handler)
        except OSError as exc:
            self.log.record(self.api, "ERROR", "api_server.py:1881",
                            f"Failed to bind {self.args.host}:{self.args.port}: {exc}")
            self._stop_engine_child(1)
            self._stop_worker()
            self._exit_reason(f"cannot listen on {self.args.host}:{self.args.port}: {exc}")
            return 1
        engine = Engine(self.args, self.sizing, lambda f: self._on_failure(f, engine, engine_proc))
        httpd.app = App(self.args, self.log, self.api, engine, SimMetrics(self.args, self.sizing), int(time.time()))
        url = write_serving(self.log, self.api, self.args.host, httpd.server_address[1], self.sizing.num_gpu_blocks)
        self._install_signals(httpd)
        halt = threading.Event()
        threads = [threading.Thread(target=engine.run, args=(halt,), name="engine", daemon=True),
                   threading.Thread(target=StatsLogger(engine, self.log, self.api).run, args=(halt,), name="stats",
                                    daemon=True),
                   threading.Thread(target=self._monitor, args=(halt, engine), name="monitor", daemon=True)]
        for t in threads:
            t.start()
        self._announce(url, engine_proc)
        try:
            httpd.serve_forever(poll_interval=0.2)
        finally:
            write_shutdown(self.log, self.api)
            halt.set()
            for t in threads:
                t.join(JOIN_S)
            httpd.server_close()
            self._stop_engine_child(0)
            self._stop_worker()
        return 0

    def _spawn_children(self) -> None:
        if not can_fork():
            return      # no fork (Windows): one process plays both roles
        self.engine_child = spawn_engine_core(int(self.args.sim_hold_gpu_gib * GiB))
        if self.args.scenario == "orphan_worker":
            self.worker = spawn_orphan_worker(close_fds=(self.engine_child.pipe,) if self.engine_child.pipe else ())
            self.log.record(Proc(WORKER_NAME, self.worker.pid), "INFO", "parallel_state.py:1208",
                            "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0")

    def _announce(self, url: str, engine_proc: Proc) -> None:
        worker = f", {WORKER_NAME} pid {self.worker.pid}" if self.worker else ""
        try:
            print(f"triage.sim: {self.args.scenario} server at {url} (APIServer pid {self.api.pid}, "
                  f"{ENGINE_NAME} pid {engine_proc.pid}{worker})", flush=True)
        except (OSError, ValueError):
            pass    # stdout closed: the log has the same line

    def _exit_reason(self, why: str) -> None:
        """One line on stderr saying why the simulator exits 1 and where its log is. Without --log
        the vLLM log *is* stderr and already ends with the error, as a real server's would; a line of
        ours there would be read as evidence, so only a log written to a file gets it."""
        if self.args.log is None:
            return
        try:
            print(f"triage.sim: exit 1: {why} (the vLLM log is {self.args.log})", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def _install_signals(self, httpd: SimHTTPServer) -> None:
        def shut_down(signum: int, frame: object) -> None:
            # shutdown() waits for serve_forever, which runs in this (the main) thread.
            threading.Thread(target=httpd.shutdown, daemon=True).start()

        signal.signal(signal.SIGINT, shut_down)
        if self.args.scenario == "ignore_sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, shut_down)

    # -- engine death ------------------------------------------------------------------------------
    def _on_failure(self, failure: Failure, engine: Engine, engine_proc: Proc) -> None:
        write_fatal_error(self.log, self.api, engine_proc, failure, engine_config(self.args))
        engine.mark_dead()
        self._stop_engine_child(1)      # vLLM's engine core process exits after a fatal error

    def _monitor(self, halt: threading.Event, engine: Engine) -> None:
        """Notice an engine child killed from outside, as 0.11's process monitor does."""
        child = self.engine_child
        while child is not None and not halt.wait(MONITOR_S):
            if self.stopping.is_set():
                return
            with self._child_lock:
                code = reap(child, 0)
            if code is not None and not self.stopping.is_set():
                write_engine_died(self.log, self.api, ENGINE_NAME)
                engine.mark_dead()
                return

    def _stop_engine_child(self, code: int) -> int | None:
        self.stopping.set()
        if self.engine_child is None:
            return None
        with self._child_lock:
            return stop(self.engine_child, code)

    def _stop_worker(self) -> None:
        # A graceful stop takes its worker down; only a SIGKILLed server leaves it behind.
        if self.worker is not None:
            terminate(self.worker)


def main(argv: Sequence[str] | None = None) -> int:
    return serve(sys.argv[1:] if argv is None else argv)
