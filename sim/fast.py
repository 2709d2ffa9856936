"""The fast path: advance many steps per Python iteration (cost tables and numpy instead of
one planner call per step); one loop for every server (``sim.server_protocol``).

Between arrivals, completions and preemptions nothing changes but counters, so ``Core.plan``
computes up to ``server.max_interval_steps`` steps at once (contexts from the pre-sampled
trajectories, step times from one vectorised cost-model call per phase kind, the clock as one
cumulative sum) and stops exactly at the first step boundary where something could change.
In the steady regimes (``sim.lanes``: PSD overlap, SD, AR without a KV limit) a plan also runs
across admissions and completions: ``sim.step_layout`` lays the stretch out in one causal pass with
step costs from tables (``sim.costtable``), a few list operations per step.  The adaptive
server (``sim.adaptive``) plans one step at a time.
Because acceptance is pre-sampled per request (``sim.trajectories``) or drawn as a step is
planned (adaptive), and jitter is drawn per global step index, this path gives the same trace,
byte for byte, as the step-by-step SimPy path (``sim.servers``); ``tests/test_sim_paths.py``
checks it.
"""
from __future__ import annotations

from typing import Any, Callable

from psdlab.sim.server_protocol import Server, RecordSink


def run_fast(server: Server[Any], sink: RecordSink, max_steps: int,
             observer: Callable[[Any], None] | None = None) -> None:
    """Drive ``server`` to the end, ``max_steps`` steps per plan at most; ``observer`` is
    called with the server at every boundary (after admission)."""
    server.step_detail = sink.level == "step"    # plans carry per-step detail only if used
    while True:
        status = server.prepare()
        if observer is not None:
            observer(server)
        if status == "done":
            return
        if status == "idle":
            server.after_idle(server.now + server.idle_delay())
            continue
        plan = server.plan(max_steps)
        recs = sink.step_records(server, plan)
        server.commit(plan)
        sink.write(server, recs)
