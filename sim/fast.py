"""The fast path: advance many steps per Python iteration (cost tables and numpy instead of
one planner call per step).

Between arrivals, completions and preemptions nothing changes but counters, so ``Core.plan``
computes up to ``server.max_interval_steps`` steps at once (contexts from the pre-sampled
trajectories, step times from one vectorised cost-model call per phase kind, the clock as one
cumulative sum) and stops exactly at the first step boundary where something could change.
In the steady regimes (``sim.lanes``: PSD overlap, SD, AR without a KV limit) a plan also runs
across admissions and completions: ``sim.sweep`` lays the stretch out in one causal pass with
step costs from tables (``sim.costtable``), a few list operations per step.
Because acceptance is pre-sampled per request (``sim.trajectories``) and jitter is drawn per
global step index, this path gives the same trace, byte for byte, as the step-by-step SimPy
path (``sim.servers``); ``tests/test_sim_paths.py`` checks it.
"""
from __future__ import annotations

from typing import Callable


def run_fast(core, sink, max_steps: int, observer: Callable | None = None) -> None:
    core.step_detail = sink.level == "step"      # plans carry per-step detail only if used
    while True:
        status = core.prepare()
        if observer is not None:
            observer(core)
        if status == "done":
            return
        if status == "idle":
            core.after_idle(core.now + core.idle_delay())
            continue
        plan = core.plan(max_steps)
        recs = sink.step_records(core, plan)
        core.commit(plan)
        sink.write(core, recs)
