"""Running the adaptive server (``sim.adaptive``): build it from a config, drive it on the fast
path (a plain loop) or the SimPy path (one process per phase, devices as resources), and hand
back the trace (its ``run.extra["adaptive"]`` counts the switches and their costs) and the
counters.  ``sim.simulation.simulate(config)`` calls ``run_adaptive`` for ``mode = "adaptive"``
and wraps them in its ``SimResult``.

Randomness: the same ``SeedSequence(seed)`` streams as ``sim.simulation.build`` (workload,
per-request acceptance parameters, accepted counts), so an adaptive run and a fixed-mode run of
one config serve the same requests.
"""
from __future__ import annotations

from typing import Any, Callable, Generator

import numpy as np

from psdlab.analysis.adaptive_policy import AdaptivePolicy, policy_config
from psdlab.analysis.trace import RunInfo, Trace, write_trace
from psdlab.sim.adaptive import AdaptiveServer, Step, segment_ends


def _check(config) -> None:
    srv = config.server
    if srv.k_choices:
        raise ValueError("server.k_choices: not allowed for server.mode = 'adaptive' "
                         "(the policy picks k from adaptive.k_choices)")
    if srv.kv_blocks:
        raise ValueError("server.kv_blocks: must be 0 for server.mode = 'adaptive' "
                         "(no KV limit in the adaptive server)")
    if srv.cap_proposals:
        raise ValueError("server.cap_proposals: not supported with server.mode = 'adaptive'")
    if srv.first_token != "prefill":
        raise ValueError("server.first_token: only 'prefill' with server.mode = 'adaptive'")
    if config.jitter:
        raise ValueError("jitter: not supported with server.mode = 'adaptive'")
    if getattr(srv, "engine_step", "none") not in ("none", None):
        raise ValueError("server.engine_step: not supported with server.mode = 'adaptive'")


def build_adaptive(config, versions: dict[str, str] | None = None
                   ) -> tuple[AdaptiveServer, RunInfo]:
    """The server and the trace header of an adaptive config."""
    from psdlab.sim.acceptance import KeyedAcceptanceModel
    from psdlab.sim.acceptance_registry import make_acceptance
    from psdlab.sim.costs import make_cost_model
    from psdlab.sim.workloads import make_workload

    _check(config)
    pcfg = policy_config(getattr(config, "adaptive", None))
    ss = np.random.SeedSequence(config.seed)
    s_work, s_par, s_acc, _s_jit, _s_k = ss.spawn(5)
    reqs = make_workload(dict(config.workload)).generate(np.random.default_rng(s_work),
                                                          config.requests)
    arrival = np.asarray(reqs.arrival, dtype=float)
    prompt = np.asarray(reqs.prompt_len, dtype=np.int64)
    output = np.asarray(reqs.output_len, dtype=np.int64)
    if (output < 1).any():
        bad = int(np.flatnonzero(output < 1)[0])
        raise ValueError(f"workload: output_len must be >= 1, got {output[bad]} for request {bad}")
    target = make_cost_model(dict(config.target.cost), "target.cost")
    assert config.drafter is not None                 # SimConfig requires one unless ar
    drafter = make_cost_model(dict(config.drafter.cost), "drafter.cost")
    acceptance = make_acceptance(dict(config.acceptance))
    n = arrival.size
    if isinstance(acceptance, KeyedAcceptanceModel) and acceptance.needs_keys:
        params = acceptance.request_params(np.random.default_rng(s_par), n, keys=reqs.keys)
    else:
        params = acceptance.request_params(np.random.default_rng(s_par), n)
    ddev = config.drafter.device
    if ddev == config.target.device:
        ddev = "sim:drafter"
    server = AdaptiveServer(m=config.server.m, policy=AdaptivePolicy(pcfg), target=target,
                            drafter=drafter, acceptance=acceptance,
                            params=np.asarray(params, dtype=float), arrival=arrival,
                            prompt=prompt, output=output, rng=np.random.default_rng(s_acc),
                            target_dev=config.target.device, drafter_dev=ddev)
    extra = {"policy": dict(vars(pcfg)), "requests": n, "acceptance": dict(config.acceptance),
             "costs": {"target": target.describe(), "drafter": drafter.describe()},
             "trace_level": config.trace.level}
    run = RunInfo(mode="adaptive", k=max(pcfg.k_choices, default=0), m=config.server.m,
                  source="sim", devices={"target": config.target.device, "drafter": ddev},
                  models={"target": config.target.name, "drafter": config.drafter.name},
                  workload=dict(config.workload), seed=config.seed, versions=dict(versions or {}),
                  extra=extra)
    return server, run


class _Collect:
    def __init__(self, trace: Trace, level: str):
        self.trace, self.level = trace, level

    def write(self, server: AdaptiveServer, recs) -> None:
        if self.level == "step":
            self.trace.steps.extend(recs)
        for r in server.finished:
            self.trace.requests.append(server.request_record(r))


def run_fast(server: AdaptiveServer, sink: _Collect,
             observer: Callable | None = None) -> None:
    while True:
        status = server.prepare()
        if observer is not None:
            observer(server)
        if status == "done":
            return
        if status == "idle":
            server.after_idle(server.now + server.idle_delay())
            continue
        step = server.plan()
        sink.write(server, server.commit(step, segment_ends(server.now, step)))


def _phase(env, device, duration: float) -> Generator:
    with device.request() as req:
        yield req
        yield env.timeout(duration)


def _controller(env, server: AdaptiveServer, devices, sink: _Collect,
                observer: Callable | None) -> Generator:
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
        step: Step = server.plan()
        ends = []
        for seg in step.segments:
            yield env.all_of([env.process(_phase(env, devices[dev], dur))
                              for _k, dev, dur, *_ in seg])
            ends.append(env.now)
        if ends != segment_ends(server.now, step):
            raise RuntimeError("SimPy clock differs from the planned segment ends")
        sink.write(server, server.commit(step, ends))


def run_simpy(server: AdaptiveServer, sink: _Collect, observer: Callable | None = None) -> None:
    import simpy
    env = simpy.Environment(initial_time=0.0)
    devices = {name: simpy.Resource(env, capacity=1) for name in (server.tdev, server.ddev)}
    env.process(_controller(env, server, devices, sink, observer))
    env.run()


def adaptive_summary(server: AdaptiveServer) -> dict[str, Any]:
    """Switches, transitions, the switch costs paid and the choice timeline."""
    st = server.policy.stats
    return {"switches": server.counters["switches"], "transitions": dict(st["transitions"]),
            "switch_cost_s": dict(st["switch_cost_s"]),
            "catch_up_tokens": server.counters["catch_up_tokens"],
            "drafts_dropped": server.counters["drafts_dropped"],
            "steps": {m: server.counters[f"steps_{m}"] for m in ("ar", "sd", "psd")},
            "timeline": [[t, label] for t, label in server.timeline]}


def run_adaptive(config, *, path: str = "fast", trace_path: str | None = None,
                 observer: Callable | None = None, versions: dict[str, str] | None = None
                 ) -> tuple[Trace, dict[str, int], str | None]:
    """Run an adaptive config: (trace, counters, the trace file written or None)."""
    server, run = build_adaptive(config, versions)
    level = config.trace.level
    trace = Trace(run=run)
    sink = _Collect(trace, level)
    if path == "fast":
        run_fast(server, sink, observer)
    else:
        run_simpy(server, sink, observer)
    summary = adaptive_summary(server)
    trace.run = RunInfo(**{**vars(run), "extra": {**run.extra, "adaptive": summary}})
    out_path = trace_path if trace_path is not None else config.trace.path
    if level == "none":
        out_path = None
    if out_path:
        keep = trace if level == "step" else Trace(run=trace.run, requests=trace.requests)
        write_trace(out_path, keep)
    return trace, dict(server.counters), out_path
