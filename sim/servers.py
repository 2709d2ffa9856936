"""The step-by-step SimPy path: servers as SimPy processes, devices as SimPy resources.

A controller process runs the server's loop: at each step boundary it lets the core take in
arrivals, preempt, admit and rebalance, asks for the next single step (``Core.plan(1)``; the
step structure of AR, SD co-located, SD on a separate device and PSD is in ``sim.step_plan``),
and runs the step's segments: each phase is a process that holds its device (a
``simpy.Resource`` of capacity 1) for the phase's duration; a segment ends when all its phases
have.  PSD: the target verifies one batch while the drafter drafts the other, so the step lasts
the longer of the two.  When nothing runs, the controller sleeps until the next arrival.
"""
from __future__ import annotations

from typing import Callable, Generator

import simpy


def phase_process(env: simpy.Environment, device: simpy.Resource,
                  duration: float) -> Generator:
    """Hold one device for one phase (draft, verify or prefill)."""
    with device.request() as req:
        yield req
        yield env.timeout(duration)


def controller(env: simpy.Environment, core, devices: dict[str, simpy.Resource], sink,
               observer: Callable | None = None) -> Generator:
    """The server loop, one step per iteration."""
    while True:
        status = core.prepare()
        if observer is not None:
            observer(core)
        if status == "done":
            return
        if status == "idle":
            yield env.timeout(core.idle_delay())
            core.after_idle(env.now)
            continue
        plan = core.plan(1)
        for seg in range(plan.nseg):
            procs = [env.process(phase_process(env, devices[ph.device], float(ph.dur[0])))
                     for ph in plan.phases if ph.seg == seg and ph.seqs[0] > 0]
            if procs:
                yield env.all_of(procs)
        if env.now != plan.step_end(0):
            raise RuntimeError(f"SimPy clock {env.now!r} != planned step end "
                               f"{plan.step_end(0)!r}")
        recs = sink.step_records(core, plan)
        core.commit(plan)
        sink.write(core, recs)


def run_simpy(core, sink, observer: Callable | None = None) -> None:
    env = simpy.Environment()
    names = {core.target_dev, core.drafter_dev}
    devices = {name: simpy.Resource(env, capacity=1) for name in names}
    env.process(controller(env, core, devices, sink, observer))
    env.run()
