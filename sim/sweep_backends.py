"""Where a sweep's tasks run (``psdlab plan --backend NAME``): a registry of backends by name.

A task is one configuration of the sweep: a module-level function and its arguments (each
configuration's simulations run inside one task, in order), with a label naming the
configuration.  Every backend returns the results in the tasks' order, whatever order they
finished in, so a sweep whose tasks carry their own seeds gives the same rows on every backend.

- ``local``: the tasks in this process (``jobs`` 1) or in ``jobs`` spawned worker processes.
- ``ray``: each task a Ray task (``ray`` is imported here only, when this backend runs: the
  extra ``pip install 'psdlab[ray]'``); on a local cluster started for the sweep
  (``ray.init(num_cpus=jobs)``, shut down after it) or, with ``address``, on a running one.

Failures: a task that raises is run once more, in the same worker (both backends; on ``ray``
a task whose worker process dies is also re-run once, ``max_retries=1``); if it fails again the
sweep stops (the other tasks cancelled) with a ``SweepTaskError``, one line naming the
configuration and the error.

Test hook (documented, inert unless set): ``PSDLAB_PLAN_FAULT`` holds a JSON object
``{"config": LABEL, "fail": N, "dir": DIR}``: the first N attempts of the task labelled LABEL
raise, counted by the files ``DIR/attempt-<i>`` each attempt creates (so across processes and
retries).  The driver reads it once and passes it to the tasks, whatever their process.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Mapping, Sequence

FAULT_ENV = "PSDLAB_PLAN_FAULT"
#: attempts per task: the first and one retry
ATTEMPTS = 2


class SweepTaskError(RuntimeError):
    """A task failed on every attempt; its message is one line naming the configuration."""


def fault_from_env() -> dict[str, Any] | None:
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return None
    try:
        fault = json.loads(raw)
        ok = (isinstance(fault, dict) and isinstance(fault.get("config"), str)
              and isinstance(fault.get("fail"), int) and isinstance(fault.get("dir"), str))
    except json.JSONDecodeError:
        ok = False
    if not ok:
        raise ValueError(f"{FAULT_ENV}: expected {{\"config\": LABEL, \"fail\": N, \"dir\": DIR}}")
    return fault


def _inject(label: str, fault: Mapping[str, Any] | None) -> None:
    if fault is None or fault["config"] != label:
        return
    os.makedirs(fault["dir"], exist_ok=True)
    attempt = 0
    while True:
        try:
            os.close(os.open(os.path.join(fault["dir"], f"attempt-{attempt}"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            attempt += 1
    if attempt < fault["fail"]:
        raise RuntimeError(f"injected fault ({FAULT_ENV}), attempt {attempt + 1}")


def call(fn: Callable[..., Any], args: tuple, label: str,
         fault: Mapping[str, Any] | None) -> Any:
    """One attempt of one task."""
    _inject(label, fault)
    return fn(*args)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def failure(label: str, exc: BaseException | str) -> SweepTaskError:
    what = exc if isinstance(exc, str) else _describe(exc)
    return SweepTaskError(f"configuration {label} failed after {ATTEMPTS} attempts: {what}")


def _attempts(fn: Callable[..., Any], args: tuple, label: str,
              fault: Mapping[str, Any] | None) -> tuple[bool, Any]:
    """(True, result) or (False, the last error as one line): what a local worker sends back
    (plain values, so no exception has to survive pickling)."""
    last = ""
    for _ in range(ATTEMPTS):
        try:
            return True, call(fn, args, label, fault)
        except Exception as exc:     # any task error is reported, not raised
            last = _describe(exc)
    return False, last


def _attempts_star(packed: tuple) -> tuple[bool, Any]:
    return _attempts(*packed)


def run_local(fn: Callable[..., Any], tasks: Sequence[tuple], labels: Sequence[str], jobs: int,
              address: str | None, on_done: Callable[[], None] | None) -> list[Any]:
    if address is not None:
        raise ValueError("--address: only with --backend ray")
    fault = fault_from_env()
    packed = [(fn, t, lab, fault) for t, lab in zip(tasks, labels)]
    out: list[Any] = []

    def take(i: int, ok: bool, value: Any) -> None:
        if not ok:
            raise failure(labels[i], value)
        out.append(value)
        if on_done:
            on_done()

    if jobs > 1 and len(tasks) > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(min(jobs, len(tasks))) as pool:
            for i, (ok, value) in enumerate(pool.imap(_attempts_star, packed)):
                take(i, ok, value)
    else:
        for i, p in enumerate(packed):
            take(i, *_attempts(*p))
    return out


def run_ray(fn: Callable[..., Any], tasks: Sequence[tuple], labels: Sequence[str], jobs: int,
            address: str | None, on_done: Callable[[], None] | None) -> list[Any]:
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray: ray is not installed; install the extra: "
                         "pip install 'psdlab[ray]'") from None
    fault = fault_from_env()
    started = not ray.is_initialized()
    if started and address is None:
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR)
    elif started:
        try:
            ray.init(address=address, logging_level=logging.ERROR)
        except Exception as exc:     # ConnectionError, an authentication error, ...
            raise ValueError(f"--address: could not connect to the Ray cluster at {address} "
                             f"({_describe(exc)}; a cluster with token authentication, "
                             f"recent Ray's default, also needs RAY_AUTH_MODE=token)"
                             ) from None
    try:
        # the retry of a task that raises is _attempts' (as on the local backend, and without
        # Ray printing the first error's traceback); Ray's max_retries re-runs a task whose
        # worker died
        remote = ray.remote(num_cpus=1, max_retries=ATTEMPTS - 1)(_attempts)
        refs = [remote.remote(fn, t, lab, fault) for t, lab in zip(tasks, labels)]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref]
                try:
                    ok, value = ray.get(ref)
                except Exception as exc:     # the worker died twice, the cluster went, ...
                    ok, value = False, _describe(exc)
                if not ok:
                    for p in pending:
                        ray.cancel(p, force=True)
                    raise failure(labels[i], value)
                out[i] = value
                if on_done:
                    on_done()
        return out
    finally:
        if started:
            ray.shutdown()


Backend = Callable[[Callable[..., Any], Sequence[tuple], Sequence[str], int, "str | None",
                    "Callable[[], None] | None"], list]
BACKENDS: dict[str, Backend] = {"local": run_local, "ray": run_ray}


def run_tasks(backend: str, fn: Callable[..., Any], tasks: Sequence[tuple],
              labels: Sequence[str], jobs: int = 1, address: str | None = None,
              on_done: Callable[[], None] | None = None) -> list[Any]:
    """``fn(*task)`` for every task on the named backend, results in the tasks' order."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return BACKENDS[backend](fn, tasks, labels, jobs, address, on_done)
