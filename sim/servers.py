"""The step-by-step SimPy path: servers as SimPy processes, devices as SimPy resources; one
controller for every server (``sim.server_protocol``: ``sim.core.Core``,
``sim.adaptive.AdaptiveServer``).

A controller process runs the server's loop: at each step boundary it lets the server take in
arrivals, preempt, admit and rebalance, asks for the next single step (``plan(1)``; the step
structure of AR, SD co-located, SD on a separate device and PSD is in ``sim.step_plan``, the
adaptive server's in ``sim.adaptive``), and runs the step's segments: each phase is a process
that holds its device (a ``simpy.Resource`` of capacity 1) for the phase's duration; a segment
ends when all its phases have.  PSD: the target verifies one batch while the drafter drafts the
other, so the step lasts the longer of the two.  When nothing runs, the controller sleeps until
the next arrival.
"""
from __future__ import annotations

from typing import Any, Callable, Generator

import simpy

from psdlab.sim.server_protocol import Server, RecordSink


def phase_process(env: simpy.Environment, device: simpy.Resource,
                  duration: float) -> Generator:
    """Hold one device for one phase (draft, verify or prefill)."""
    with device.request() as req:
        yield req
        yield env.timeout(duration)


def controller(env: simpy.Environment, server: Server[Any], devices: dict[str, simpy.Resource],
               sink: RecordSink, observer: Callable[[Any], None] | None = None) -> Generator:
    """The server loop, one step per iteration."""
    while True:
        status = server.prepare()
        if observer is not None:
            observer(server)
        if status == "done":
            return
        if status == "idle":
            yield env.timeout(server.idle_delay())
            server.after_idle(env.now)
            continue
        plan = server.plan(1)
        for seg in plan.segment_phases():
            procs = [env.process(phase_process(env, devices[dev], dur)) for dev, dur in seg]
            if procs:
                yield env.all_of(procs)
        if env.now != plan.end:
            raise RuntimeError(f"SimPy clock {env.now!r} != planned step end {plan.end!r}")
        recs = sink.step_records(server, plan)
        server.commit(plan)
        sink.write(server, recs)


def run_simpy(server: Server[Any], sink: RecordSink,
              observer: Callable[[Any], None] | None = None) -> None:
    """Drive ``server`` to the end, one SimPy step at a time."""
    env = simpy.Environment()
    names = {server.target_dev, server.drafter_dev}
    devices = {name: simpy.Resource(env, capacity=1) for name in names}
    env.process(controller(env, server, devices, sink, observer))
    env.run()
