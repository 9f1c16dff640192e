"""An interrupt (Ctrl-C, SIGTERM, SIGHUP) that cannot be lost.

Python runs a signal handler between bytecodes, wherever the main thread is — also inside a
`__del__` or a garbage-collection callback, where the KeyboardInterrupt it raises is printed as
"Exception ignored" and dropped. A recovery would then go on as if nothing had happened, and the
supervisor that sent SIGTERM would SIGKILL it later, with no end record. So the handler also sets
a flag, and every wait of a step (`Deadline.sleep`, the kill ladder's polling) and the executor
between steps raise KeyboardInterrupt again while the flag is set. The executor clears it once it
has recorded the interrupt.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PENDING: list[str] = []


def pending() -> str | None:
    return _PENDING[0] if _PENDING else None


def check() -> None:
    """Raise KeyboardInterrupt if an interrupt arrived and has not been handled yet."""
    if _PENDING:
        raise KeyboardInterrupt(f"{_PENDING[0]} (received earlier)")


def clear() -> None:
    _PENDING.clear()


@contextmanager
def handled() -> Iterator[None]:
    """Within: SIGINT, SIGTERM (a supervisor stopping the run) and SIGHUP (the operator's ssh session
    dropped) all end the run like Ctrl-C — the step in progress recorded as interrupted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if not _PENDING:
            _PENDING.append(name)
        raise KeyboardInterrupt(name)

    def unraisable(info: "sys.UnraisableHookArgs") -> None:
        if isinstance(info.exc_value, KeyboardInterrupt) and _PENDING:
            return                     # ours, dropped by a finalizer: the flag carries it (no traceback)
        previous_hook(info)

    clear()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable
    previous = {signum: signal.signal(signum, interrupt) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = previous_hook
        clear()
