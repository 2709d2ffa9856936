"""``simulate(config) -> SimResult``: build the models, run a server, write the trace.

Randomness: one ``SeedSequence(seed)`` spawns independent streams for the workload, the
per-request acceptance parameters, the accepted counts and the step-time jitter, so the same
seed gives the same trace (byte for byte) on either execution path:

- ``path="fast"`` (default): ``sim.fast``, many steps per Python iteration;
- ``path="simpy"``: ``sim.servers``, one SimPy step at a time, devices as resources.

Metrics come only from ``analysis.metrics.summarize`` over the trace (``SimResult.metrics``).
With ``trace.level = "request"`` or ``"none"`` no step records are kept, so step-based metrics
(acceptance, overlap, decode throughput) are None; request metrics (TTFT, TPOT, e2e,
throughput, makespan) are still exact.  ``SimResult.counters`` has the raw counts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from psdlab.analysis.trace import RunInfo, Trace, TraceWriter
from psdlab.sim.sim_config import SimConfig
from psdlab.sim.core import Core, JitterStreams
from psdlab.sim.kv import check_fits
from psdlab.sim.trace_records import Sink
from psdlab.sim.trajectories import cached_trajectories

PATHS = ("fast", "simpy")


@dataclass
class SimResult:
    trace: Trace
    counters: dict[str, int]
    wall_s: float
    path: str
    trace_path: str | None = None
    cpu_s: float = 0.0     # CPU time of this process (the wall time on a busy machine is more)
    _metrics: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def metrics(self) -> dict[str, Any]:
        if self._metrics is None:
            from psdlab.analysis.metrics import summarize
            self._metrics = summarize(self.trace)
        return self._metrics

    @property
    def makespan_s(self) -> float:
        """Last finish minus first arrival (the same definition as analysis.metrics)."""
        reqs = self.trace.requests
        if not reqs:
            return 0.0
        return max(r.finish for r in reqs) - min(r.arrival for r in reqs)

    @property
    def events(self) -> int:
        c = self.counters
        return c["steps"] + c["arrivals"] + c["completions"] + c["preemptions"]


@dataclass
class Built:
    core: Core
    run: RunInfo


def _versions() -> dict[str, str]:
    import simpy

    from psdlab.analysis.version import __version__
    return {"psdlab": __version__, "numpy": np.__version__, "simpy": simpy.__version__}


def build(config: SimConfig) -> Built:
    """Models, requests and trajectories for a config (no simulation yet)."""
    from psdlab.sim.acceptance import KeyedAcceptanceModel
    from psdlab.sim.acceptance_registry import make_acceptance
    from psdlab.sim.costs import make_cost_model, make_jitter
    from psdlab.sim.costs.engine_step import StepHost, get_engine_step, preset_default
    from psdlab.sim.workloads import make_workload

    srv = config.server
    ss = np.random.SeedSequence(config.seed)
    s_work, s_par, s_acc, s_jit, s_k = ss.spawn(5)
    workload = make_workload(dict(config.workload))
    reqs = workload.generate(np.random.default_rng(s_work), config.requests)
    arrival = np.asarray(reqs.arrival, dtype=float)
    prompt = np.asarray(reqs.prompt_len, dtype=np.int64)
    output = np.asarray(reqs.output_len, dtype=np.int64)
    n = arrival.size
    if srv.mode == "ar":
        karr = np.zeros(n, np.int64)
    elif srv.k_choices:
        karr = np.random.default_rng(s_k).choice(np.asarray(srv.k_choices, np.int64), n)
    else:
        karr = np.full(n, srv.k, np.int64)
    k = int(karr.max()) if n else 0
    check_fits(prompt, output, karr + 1, srv.block_size, srv.kv_blocks)
    target = make_cost_model(dict(config.target.cost), "target.cost")
    drafter = None
    acceptance = None
    if srv.mode != "ar":
        assert config.drafter is not None          # SimConfig requires one unless mode = "ar"
        drafter = make_cost_model(dict(config.drafter.cost), "drafter.cost")
        acceptance = make_acceptance(dict(config.acceptance))
    params = np.zeros(n)
    if isinstance(acceptance, KeyedAcceptanceModel) and acceptance.needs_keys:
        params = acceptance.request_params(np.random.default_rng(s_par), n, keys=reqs.keys)
    elif acceptance is not None:
        params = acceptance.request_params(np.random.default_rng(s_par), n)
    traj = cached_trajectories(s_acc, config.acceptance if acceptance is not None else {},
                               acceptance, np.asarray(params, dtype=float), karr, prompt,
                               output)
    step = get_engine_step(srv.engine_step, "server.engine_step",
                           preset_default(config.target.cost))
    # the engine step's per-phase CVs unless the config has its own [jitter]
    jitter: Any = make_jitter(dict(config.jitter) if config.jitter else None)
    if step is not None and not config.jitter:
        jitter = step.jitter()
    # co-located SD shares the target's device; the other modes need the drafter's own device
    drafter_dev = config.drafter.device if config.drafter else "sim:drafter"
    if srv.mode == "sd":
        drafter_dev = config.target.device
    elif drafter_dev == config.target.device:
        drafter_dev = "sim:drafter"
    core = Core(mode=srv.mode, k=karr, m=srv.m, policy=srv.policy, kv_blocks=srv.kv_blocks,
                block_size=srv.block_size, target=target, drafter=drafter,
                target_dev=config.target.device, drafter_dev=drafter_dev, arrival=arrival,
                prompt=prompt, output=output, traj=traj, jitter=JitterStreams(jitter, s_jit),
                cap_proposals=srv.cap_proposals and srv.mode != "ar",
                first_token_at_step_end=srv.first_token == "step",
                step_host=None if step is None else StepHost(
                    step, srv.mode, drafter_dev != config.target.device, drafter, target))
    devices = {"target": config.target.device}
    models = {"target": config.target.name}
    if drafter is not None:
        assert config.drafter is not None
        devices["drafter"] = drafter_dev
        models["drafter"] = config.drafter.name
    extra = {"policy": srv.policy, "cap_proposals": srv.cap_proposals,
             "k_choices": list(srv.k_choices), "kv_blocks": srv.kv_blocks,
             "block_size": srv.block_size, "requests": n, "acceptance": dict(config.acceptance),
             "costs": {"target": target.describe(),
                       "drafter": drafter.describe() if drafter else None},
             "jitter": dict(config.jitter) if config.jitter else None,
             **({"engine_step": step.describe()} if step is not None else {}),
             "trace_level": config.trace.level}
    run = RunInfo(mode=srv.mode, k=k, m=srv.m, source="sim", devices=devices, models=models,
                  workload=dict(config.workload), seed=config.seed, versions=_versions(),
                  extra=extra)
    return Built(core=core, run=run)


def simulate(config: SimConfig, *, path: str = "fast", trace_path: str | None = None,
             progress: bool = False, observer: Callable[[Core], None] | None = None,
             tables: Any = None) -> SimResult:
    """Run one simulation.  ``trace_path`` overrides ``config.trace.path``; ``observer`` is
    called with the core at every step boundary (after admission; for tests); ``tables``: a
    `sim.costtable.TableShare` of runs that differ only in their workload (plan trials)."""
    from psdlab.analysis.checks import check_choice
    from psdlab.sim.fast import run_fast
    from psdlab.sim.servers import run_simpy

    check_choice("path", path, PATHS)
    t0, c0 = time.perf_counter(), time.process_time()
    if config.server.mode == "adaptive":              # the policy's server: sim.adaptive
        from psdlab.sim.adaptive_run import run_adaptive
        tr, counters, out = run_adaptive(config, path=path, trace_path=trace_path,
                                         observer=observer, versions=_versions())
        return SimResult(trace=tr, counters=counters, wall_s=time.perf_counter() - t0,
                         path=path, trace_path=out, cpu_s=time.process_time() - c0)
    built = build(config)
    core = built.core
    if tables is not None:
        core.shared_costs = tables.offer(config)
    level = config.trace.level
    out_path = trace_path if trace_path is not None else config.trace.path
    if level == "none":
        out_path = None
    trace = Trace(run=built.run)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=core.N, unit="req", desc="simulate", leave=False)
    writer = TraceWriter(out_path, built.run, validate=False) if out_path else None
    try:
        sink = Sink(writer, trace, level, on_finish=bar.update if bar else None)
        if path == "fast":
            run_fast(core, sink, config.server.max_interval_steps, observer)
        else:
            run_simpy(core, sink, observer)
        sink.finalize(core)
        if tables is not None:
            tables.keep(config, core.step_costs)
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    return SimResult(trace=trace, counters=dict(core.counters),
                     wall_s=time.perf_counter() - t0, path=path, trace_path=out_path,
                     cpu_s=time.process_time() - c0)
