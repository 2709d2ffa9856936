"""The fast path: advance many steps per Python iteration, vectorised with numpy.

Between arrivals, completions and preemptions nothing changes but counters, so ``Core.plan``
computes up to ``server.max_interval_steps`` steps at once (contexts from the pre-sampled
trajectories, step times from one vectorised cost-model call per phase kind, the clock as one
cumulative sum) and stops exactly at the first step boundary where something could change.
Because acceptance is pre-sampled per request (``sim.trajectories``) and jitter is drawn per
global step index, this path gives the same trace, byte for byte, as the step-by-step SimPy
path (``sim.servers``); ``tests/test_sim_paths.py`` checks it.
"""
from __future__ import annotations

from typing import Callable


def run_fast(core, sink, max_steps: int, observer: Callable | None = None) -> None:
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
