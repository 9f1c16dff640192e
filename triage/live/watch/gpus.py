"""NVML readings for a long watch: NVML initialised once, each reading bounded in time.

`triage.live.nvml.read_gpus` initialises and shuts NVML down on every call, right for a single
check; a watch reading every second would pay that attach to every GPU each time. This session
keeps NVML open, reads with the same per-device reader, and, like read_gpus, runs each reading
in a daemon thread so a wedged driver makes a reading say so instead of freezing the watch.
Without nvidia-ml-py or a driver every reading is a `NoNvml` with the reason, and the watch
goes on.
"""
from __future__ import annotations

import threading
from typing import Any

from ..nvml import GpuReading, NoNvml, _nvml_error, _reading


class NvmlSession:
    def __init__(self) -> None:
        self._pynvml: Any = None
        self._absent: NoNvml | None = None
        self._busy: threading.Thread | None = None

    def read(self, timeout_s: float) -> list[GpuReading] | NoNvml:
        if self._absent is not None:
            return self._absent          # no library or no driver: that does not change while watching
        if self._busy is not None and self._busy.is_alive():
            return NoNvml("NVML has not answered the previous reading (a wedged GPU or driver?)")
        box: list[list[GpuReading] | NoNvml] = []
        thread = threading.Thread(target=lambda: box.append(self._read_now()), name="triage-watch-nvml", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            self._busy = thread
            return NoNvml(f"NVML did not answer within {timeout_s:.3g} s (a wedged GPU or driver?)")
        return box[0] if box else NoNvml("NVML failed without an answer")

    def _read_now(self) -> list[GpuReading] | NoNvml:
        if self._pynvml is None:
            try:
                import pynvml
            except ImportError:
                self._absent = NoNvml("nvidia-ml-py is not installed: no GPU readings")
                return self._absent
            try:
                pynvml.nvmlInit()
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                self._absent = NoNvml(f"no NVIDIA driver ({_nvml_error(exc)}): no GPU readings")
                return self._absent
            self._pynvml = pynvml
        try:
            return [_reading(self._pynvml, i) for i in range(self._pynvml.nvmlDeviceGetCount())]
        except Exception as exc:
            return NoNvml(f"NVML failed: {_nvml_error(exc)}")

    def close(self) -> None:
        if self._pynvml is not None and not (self._busy is not None and self._busy.is_alive()):
            try:
                self._pynvml.nvmlShutdown()
            except Exception:
                pass
            self._pynvml = None
