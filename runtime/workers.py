"""Drafter and target workers: each owns one `ModelRunner` (model + KV cache) on its device.

Three backends with one interface (``submit`` a command, ``wait`` for its result):

- ``process`` (CPU): a spawned process pinned to one core with ``os.sched_setaffinity`` and one
  torch thread; commands and results travel over a pipe as plain lists / numpy arrays.  If the
  process dies, ``wait`` raises `WorkerDied` (the engine then goes on without it).
- ``thread`` (CUDA, one device): a thread per worker, optionally with its own CUDA stream, so a
  drafter and a target on one GPU run on two streams at the same time (they share the GIL).
  Separate devices default to ``process`` (`runtime.devices.default_backend`).
- ``inline``: runs each command in the caller at submit time (no concurrency; fast tests).

Each result comes with the worker's own ``time.perf_counter()`` at the start and end of the
command (on CUDA, of the device's work: `runtime.devices.CommandClock`); on Linux that is
CLOCK_MONOTONIC, shared by all processes, so phases of different workers land on one clock.
`start_workers` returns only after every worker has loaded.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from psdlab.runtime.devices import CommandClock, private_stream

BACKENDS = ("inline", "thread", "process")


class WorkerDied(RuntimeError):
    """The worker's process is gone (killed, crashed); its state is lost."""


class WorkerError(RuntimeError):
    """A command raised inside the worker; the message is the worker's one-line error."""


@dataclass(frozen=True)
class WorkerSpec:
    """Where and how one worker runs."""
    role: str                  # "drafter" | "target"
    runner: Any                # runtime.runner.RunnerConfig
    label: str                 # device label written in the trace, e.g. "cpu:1", "cuda:0/s1"
    core: int | None = None    # process backend: the CPU core to pin to
    stream: bool = False       # thread backend on CUDA: run on a private stream
    spin_s: float = 0.0        # process backend: busy-wait this long for the next command
                               # before blocking (keeps an idle core awake between steps)


@dataclass
class Result:
    value: Any
    start: float
    end: float


def _run_command(runner: Any, method: str, args: tuple) -> tuple:
    """Run one command; its start and end come from `runtime.devices.CommandClock` (the
    device's interval on CUDA)."""
    clock = CommandClock(getattr(runner, "device", "cpu"))
    clock.start()
    try:
        value = getattr(runner, method)(*args)
    except Exception as exc:  # reported to the controller, which decides
        t0, t1 = clock.stop()
        return ("err", f"{type(exc).__name__}: {exc}".splitlines()[0], t0, t1)
    t0, t1 = clock.stop()
    return ("ok", value, t0, t1)


def _unpack(reply: tuple, role: str) -> Result:
    status, value, t0, t1 = reply
    if status != "ok":
        raise WorkerError(f"{role} worker: {value}")
    return Result(value, t0, t1)


# ------------------------------------------------------------------------- inline
class InlineWorker:
    def __init__(self, spec: WorkerSpec):
        from psdlab.runtime.runner import ModelRunner
        self.spec, self.role, self.label = spec, spec.role, spec.label
        self.runner: ModelRunner | None = ModelRunner(spec.runner)    # None once closed
        self.info = self.runner.info()
        self._reply: tuple | None = None
        self.pid = os.getpid()

    def submit(self, method: str, *args: Any) -> None:
        self._reply = _run_command(self.runner, method, args)

    def wait(self) -> Result:
        reply, self._reply = self._reply, None
        assert reply is not None, "wait() without a submit()"
        return _unpack(reply, self.role)

    def close(self) -> None:
        self.runner = None


# ------------------------------------------------------------------------- thread
_CUDA_SETUP = threading.Lock()


class ThreadWorker:
    def __init__(self, spec: WorkerSpec):
        self.spec, self.role, self.label = spec, spec.role, spec.label
        self._in: queue.Queue = queue.Queue()
        self._out: queue.Queue = queue.Queue()
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._main, name=f"psdlab-{spec.role}",
                                        daemon=True)
        self._thread.start()
        self.info: dict[str, Any] = {}

    def _main(self) -> None:
        import contextlib

        from psdlab.runtime.runner import ModelRunner
        try:
            # one CUDA set-up at a time in a process: a graph capture fails when another
            # thread's work (a load, a sync) lands on the device during it
            lock = (_CUDA_SETUP if str(self.spec.runner.device).startswith("cuda")
                    else contextlib.nullcontext())
            with lock:
                runner = ModelRunner(self.spec.runner)
            ctx: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if self.spec.stream:
                ctx = private_stream(runner.device)     # waits for the load's work first
        except Exception as exc:
            self._out.put(("err", f"{type(exc).__name__}: {exc}".splitlines()[0], 0.0, 0.0))
            return
        self._out.put(("ok", runner.info(), 0.0, 0.0))
        with ctx:
            while True:
                msg = self._in.get()
                if msg is None:
                    return
                self._out.put(_run_command(runner, msg[0], msg[1]))

    def ready(self) -> None:
        self.info = _unpack(self._out.get(), self.role).value

    def submit(self, method: str, *args: Any) -> None:
        self._in.put((method, args))

    def wait(self) -> Result:
        return _unpack(self._out.get(), self.role)

    def close(self) -> None:
        self._in.put(None)
        self._thread.join(timeout=10)


# ------------------------------------------------------------------------- process
def _await_command(conn: Any, spin_s: float, clock: Any = time.perf_counter) -> str:
    """Return when a command (or EOF) is ready: poll in a busy loop for up to ``spin_s``
    seconds, then block.  On a virtual machine a vCPU that sleeps between steps can be
    descheduled by the host and wake up slow (SD-separate idles each core half the time);
    spinning keeps it running, as GPU serving loops busy-poll (on this project's 2-core VM an
    interleaved A/B test stayed within the run-to-run noise).  The bound stops an idle worker
    from holding its core between runs.  Returns ``"spun"`` (found while polling) or
    ``"blocked"`` (waited in a blocking poll); ``clock`` is injectable for tests."""
    if spin_s > 0:
        deadline = clock() + spin_s
        while clock() < deadline:
            if conn.poll(0):
                return "spun"
    conn.poll(None)
    return "blocked"


def _child_main(conn: Any, spec: WorkerSpec, threads: int) -> None:
    """Entry point of a worker process: pin, limit threads, load, then serve commands."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the controller handles Ctrl-C
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if spec.core is not None:
        os.sched_setaffinity(0, {spec.core})
    import torch
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    from psdlab.runtime.runner import ModelRunner
    try:
        runner = ModelRunner(spec.runner)
    except Exception as exc:
        conn.send(("err", f"{type(exc).__name__}: {exc}".splitlines()[0], 0.0, 0.0))
        return
    conn.send(("ok", runner.info(), 0.0, 0.0))
    while True:
        try:
            _await_command(conn, spec.spin_s)
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        conn.send(_run_command(runner, msg[0], msg[1]))


class ProcessWorker:
    def __init__(self, spec: WorkerSpec, threads: int = 1):
        ctx = mp.get_context("spawn")
        self.spec, self.role, self.label = spec, spec.role, spec.label
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_child_main, args=(child, spec, threads),
                                name=f"psdlab-{spec.role}", daemon=True)
        self.proc.start()
        child.close()
        self.pid = self.proc.pid
        self.info: dict[str, Any] = {}

    def _recv(self) -> tuple:
        while True:
            try:
                if self._conn.poll(0.5):
                    return self._conn.recv()
            except (EOFError, OSError, ConnectionResetError):
                break
            if not self.proc.is_alive():
                break
        self.proc.join(timeout=1)
        raise WorkerDied(f"{self.role} worker process {self.pid} died "
                         f"(exit code {self.proc.exitcode})")

    def ready(self) -> None:
        self.info = _unpack(self._recv(), self.role).value

    def submit(self, method: str, *args: Any) -> None:
        try:
            self._conn.send((method, args))
        except (BrokenPipeError, OSError, EOFError):
            pass  # wait() reports the death

    def wait(self) -> Result:
        return _unpack(self._recv(), self.role)

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        self._conn.close()


def start_workers(backend: str, specs: list[WorkerSpec]) -> dict[str, Any]:
    """Start one worker per spec (all loading at once) and return them by role once every
    one has loaded its model.  On failure the started ones are closed and the error raised."""
    from psdlab.analysis.checks import check_choice
    check_choice("backend", backend, BACKENDS)
    workers: dict[str, Any] = {}
    try:
        for spec in specs:
            if spec.core is not None and backend == "process":
                allowed = sorted(os.sched_getaffinity(0))
                if spec.core not in allowed:
                    raise ValueError(f"{spec.role} core: must be one of {allowed}, got {spec.core}")
            cls = {"inline": InlineWorker, "thread": ThreadWorker, "process": ProcessWorker}
            workers[spec.role] = cls[backend](spec)
        for w in workers.values():
            if hasattr(w, "ready"):
                w.ready()
    except BaseException:
        for w in workers.values():
            w.close()
        raise
    return workers
