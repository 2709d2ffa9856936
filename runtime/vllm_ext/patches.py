"""Every place where psdlab's vLLM integration touches vLLM state that is not an extension point.

vLLM v1 gives psdlab public hooks for almost everything: the scheduler class
(``SchedulerConfig.scheduler_cls``), the proposer (``speculative_config.method="custom_class"``)
and per-plugin settings (``additional_config``).  What it does not give is a way to schedule a
*subset* of the running requests, so PSD hides the draft half from ``Scheduler.running`` for
the duration of one ``Scheduler.schedule`` call and lowers the running-request limits by the
same count.  That, and finding the in-process scheduler of an ``LLM`` (for closing the trace and
for tests), are the only private accesses; both are here, guarded for vLLM 0.32 and 0.33.

No function or method of vLLM is monkey-patched.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

SUPPORTED = ("0.32", "0.33")
#: scheduler attributes that cap the running requests (0.32: both; older/newer: whichever exist)
_LIMITS = ("max_num_running_reqs", "max_num_active_reqs")


def check_version(version: str) -> None:
    """Raise a one-line ValueError for a vLLM outside the supported minor versions."""
    minor = ".".join(version.split(".")[:2])
    if minor not in SUPPORTED:
        raise ValueError(f"vllm: version {version} is not supported (supported: "
                         f"{', '.join(SUPPORTED)}.x)")


def check_installed_vllm() -> None:
    """`check_version` of the installed vLLM, then that it has the scheduler surface PSD
    uses (`SURFACE`); one-line ValueError otherwise."""
    import vllm
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler
    check_version(vllm.__version__)
    missing = check_surface(SchedulerOutput, Scheduler)
    if missing:
        raise ValueError(f"vllm: version {vllm.__version__} lacks {', '.join(missing)}, "
                         "which PSD uses")


#: what the PSD scheduler reads and overrides (vLLM 0.32); checked at start-up
SURFACE = (("SchedulerOutput", "scheduled_spec_decode_tokens"),
           ("Scheduler", "update_draft_token_ids"), ("Scheduler", "update_from_output"),
           ("Scheduler", "schedule"), ("Scheduler", "finish_requests"))


def check_surface(output_cls: Any, scheduler_cls: Any) -> list[str]:
    """The names of `SURFACE` that the given classes lack (dataclass fields count)."""
    have = {"SchedulerOutput": output_cls, "Scheduler": scheduler_cls}
    missing = []
    for owner, name in SURFACE:
        cls = have[owner]
        fields = getattr(cls, "__dataclass_fields__", {})
        if name not in fields and not hasattr(cls, name):
            missing.append(f"{owner}.{name}")
    return missing


@contextlib.contextmanager
def hide_running(scheduler: Any, hidden: list[Any]) -> Iterator[None]:
    """Within the block, ``scheduler.running`` lacks ``hidden`` and the running limits are
    lowered by ``len(hidden)``; afterwards the hidden requests are appended back (after any
    request the block admitted) and the limits restored.  Requests the block preempted stay
    out of ``running`` as vLLM left them."""
    if not hidden:
        yield
        return
    ids = {id(r) for r in hidden}
    saved = {name: getattr(scheduler, name) for name in _LIMITS if hasattr(scheduler, name)}
    scheduler.running = [r for r in scheduler.running if id(r) not in ids]
    for name, value in saved.items():
        setattr(scheduler, name, max(0, value - len(hidden)))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(scheduler, name, value)
        scheduler.running = list(scheduler.running) + list(hidden)


def engine_scheduler(llm: Any) -> Any | None:
    """The scheduler of an ``LLM`` whose engine core runs in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), else None."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    for path in (("engine_core", "scheduler"), ("scheduler",)):
        obj = core
        for name in path:
            obj = getattr(obj, name, None)
        if obj is not None:
            return obj
    return None
