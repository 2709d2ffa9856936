"""Where the two models run and how their work is timed and ordered on the device.

- `default_backend`: one process per device by default.  Two Python processes never share a
  GIL, so in eager mode the drafter's and the target's dispatch really run at once (threads of
  one process would take turns at the GIL).  The exception is a drafter and a target on *one*
  CUDA device (two streams): streams run concurrently only inside one CUDA context, i.e. one
  process (without MPS, two processes time-slice the GPU), so that case takes threads; graphs
  (``--compile``) shorten the GIL-held dispatch there.
- `private_stream`: a thread worker's own CUDA stream, made to wait for the work already queued
  on the default stream (weights cast and KV cache zeroed there at load), so the first command
  on the private stream cannot read them half-written.
- `CommandClock`: a command's start and end on the host's ``perf_counter`` clock (shared by all
  processes).  On CUDA the interval is the device's: two CUDA events around the command, and
  the end is when the host saw the end event complete; the start is that minus the events'
  elapsed time.  A host span would overlap even when the GPU work does not.

torch is imported lazily; everything but the CUDA branches runs (and is tested) on CPU.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

#: the ways a runner may run its passes (`runtime.runner.RunnerConfig.compile`): "off",
#: "eager" (dynamo tracing only), "default" (inductor), "reduce-overhead" (+ CUDA graphs)
COMPILE_MODES = ("off", "eager", "default", "reduce-overhead")


def default_backend(device: str, drafter_device: str | None = None) -> str:
    """``process`` for CPU cores and for separate CUDA devices, ``thread`` for two streams of
    one CUDA device."""
    if not device.startswith("cuda"):
        return "process"
    if drafter_device is not None and drafter_device != device:
        return "process"
    return "thread"


def private_stream(device: Any) -> contextlib.AbstractContextManager:
    """A context running on a new CUDA stream of ``device`` that first waits for the default
    stream; a no-op context on CPU."""
    if getattr(device, "type", str(device)) != "cuda":
        return contextlib.nullcontext()
    import torch
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    return torch.cuda.stream(stream)


class CommandClock:
    """Times one command; ``events`` makes the CUDA events (injectable for tests)."""

    def __init__(self, device: Any, now: Callable[[], float] = time.perf_counter,
                 events: Callable[[], Any] | None = None):
        self.now = now
        cuda = getattr(device, "type", str(device)) == "cuda"
        if cuda and events is None:
            import torch
            events = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self.events = events if cuda or events is not None else None
        self._t0 = 0.0
        self._e0: Any = None

    def start(self) -> None:
        self._t0 = self.now()
        if self.events is not None:
            self._e0 = self.events()
            self._e0.record()

    def stop(self) -> tuple[float, float]:
        """(start, end) of the command on the host clock: the device's interval on CUDA."""
        if self.events is None:
            return self._t0, self.now()
        e1 = self.events()
        e1.record()
        e1.synchronize()
        end = self.now()
        busy = self._e0.elapsed_time(e1) / 1e3          # CUDA events measure milliseconds
        return max(self._t0, end - busy), end
