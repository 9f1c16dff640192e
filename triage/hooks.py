"""In-process capture: the caching allocator's numbers, written from inside the server process.

`torch.cuda.memory_stats()`, `memory_summary()` and allocator snapshots exist only inside the
process that allocated the memory. A server imports this module (a `sitecustomize.py`, or vLLM's
`vllm.general_plugins` entry point, which this package registers) and calls `install()`; then

  * a signal (SIGUSR2 unless `TRIAGE_HOOKS_SIGNAL` says otherwise) writes a dump,
  * an uncaught `torch.OutOfMemoryError` (main thread or any other) writes one before the
    traceback is printed and the process dies as it would have,
  * an OOM the allocator reports (`torch._C._cuda_attach_out_of_memory_observer`) writes one
    too, at most one a minute, also when the server catches the error itself (vLLM does),

into `$TRIAGE_HOOKS_DIR/torch/`, where `triage classify $TRIAGE_HOOKS_DIR` reads them:

  memory_stats-<UTC>-pid<PID>-dev<N>-<reason>.json     per device, memory_stats() with time/device
  memory_summary-<UTC>-pid<PID>-dev<N>-<reason>.txt    per device, memory_summary()
  memory_snapshot-<UTC>-pid<PID>-<reason>.pickle       TRIAGE_HOOKS_SNAPSHOT=1: memory._snapshot()
  oom_traceback-<UTC>-pid<PID>-oom.log                 the uncaught OOM's traceback

Configuration is read from the environment when `install()` or `dump()` runs:

  TRIAGE_HOOKS_DIR=/path       enables everything; without it install() does nothing
  TRIAGE_HOOKS_SIGNAL=SIGUSR2  the dump signal (name or number); `off` installs no handler
  TRIAGE_HOOKS_SNAPSHOT=1      record allocation history (bounded) and write snapshots
  TRIAGE_HOOKS_SNAPSHOT_ENTRIES=100000   history entries kept by the allocator
  TRIAGE_HOOKS_SNAPSHOT_MAX_MB=256       a larger snapshot is skipped (logged)
  TRIAGE_HOOKS_KEEP=10         dumps kept in the directory (oldest of this module's files deleted)
  TRIAGE_HOOKS_OOM_OBSERVER=1  `0` leaves the allocator's OOM observer out

Rules this module keeps: importing it imports nothing but the standard library (torch is used
only once the process has imported it itself; a process that never did has no allocator to
dump); every error is logged on the `triage.hooks` logger and swallowed; handlers that were
there before are chained (the signal's, sys.excepthook, threading.excepthook) and the exception
is never swallowed; files are written under a hidden temporary name and renamed, so a reader
never sees half a file.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping

__all__ = ["install", "dump", "installed", "SUBDIR"]

log = logging.getLogger("triage.hooks")

SUBDIR = "torch"                          # the bundle's folder for allocator dumps
DEFAULT_SIGNAL = "SIGUSR2"
DEFAULT_KEEP = 10
DEFAULT_SNAPSHOT_ENTRIES = 100_000
DEFAULT_SNAPSHOT_MAX_MB = 256
TEXT_MAX_BYTES = 16 << 20                 # a memory_stats JSON is ~12 KB, a summary ~4 KB
OOM_MIN_INTERVAL_S = 60.0                 # allocator-observed and thread OOMs: one dump a minute
STALE_TMP_S = 3600.0                      # a temporary file this old was left by a killed writer
_LOCK_WAIT_S = 30.0                       # an uncaught OOM waits this long for a running dump

_PREFIX = "triage.hooks: "
_TMP_PREFIX = ".triage-hooks-"
_NAME_RE = re.compile(
    r"^(?P<kind>memory_stats|memory_summary|memory_snapshot|oom_traceback)"
    r"-(?P<stamp>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z)-pid(?P<pid>\d+)(?:-dev\d+)?"
    r"-(?P<reason>[a-z0-9_]{1,32})\.(?:json|txt|pickle|log)$")
_TMP_RE = re.compile(r"^\.triage-hooks-.*\.tmp$")
_TRUE = {"1", "true", "yes", "on"}
_OFF = {"", "0", "off", "none", "no", "false"}


class _Config:
    __slots__ = ("directory", "signal", "snapshot", "snapshot_entries", "snapshot_max_bytes", "keep",
                 "observer")

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.directory = env.get("TRIAGE_HOOKS_DIR") or None
        self.signal = env.get("TRIAGE_HOOKS_SIGNAL") or DEFAULT_SIGNAL      # set but empty: the default
        self.snapshot = env.get("TRIAGE_HOOKS_SNAPSHOT", "").strip().lower() in _TRUE
        self.snapshot_entries = _int(env, "TRIAGE_HOOKS_SNAPSHOT_ENTRIES", DEFAULT_SNAPSHOT_ENTRIES, 1)
        self.snapshot_max_bytes = _int(env, "TRIAGE_HOOKS_SNAPSHOT_MAX_MB", DEFAULT_SNAPSHOT_MAX_MB, 1) << 20
        self.keep = _int(env, "TRIAGE_HOOKS_KEEP", DEFAULT_KEEP, 1)
        self.observer = (env.get("TRIAGE_HOOKS_OOM_OBSERVER") or "1").strip().lower() not in _OFF


def _int(env, name: str, default: int, least: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < least:
        log.warning("%s%s=%r is not a whole number >= %d; using %d", _PREFIX, name, raw, least, default)
        return default
    return value


# ------------------------------------------------------------------------------------ state

_state_lock = threading.Lock()          # install()
_dump_lock = threading.Lock()           # one dump at a time per process
_installed = False
_config: _Config | None = None
_prev_signal_handler: Any = None
_signum: int | None = None
_prev_excepthook: Callable | None = None
_prev_thread_excepthook: Callable | None = None
_torch_hooks_done = False               # history recording / OOM observer set up
_last_oom_dump: dict[str, float] = {}   # time.monotonic() of the last rate-limited dump, per reason
_last_stamp: datetime | None = None
_tmp_counter = itertools.count()


def _after_fork_in_child() -> None:
    """A fork taken while another thread held a lock leaves it held forever in the child."""
    global _dump_lock, _state_lock
    _dump_lock = threading.Lock()
    _state_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def installed() -> bool:
    """Whether install() put the hooks in place in this process."""
    return _installed


# ------------------------------------------------------------------------------------ install


def install() -> bool:
    """Put the hooks in place when `TRIAGE_HOOKS_DIR` is set; a no-op otherwise and when called
    again. Returns whether the hooks are installed. Never raises."""
    global _installed, _config
    try:
        with _state_lock:
            if _installed:
                return True
            config = _Config()
            if not config.directory:
                return False
            _config = config
            _install_signal(config)
            _install_excepthooks()
            _install_torch_hooks(config)
            _installed = True
            log.debug("%sinstalled (dir %s, signal %s, snapshot %s)", _PREFIX, config.directory,
                      _signum, config.snapshot)
            return True
    except Exception:
        log.exception("%sinstall failed; the server runs without the hooks", _PREFIX)
        return False


def _signal_number(spec: str) -> int | None:
    """SIGUSR2, USR2, 12 -> the number; None for `off` (or an unknown name, logged)."""
    text = spec.strip()
    if text.lower() in _OFF:
        return None
    if text.isdigit():
        return int(text)
    name = text.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    number = getattr(signal, name, None)
    if not isinstance(number, int) or name.startswith("SIG_"):
        log.warning("%sTRIAGE_HOOKS_SIGNAL=%r is no signal; no dump signal installed", _PREFIX, spec)
        return None
    return int(number)


def _install_signal(config: _Config) -> None:
    global _prev_signal_handler, _signum
    number = _signal_number(config.signal)
    if number is None:
        return
    try:
        previous = signal.getsignal(number)
    except (ValueError, OSError) as exc:
        log.warning("%scannot use signal %s: %s", _PREFIX, config.signal, exc)
        return
    if previous is _on_signal:           # an earlier install() that failed half-way
        previous = signal.SIG_DFL
    elif previous is None:
        # Set from C (not through the signal module): it cannot be chained, so it stays alone.
        log.warning("%ssignal %s has a handler that was not set from Python; no dump signal installed",
                    _PREFIX, number)
        return
    try:
        signal.signal(number, _on_signal)
    except (ValueError, OSError) as exc:      # not the main thread, or a signal that cannot be caught
        log.warning("%scannot install a handler for signal %s: %s", _PREFIX, number, exc)
        return
    _prev_signal_handler, _signum = previous, number


def _install_excepthooks() -> None:
    global _prev_excepthook, _prev_thread_excepthook
    _prev_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    _prev_thread_excepthook = threading.excepthook
    threading.excepthook = _thread_excepthook


def _install_torch_hooks(config: _Config) -> None:
    """History recording and the allocator's OOM observer need torch and an initialised CUDA;
    importing torch here (or initialising CUDA) would cost every process seconds and break a
    server that forks after start-up. So: once torch is imported, queue them with
    `torch.cuda._lazy_call`, which runs them when CUDA is initialised (now, if it already is)."""
    if not (config.snapshot or config.observer):
        return
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        _queue_cuda_hooks(torch)
    else:
        _TorchImportWatcher.watch()


class _TorchImportWatcher:
    """A meta-path finder that only notices `import torch` finishing: the spec and loader of the
    finders after it are returned unchanged, except that this one loader instance runs a
    callback after the module has executed."""

    _busy = False

    @classmethod
    def watch(cls) -> None:
        if not any(isinstance(f, cls) for f in sys.meta_path):
            sys.meta_path.insert(0, cls())

    @classmethod
    def unwatch(cls) -> None:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, cls)]

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or type(self)._busy:
            return None
        type(self)._busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if isinstance(finder, _TorchImportWatcher):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            loader = getattr(spec, "loader", None) if spec is not None else None
            run = getattr(loader, "exec_module", None)
            if run is None:
                return spec
            loader.exec_module = _after_torch_import(loader, run)
            return spec
        except Exception:
            log.exception("%scannot watch the torch import; no history recording or OOM observer", _PREFIX)
            return None
        finally:
            type(self)._busy = False


def _after_torch_import(loader, run: Callable) -> Callable:
    def exec_module(module):
        try:
            run(module)                   # torch's own import errors propagate as they would
        finally:
            loader.__dict__.pop("exec_module", None)    # the loader is as it was
        if getattr(module, "__name__", None) != "torch":
            return
        try:
            _TorchImportWatcher.unwatch()
            _queue_cuda_hooks(module)
        except Exception:
            log.exception("%scannot set up the CUDA hooks", _PREFIX)
    return exec_module


def _queue_cuda_hooks(torch) -> None:
    lazy_call = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
    if lazy_call is None:
        log.warning("%sthis torch has no torch.cuda._lazy_call; no history recording or OOM observer", _PREFIX)
        return
    lazy_call(_cuda_hooks)


def _cuda_hooks() -> None:
    """Runs once CUDA is initialised (inside torch.cuda._lazy_init: it must not raise)."""
    global _torch_hooks_done
    try:
        if _torch_hooks_done or _config is None:
            return
        _torch_hooks_done = True
        torch = sys.modules.get("torch")
        if torch is None:
            return
        if _config.snapshot:
            try:
                torch.cuda.memory._record_memory_history(
                    enabled="all", context="all", stacks="python", max_entries=_config.snapshot_entries)
            except Exception:
                log.exception("%scannot record the allocation history; snapshots will hold no history", _PREFIX)
        if _config.observer:
            try:
                torch._C._cuda_attach_out_of_memory_observer(_on_allocator_oom)
            except Exception:
                log.exception("%scannot attach the allocator's OOM observer", _PREFIX)
    except Exception:
        log.exception("%sCUDA hooks failed", _PREFIX)


# ------------------------------------------------------------------------------------ triggers


def _on_signal(signum, frame) -> None:
    try:
        _dump_in_background("signal")
    except Exception:
        log.exception("%scannot start the dump", _PREFIX)
    previous = _prev_signal_handler
    if callable(previous):
        previous(signum, frame)           # theirs: its exceptions are theirs to raise


def _dump_in_background(reason: str) -> None:
    """The dump runs in a thread so that the handler returns at once. Thread.start takes
    threading's `_active_limbo_lock`; if the interrupted code holds it, the handler dumps itself."""
    if _dump_lock.locked():
        log.warning("%sa dump is already being written; signal ignored", _PREFIX)
        return
    limbo = getattr(threading, "_active_limbo_lock", None)
    if limbo is not None and getattr(limbo, "locked", lambda: False)():
        _dump_quietly(reason)
        return
    threading.Thread(target=_dump_quietly, args=(reason,), name="triage-hooks-dump", daemon=True).start()


def _excepthook(etype, value, tb) -> None:
    try:
        if _is_oom(value):
            _dump_quietly("oom", exc=(etype, value, tb), wait=True)
    except Exception:
        log.exception("%sOOM dump failed", _PREFIX)
    previous = _prev_excepthook or sys.__excepthook__
    previous(etype, value, tb)


def _thread_excepthook(args) -> None:
    try:
        if _is_oom(args.exc_value) and _oom_dump_due("thread_oom"):
            _dump_quietly("oom", exc=(args.exc_type, args.exc_value, args.exc_traceback), wait=True)
    except Exception:
        log.exception("%sOOM dump failed", _PREFIX)
    previous = _prev_thread_excepthook or threading.__excepthook__
    previous(args)


def _on_allocator_oom(*_args) -> None:
    """The caching allocator's OOM observer: called in the allocating thread, before the error is
    raised, also when the server catches it. Rate-limited."""
    try:
        if _oom_dump_due("allocator_oom"):
            _dump_quietly("allocator_oom")
    except Exception:
        log.exception("%sallocator OOM dump failed", _PREFIX)


def _oom_dump_due(what: str) -> bool:
    now = time.monotonic()
    last = _last_oom_dump.get(what)
    if last is not None and now - last < OOM_MIN_INTERVAL_S:
        log.info("%s%s: one dump a minute at most; this one skipped", _PREFIX, what)
        return False
    _last_oom_dump[what] = now
    return True


def _oom_classes() -> tuple[type, ...]:
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    found = []
    for owner in (torch, getattr(torch, "cuda", None)):
        cls = getattr(owner, "OutOfMemoryError", None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _is_oom(exc: BaseException | None) -> bool:
    """A torch OOM, or an exception raised from / while handling one (a server wraps them)."""
    classes = _oom_classes()
    seen: set[int] = set()
    depth = 0
    while exc is not None and id(exc) not in seen and depth < 16:
        seen.add(id(exc))
        if classes and isinstance(exc, classes):
            return True
        if isinstance(exc, RuntimeError) and str(exc).startswith("CUDA out of memory"):
            return True                   # torch < 1.13 raised a plain RuntimeError
        exc = exc.__cause__ or exc.__context__
        depth += 1
    return False


# ------------------------------------------------------------------------------------ dump


def dump(reason: str = "manual", directory: str | os.PathLike | None = None) -> list[str]:
    """Write the allocator's state now; returns the paths written ([] when there was nothing to
    write or it failed — logged, never raised). `directory` defaults to $TRIAGE_HOOKS_DIR."""
    return _dump_quietly(reason, directory=directory, wait=True)


def _dump_quietly(reason: str, exc=None, directory=None, wait: bool = False) -> list[str]:
    lock = _dump_lock
    try:
        got = lock.acquire(timeout=_LOCK_WAIT_S) if wait else lock.acquire(blocking=False)
    except Exception:
        return []
    if not got:
        log.warning("%sa dump is already being written; %s dump skipped", _PREFIX, reason)
        return []
    try:
        return _dump(reason, exc, directory)
    except Exception:
        log.exception("%s%s dump failed", _PREFIX, reason)
        return []
    finally:
        lock.release()


def _dump(reason: str, exc, directory) -> list[str]:
    config = _config or _Config()
    root = os.fspath(directory) if directory is not None else config.directory
    if not root:
        log.warning("%sno directory: set TRIAGE_HOOKS_DIR; nothing dumped", _PREFIX)
        return []
    reason = _slug(reason)
    torch = sys.modules.get("torch")
    if torch is None:
        log.warning("%storch is not loaded in this process; nothing to dump (%s)", _PREFIX, reason)
        return []
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_available():
        log.warning("%sCUDA is not available in this process; nothing to dump (%s)", _PREFIX, reason)
        return []
    if not cuda.is_initialized():
        log.warning("%sCUDA was never initialised in this process; nothing to dump (%s)", _PREFIX, reason)
        return []
    started = time.monotonic()
    out = os.path.join(root, SUBDIR)
    os.makedirs(out, exist_ok=True)
    when = _stamp()
    stamp = when.strftime("%Y-%m-%dT%H-%M-%S.") + f"{when.microsecond // 1000:03d}Z"
    iso = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    pid = os.getpid()
    written: list[str] = []
    version = str(getattr(torch, "__version__", "") or "") or None

    if exc is not None:
        import traceback

        text = "".join(traceback.format_exception(*exc))
        _keep(written, _write_text(out, f"oom_traceback-{stamp}-pid{pid}-{reason}.log", text))
    for device in _devices(torch):
        try:
            stats = dict(cuda.memory_stats(device))
        except Exception as error:
            log.warning("%storch.cuda.memory_stats(%s) failed: %s: %s", _PREFIX, device,
                        type(error).__name__, error)
        else:
            doc = {"time": iso, "reason": reason, "pid": pid, "device": device, "torch": version,
                   "memory_stats": stats}
            _keep(written, _write_text(out, f"memory_stats-{stamp}-pid{pid}-dev{device}-{reason}.json",
                                       _json(doc)))
        try:
            summary = cuda.memory_summary(device)
        except Exception as error:
            log.warning("%storch.cuda.memory_summary(%s) failed: %s: %s", _PREFIX, device,
                        type(error).__name__, error)
        else:
            _keep(written, _write_text(out, f"memory_summary-{stamp}-pid{pid}-dev{device}-{reason}.txt",
                                       str(summary)))
    if config.snapshot:
        _keep(written, _write_snapshot(torch, out, f"memory_snapshot-{stamp}-pid{pid}-{reason}.pickle",
                                       config.snapshot_max_bytes))
    _rotate(out, config.keep)
    if written:
        log.info("%s%s dump in %.3f s: %s", _PREFIX, reason, time.monotonic() - started,
                 ", ".join(os.path.basename(p) for p in written))
    return written


def _keep(written: list[str], path: str | None) -> None:
    if path:
        written.append(path)


def _slug(reason: str) -> str:
    text = re.sub(r"[^a-z0-9_]+", "_", str(reason).lower()).strip("_")[:32]
    return text or "manual"


def _stamp() -> datetime:
    """Now in UTC, at millisecond precision, later than the previous dump of this process (two
    dumps never share a name)."""
    global _last_stamp
    now = datetime.now(timezone.utc)
    now = now.replace(microsecond=now.microsecond // 1000 * 1000)
    if _last_stamp is not None and now <= _last_stamp:
        now = _last_stamp + timedelta(milliseconds=1)
    _last_stamp = now
    return now


def _devices(torch) -> list[int]:
    """The devices this process's allocator used (every one that reserved memory or failed an
    allocation); the current device when none did. Reading a device's stats creates no context."""
    cuda = torch.cuda
    try:
        count = int(cuda.device_count())
    except Exception:
        count = 0
    used = []
    for device in range(count):
        try:
            stats = cuda.memory_stats(device)
        except Exception:
            used.append(device)           # the dump reports the failure
            continue
        if stats.get("reserved_bytes.all.peak") or stats.get("num_ooms"):
            used.append(device)
    if used:
        return used
    try:
        return [int(cuda.current_device())]
    except Exception:
        return [0] if count else []


def _json(doc: dict) -> str:
    import json

    return json.dumps(doc, indent=1, default=str) + "\n"


# ------------------------------------------------------------------------------------ files


class _TooLarge(Exception):
    pass


class _CappedWriter:
    def __init__(self, fh, limit: int) -> None:
        self.fh, self.limit, self.size = fh, limit, 0

    def write(self, data) -> int:
        self.size += len(data)
        if self.size > self.limit:
            raise _TooLarge
        return self.fh.write(data)


def _write_atomic(directory: str, name: str, fill: Callable[[Any], None]) -> str:
    """`fill(fh)` writes into a hidden temporary file beside `name` (triage skips hidden files),
    which is renamed to `name` only once complete."""
    tmp = os.path.join(directory, f"{_TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{next(_tmp_counter)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        # No fsync: the rename is what keeps readers from half a file, and an fsync can stall
        # for a second or more on a network or virtual disk, in the allocating thread.
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
        final = os.path.join(directory, name)
        os.replace(tmp, final)
        return final
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_text(directory: str, name: str, text: str) -> str | None:
    data = text.encode("utf-8", errors="replace")
    if len(data) > TEXT_MAX_BYTES:
        log.warning("%s%s skipped: %d bytes, more than the %d MiB cap", _PREFIX, name, len(data), TEXT_MAX_BYTES >> 20)
        return None
    try:
        return _write_atomic(directory, name, lambda fh: fh.write(data))
    except Exception as error:
        log.warning("%scannot write %s: %s: %s", _PREFIX, name, type(error).__name__, error)
        return None


def _write_snapshot(torch, directory: str, name: str, limit: int) -> str | None:
    try:
        snapshot = torch.cuda.memory._snapshot()
    except Exception as error:
        log.warning("%storch.cuda.memory._snapshot() failed: %s: %s", _PREFIX, type(error).__name__, error)
        return None
    import pickle

    try:
        return _write_atomic(directory, name, lambda fh: pickle.dump(snapshot, _CappedWriter(fh, limit)))
    except _TooLarge:
        log.warning("%s%s skipped: the snapshot is larger than the %d MiB cap (TRIAGE_HOOKS_SNAPSHOT_MAX_MB)",
                    _PREFIX, name, limit >> 20)
    except Exception as error:
        log.warning("%scannot write %s: %s: %s", _PREFIX, name, type(error).__name__, error)
    return None


def _rotate(directory: str, keep: int) -> None:
    """Keep the newest `keep` dumps (a dump: the files of one stamp and PID) and delete older ones;
    only names this module writes are touched, and its temporary files once stale."""
    dumps: dict[tuple[str, int], list[str]] = {}
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError as error:
        log.warning("%scannot list %s: %s", _PREFIX, directory, error)
        return
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if _TMP_RE.match(entry.name):
                if now - entry.stat(follow_symlinks=False).st_mtime > STALE_TMP_S:
                    os.unlink(entry.path)
                continue
            m = _NAME_RE.match(entry.name)
            if m:
                dumps.setdefault((m.group("stamp"), int(m.group("pid"))), []).append(entry.path)
        except OSError:
            continue
    for key in sorted(dumps)[:-keep] if len(dumps) > keep else ():
        for path in dumps[key]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass                      # another process rotated it first
            except OSError as error:
                log.warning("%scannot delete %s: %s", _PREFIX, path, error)
