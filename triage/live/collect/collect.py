"""`triage collect`: capture an incident bundle from a live host before a restart wipes the evidence.

Every source (NVML or nvidia-smi, /metrics, /health, /v1/models, /version, the log or kubectl,
dmesg, the server process and its environment, the allocator dumps of `triage.hooks`) runs in a
thread of its own with its own timeout, and all of them within one deadline; a source that fails
or is cut off is an entry in manifest.json with its reason, never the end of the run. The
bundle is written into a hidden directory beside the target and renamed into place whole.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timezone, tzinfo
from pathlib import Path
from typing import Any, Callable

from ... import __version__
from ...errors import BadInput
from ...redact import redact
from . import gpu_source, http_source, kernel_source, kube_source, log_source, process_source, torch_source
from .process_source import ServerProcess
from ..source import OK, SourceRun
from ..staging import Staging, check_target, file_digest, utc_now

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_DEADLINE_S = 30.0
DEFAULT_LOG_MAX = 64 << 20
# Each source's own limit (seconds); the deadline of the run cuts them all in any case.
TIMEOUTS = {"process": 5.0, "environ": 3.0, "nvml": 10.0, "nvidia-smi": 10.0, "health": 5.0, "models": 5.0,
            "version": 5.0, "dmesg": 5.0, "torch": 10.0, "kubectl pod": 15.0, "kubectl events": 15.0,
            "engine version": 5.0}
POLL_S = 0.02
MAX_CHILDREN = 64
VERSION_HEAD = 1 << 20           # of each log, read for its version line when /version did not answer


@dataclass(frozen=True)
class Options:
    output: Path
    url: str = DEFAULT_URL
    logs: tuple[Path, ...] = ()
    kubectl: tuple[str, str] | None = None     # (namespace, pod)
    pid: int | None = None
    scrapes: int = 3
    every_s: float = 5.0
    deadline_s: float = DEFAULT_DEADLINE_S
    tar: bool = False
    log_max_bytes: int = DEFAULT_LOG_MAX
    hooks_dirs: tuple[Path, ...] = ()


@dataclass
class Result:
    path: Path
    tarball: Path | None
    runs: list[SourceRun]
    files: int                                 # evidence files (incident.yaml and manifest.json aside)
    duration_s: float


def tarball_of(output: Path) -> Path:
    return output.with_name(output.name + ".tar.gz")


def collect(options: Options, say: Callable[[str], None] = lambda line: None) -> Result:
    """Write the bundle at options.output (and options.output + .tar.gz with `tar`).
    BadInput when the target cannot be written; never for a source."""
    if options.tar and (tarball_of(options.output).exists() or tarball_of(options.output).is_symlink()):
        raise BadInput(str(tarball_of(options.output)), "already exists: choose a new name")
    check_target(options.output)
    return Collector(options, say).run()


class Collector:
    def __init__(self, options: Options, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.created = utc_now()
        self.started = time.monotonic()
        # Kept back from the deadline for incident.yaml, the manifest, the rename (and the tarball).
        self.cutoff = self.started + options.deadline_s - min(3.0, options.deadline_s * 0.2)
        self.runs: list[SourceRun] = []
        self.reported: set[int] = set()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.staging = Staging(options.output)
        self.server: ServerProcess | None = None
        self.sources_done = False                 # the deadline passed: no source starts any more

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> Result:
        try:
            self._process()
            zone, zone_name = bundle_zone(self.server, self.options.kubectl is not None)
            self._start_sources(zone)
            self._wait()
            meta = self._describe(zone_name)
            self._write_meta(meta)
        except BaseException:
            self._cut_all()
            self.staging.discard()
            raise
        path = self.staging.finish()
        tarball = pack(path, tarball_of(path)) if self.options.tar else None
        files = sum(len(r.files) for r in self.runs)
        return Result(path, tarball, self.runs, files, round(time.monotonic() - self.started, 3))

    def _process(self) -> None:
        opts = self.options
        proc = self.open("process", "/proc", TIMEOUTS["process"])
        if opts.kubectl is not None and opts.pid is None:
            proc.skip("the server runs in a pod: give --pid to read its process on this host")
        else:
            proc.source = f"/proc/{opts.pid}" if opts.pid else f"/proc (the process listening for {opts.url})"
            self.server = self.call(proc, process_source.server_process, proc, opts.url, opts.pid)
        env = self.open("environ", f"/proc/{self.server.info.pid}/environ" if self.server else "/proc/PID/environ",
                        TIMEOUTS["environ"])
        if self.server is None:
            env.skip("no server process")
        else:
            self.call(env, process_source.environ, env, self.server)

    def _start_sources(self, zone: tzinfo) -> None:
        opts, base = self.options, self.options.url.rstrip("/")
        self.spawn(self._gpu, zone)
        for name, path, fetch in (("health", "/health", http_source.health), ("models", "/v1/models", http_source.models),
                                  ("version", "/version", http_source.version)):
            run = self.open(name, f"GET {base}{path}", TIMEOUTS[name])
            self.spawn(self.guarded, run, fetch, run, base)
        metrics = self.open("metrics", f"GET {base}/metrics", self.cutoff - time.monotonic())
        if opts.scrapes:
            self.spawn(self.guarded, metrics, http_source.scrapes, metrics, base, opts.scrapes, opts.every_s)
        else:
            metrics.skip("--scrapes 0")
        if opts.kubectl is not None:
            self._kubectl(*opts.kubectl)
        elif opts.logs:
            for rel, path in log_names(opts.logs):
                name = "log" if len(opts.logs) == 1 else f"log {rel.split('/', 1)[1]}"
                run = self.open(name, str(path), self.cutoff - time.monotonic())
                self.spawn(self.guarded, run, log_source.log_file, run, path, rel, opts.log_max_bytes)
        else:
            self.open("log", "--log / --kubectl", 0).skip("give --log FILE or --kubectl NS/POD for the server's log")
        dmesg = self.open("dmesg", "dmesg --time-format=iso", TIMEOUTS["dmesg"])
        self.spawn(self.guarded, dmesg, kernel_source.dmesg, dmesg)
        torch = self.open("torch", "$TRIAGE_HOOKS_DIR/torch", TIMEOUTS["torch"])
        self.spawn(self.guarded, torch, torch_source.torch_dumps, torch, self._hooks_dirs())

    def _gpu(self, zone: tzinfo) -> None:
        nvml = self.open("nvml", "NVML (nvidia-ml-py)", TIMEOUTS["nvml"])
        if self.guarded(nvml, gpu_source.nvml, nvml, zone):
            self.open("nvidia-smi", "nvidia-smi", 0).skip("NVML was read")
            return
        smi = self.open("nvidia-smi", "nvidia-smi --query-gpu / --query-compute-apps", TIMEOUTS["nvidia-smi"])
        self.guarded(smi, gpu_source.nvidia_smi, smi)

    def _kubectl(self, ns: str, pod: str) -> None:
        events = self.open("kubectl events", f"kubectl get events -n {ns} --field-selector involvedObject.name={pod}",
                           TIMEOUTS["kubectl events"])
        self.spawn(self.guarded, events, kube_source.events, events, ns, pod)

        def pod_then_logs() -> None:
            run = self.open("kubectl pod", f"kubectl get pod -n {ns} {pod} -o json", TIMEOUTS["kubectl pod"])
            doc = self.guarded(run, kube_source.pod, run, ns, pod)
            logs = self.open("kubectl logs", f"kubectl logs -n {ns} {pod}", self.cutoff - time.monotonic())
            self.guarded(logs, kube_source.logs, logs, ns, pod, doc, self.options.log_max_bytes)

        self.spawn(pod_then_logs)

    def _hooks_dirs(self) -> list[Path]:
        dirs = list(self.options.hooks_dirs)
        for env in ((self.server.env or {}) if self.server else {}, os.environ):
            if env.get("TRIAGE_HOOKS_DIR"):
                dirs.append(Path(env["TRIAGE_HOOKS_DIR"]))
        return list(dict.fromkeys(dirs))

    # -- threads and time ------------------------------------------------------------------------

    def open(self, name: str, source: str, timeout_s: float, until: float | None = None) -> SourceRun:
        """A new source, its timeout cut to what is left before the sources' deadline (or `until`)."""
        left = max(0.05, (self.cutoff if until is None else until) - time.monotonic())
        run = SourceRun(name, source, min(max(timeout_s, 0.05), left), self.staging)
        with self.lock:
            self.runs.append(run)
            if self.sources_done and until is None:      # a source that would follow one cut off at the deadline
                run.cut("not started: the deadline came first")
        return run

    def guarded(self, run: SourceRun, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) in this thread; whatever goes wrong in it is the run's failure, not the collection's."""
        try:
            return fn(*args)
        except Exception as exc:      # SourceCut included: the run is already marked
            run.fail(f"{exc.__class__.__name__}: {exc}"[:300])
            return None
        finally:
            if run.status is None:
                run.fail("ended without a result")

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        # daemon threads: a source stuck in the kernel (NVML on a lost GPU) must not keep the process alive
        thread = threading.Thread(target=fn, args=args, name="triage-collect", daemon=True)
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def call(self, run: SourceRun, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) in a thread, waited for until the run's deadline; its result, or None."""
        box: list[Any] = []
        thread = threading.Thread(target=lambda: box.append(self.guarded(run, fn, *args)), name="triage-collect",
                                  daemon=True)
        thread.start()
        thread.join(max(0.0, run.deadline - time.monotonic()))
        if thread.is_alive():
            run.cut()
        self._report()
        return box[0] if box and run.status == OK else None

    def _wait(self) -> None:
        """Until every source has ended (threads may open more: nvidia-smi after NVML), cutting
        each at its own timeout and all at the deadline."""
        while True:
            now = time.monotonic()
            with self.lock:
                runs, threads = list(self.runs), list(self.threads)
            for run in runs:
                if run.status is None and now >= min(run.deadline, self.cutoff):
                    run.cut()
            self._report()
            if all(r.status is not None for r in runs) and not any(t.is_alive() for t in threads):
                with self.lock:
                    self.sources_done = True
                return
            if now >= self.cutoff:         # a thread still busy past the deadline has nothing more to give
                with self.lock:
                    self.sources_done = True
                self._cut_all()            # and one that opened a source meanwhile: cut too
                self._report()
                return
            time.sleep(POLL_S)

    def _cut_all(self) -> None:
        with self.lock:
            for run in self.runs:
                run.cut()

    def _report(self) -> None:
        with self.lock:
            runs = list(self.runs)
        for run in runs:
            if run.status is not None and id(run) not in self.reported:
                self.reported.add(id(run))
                self.say(run.line())

    # -- what the bundle says about itself ------------------------------------------------------

    def _describe(self, zone_name: str | None) -> dict[str, Any]:
        opts = self.options
        by_name = {r.name: r for r in self.runs}
        found: dict[str, Any] = {"health": by_name["health"].data.get("health")}
        if by_name["models"].data.get("models") is not None:
            found["models"] = by_name["models"].data["models"]
        version, where = by_name["version"].data.get("version"), f"GET {opts.url.rstrip('/')}/version"
        if version is None:
            version, where = self._version_from_logs()
        if version:
            found["engine_version"], found["engine_version_from"] = version, where
        where_from = f"kubectl {opts.kubectl[0]}/{opts.kubectl[1]}" if opts.kubectl else opts.url
        meta: dict[str, Any] = {"id": opts.output.name, "title": f"Collected from {where_from} on {_host()}",
                                "created": self.created[:19] + "Z"}
        if zone_name:
            meta["timezone"] = zone_name
        meta["collected"] = {
            "by": f"triage {__version__} collect", "host": _host(), "server_url": opts.url,
            **({"kubectl": f"{opts.kubectl[0]}/{opts.kubectl[1]}"} if opts.kubectl else {}),
            **({"logs": [str(p) for p in opts.logs]} if opts.logs else {}),
            "deadline_s": opts.deadline_s, "duration_s": round(time.monotonic() - self.started, 3),
            "sources": {r.name: _summary(r) for r in self.runs},
        }
        meta["server"] = found
        if self.server is not None:
            process = self.server.describe()
            if len(process.get("children", [])) > MAX_CHILDREN:
                process["children"] = process["children"][:MAX_CHILDREN]
            meta["process"] = process
        self._report()
        return meta

    def _version_from_logs(self) -> tuple[str | None, str | None]:
        """The engine version as the log states it (`vLLM API server version 0.11.0`), read with the
        classifier's own log parser, when /version did not answer."""
        logs = [self.staging.root / f for r in self.runs if r.name.startswith(("log", "kubectl logs")) for f in r.files]
        # after the sources: it may use what is left of the time kept back, less a second to write out
        deadline = self.started + self.options.deadline_s - 1.0
        run = self.open("engine version", "the log's start-up lines", TIMEOUTS["engine version"], until=deadline)
        if not logs:
            run.skip("/version did not answer and no log was collected")
            self._report()
            return None, None
        found = self.call(run, _log_version, run, logs, self.staging.root)
        return found if found else (None, None)

    def _write_meta(self, meta: dict[str, Any]) -> None:
        import yaml

        # A URL or command line can hold a password or token: both documents are masked whole.
        text = "# Written by `triage collect`; manifest.json lists every file with its SHA-256.\n" + \
               yaml.safe_dump(redact(meta), sort_keys=False, allow_unicode=True, width=100)
        self.staging.write_meta("incident.yaml", text)
        digest, size = file_digest(self.staging.root / "incident.yaml")
        files = [{"path": "incident.yaml", "sha256": digest, "size": size, "source": "triage collect",
                  "duration_s": 0.0, "written": utc_now()}]
        files += [vars(rec) for rec in sorted(self.staging.records, key=lambda r: r.path)]
        manifest = {"schema": "triage.manifest/v1", "created": self.created, "finished": utc_now(),
                    "tool": f"triage {__version__}", "deadline_s": self.options.deadline_s,
                    "duration_s": round(time.monotonic() - self.started, 3), "files": files,
                    "sources": [r.to_json() for r in self.runs]}
        self.staging.write_meta("manifest.json", json.dumps(redact(manifest), indent=2) + "\n")


def _log_version(run: SourceRun, logs: list[Path], root: Path) -> tuple[str, str] | None:
    """The first version line in the head of a collected log (a server states it at start-up),
    read with the classifier's own log parser, which stops there; only VERSION_HEAD bytes of each
    log are looked at, so a long log costs no more than a short one."""
    from ...evidence import logs as log_parser, time_reference
    from ...evidence.base import InputFile, ParseContext
    from ...evidence.kinds import Kind

    ctx = ParseContext(times=time_reference(None, None, None))
    for path in logs:
        with open(path, "rb") as fh:
            head = fh.read(VERSION_HEAD)
        cut = head.rfind(b"\n") + 1 if len(head) == VERSION_HEAD else len(head)
        rel = path.relative_to(root).as_posix()
        for e in log_parser.parse(InputFile(display=rel, path=None, data=head[:cut]), ctx):
            if e.kind == Kind.ENGINE_VERSION and e.fields.get("version"):
                run.ok(f"{e.fields['version']} ({rel}:{e.line})")
                return str(e.fields["version"]), f"{rel}:{e.line}"
    run.ok("not stated in the collected log")
    return None


def _summary(run: SourceRun) -> str:
    said = run.detail if run.status == OK else run.reason
    return f"{run.status}: {said}" if said else str(run.status)


def _host() -> str:
    return socket.gethostname() or "localhost"


def log_names(paths: tuple[Path, ...]) -> list[tuple[str, Path]]:
    """logs/<file name> for each --log; a name given twice (two hosts' vllm.log) gets -2, -3."""
    out, seen = [], set()
    for path in paths:
        name, n = path.name or "server.log", 1
        while name in seen:
            n += 1
            name = f"{Path(path.name).stem}-{n}{Path(path.name).suffix}"
        seen.add(name)
        out.append((f"logs/{name}", path))
    return out


def bundle_zone(server: ServerProcess | None, in_pod: bool) -> tuple[tzinfo, str | None]:
    """The zone the server writes its zone-less times in (vLLM's log, nvidia-smi): its TZ, else
    this host's zone; unknown (None, read as UTC) for a pod whose TZ could not be read."""
    from ...bundle import zone

    candidates = [(server.env or {}).get("TZ") if server else None]
    if not in_pod:
        candidates += [os.environ.get("TZ"), _etc_timezone()]
    for name in candidates:
        name = (name or "").lstrip(":").strip()
        if not name:
            continue
        try:
            return zone(name, "TZ"), name
        except BadInput:
            continue
    return timezone.utc, (None if in_pod else "UTC")


def _etc_timezone() -> str | None:
    try:
        return Path("/etc/timezone").read_text().strip() or None
    except OSError:
        pass
    real = os.path.realpath("/etc/localtime")
    return real.split("zoneinfo/", 1)[1] if "zoneinfo/" in real else None


def pack(bundle: Path, target: Path) -> Path:
    """bundle/ as target (.tar.gz), members under one folder named like the bundle, written
    under a hidden temporary name and renamed: a reader never meets half an archive."""
    import tarfile

    from ...hooks import _write_atomic

    def fill(raw) -> None:
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for path in sorted(p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink()):
                tar.add(path, arcname=f"{bundle.name}/{path.relative_to(bundle).as_posix()}", recursive=False,
                        filter=_anonymous)

    _write_atomic(str(target.parent), target.name, fill)
    return target


def _anonymous(info):
    """Who collected it is nobody's business in the archive; the modes are plain."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o644 if info.isreg() else 0o755
    return info


__all__ = ["DEFAULT_DEADLINE_S", "DEFAULT_URL", "Options", "Result", "collect", "tarball_of"]
