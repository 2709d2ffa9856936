"""The protocol the simulator's two execution paths drive (``sim.fast.run_fast``, the SimPy
controller of ``sim.servers``), one loop each for every server: ``sim.core.Core`` (ar, sd,
sd-sep, psd) and ``sim.adaptive.AdaptiveServer`` (mode = "adaptive").

At each step boundary a driver calls ``prepare`` (arrivals, preemption, admission): "done"
ends the run; "idle" jumps the clock to the next arrival (``idle_delay``, ``after_idle``);
"run" asks for a plan (``plan(max_steps)``: up to that many steps for the fast path, one for
SimPy), has the sink build the plan's step records, ``commit``s it, and hands the records to
the sink.  The SimPy path runs each segment of the plan's (single) step as one process per
phase holding its device, and checks that its clock lands on the planned end.
"""
from __future__ import annotations

from typing import Any, Protocol, TypeVar

from psdlab.analysis.trace import StepRecord


class StepPlan(Protocol):
    """A planned stretch of steps, timed."""

    def segment_phases(self) -> list[list[tuple[str, float]]]:
        """The first step's phases as (device, seconds), per segment."""
        ...

    @property
    def end(self) -> float:
        """The clock after the plan's last step."""
        ...


PlanT = TypeVar("PlanT", bound=StepPlan)


class Server(Protocol[PlanT]):
    """A simulated server: a state machine advanced plan by plan."""

    now: float
    target_dev: str
    drafter_dev: str
    step_detail: bool            # plans carry what step records need (the fast path's switch)
    counters: dict[str, int]

    def prepare(self) -> str:
        """One step boundary at ``now``: "run", "idle" or "done"."""
        ...

    def idle_delay(self) -> float:
        """Seconds to the next arrival (when idle)."""
        ...

    def after_idle(self, now: float) -> None:
        """The clock jumped to ``now``, the next arrival."""
        ...

    def plan(self, max_steps: int) -> PlanT:
        """Up to ``max_steps`` steps from ``now``, timed."""
        ...

    def commit(self, plan: PlanT) -> None:
        """Apply the plan and move the clock to its end."""
        ...


class RecordSink(Protocol):
    """Where a run's records go (``sim.trace_records``)."""

    level: str

    def step_records(self, server: Any, plan: Any) -> list[StepRecord]:
        """The plan's step records, built before ``commit`` (none below level step)."""
        ...

    def write(self, server: Any, recs: list[StepRecord]) -> None:
        """After ``commit``: the step records and the requests that finished."""
        ...

    def finalize(self, server: Any) -> None:
        """After the run."""
        ...
