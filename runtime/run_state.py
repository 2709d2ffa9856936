"""What one engine run hands back and the small helpers its loop shares with the engine: the
result record, the Ctrl-C stop flag, the clock, the drafter-died message.

Kept apart so `runtime.controller` (configuration, workers) imports `runtime.step_loop` (the run)
and both import this module: the arrows point one way."""
from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from psdlab.analysis.trace import Trace
from psdlab.runtime.requests import RequestOutput
from psdlab.runtime.workers import WorkerDied

@dataclass
class EngineResult:
    outputs: list[RequestOutput]
    trace: Trace
    interrupted: bool = False
    drafter_failure: str | None = None
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: str | None = None           # the run stopped early (the target worker died)


class StopFlag:
    """First SIGINT asks the loop to stop after the current step; a second one interrupts."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("psdlab: interrupted; finishing the current step and closing the trace "
              "(Ctrl-C again to abort)", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def drafter_died_message(exc: WorkerDied, running: int) -> str:
    return (f"psdlab: {exc}; finishing {running} running request(s) target-only (AR)")


def now() -> float:
    return time.perf_counter()
