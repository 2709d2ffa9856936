"""``simulate(config) -> SimResult``: build the server (``sim.build``: one code path for every
mode, adaptive included), run it, write the trace.

Randomness: one ``SeedSequence(seed)`` spawns independent streams for the workload, the
per-request acceptance parameters, the accepted counts, the step-time jitter and the
per-request k (``sim.build``), so the same seed gives the same trace (byte for byte) on either
execution path, each one loop for every server (``sim.server_protocol``):

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

from psdlab.analysis.trace import Trace, TraceWriter
from psdlab.sim.adaptive import AdaptiveServer
from psdlab.sim.build import Built, build
from psdlab.sim.sim_config import SimConfig
from psdlab.sim.trace_records import AdaptiveSink, Sink

__all__ = ["PATHS", "SimResult", "Built", "build", "simulate"]

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


def simulate(config: SimConfig, *, path: str = "fast", trace_path: str | None = None,
             progress: bool = False, observer: Callable[[Any], None] | None = None,
             tables: Any = None) -> SimResult:
    """Run one simulation.  ``trace_path`` overrides ``config.trace.path``; ``observer`` is
    called with the server at every step boundary (after admission; for tests); ``tables``: a
    `sim.costtable.TableShare` of runs that differ only in their workload (plan trials)."""
    from psdlab.analysis.checks import check_choice
    from psdlab.sim.fast import run_fast
    from psdlab.sim.servers import run_simpy

    check_choice("path", path, PATHS)
    t0, c0 = time.perf_counter(), time.process_time()
    built = build(config)
    core = built.core
    fixed = None if isinstance(core, AdaptiveServer) else core     # cost tables: Core only
    if tables is not None and fixed is not None:
        fixed.shared_costs = tables.offer(config)
    level = config.trace.level
    out_path = trace_path if trace_path is not None else config.trace.path
    if level == "none":
        out_path = None
    trace = Trace(run=built.run)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=core.N, unit="req", desc="simulate", leave=False)
    on_finish = bar.update if bar else None
    writer = None
    sink: Sink | AdaptiveSink
    if isinstance(core, AdaptiveServer):          # written at the end: its header has counts
        sink = AdaptiveSink(trace, level, out_path, on_finish=on_finish)
    else:
        writer = TraceWriter(out_path, built.run, validate=False) if out_path else None
        sink = Sink(writer, trace, level, on_finish=on_finish)
    try:
        if path == "fast":
            run_fast(core, sink, config.server.max_interval_steps, observer)
        else:
            run_simpy(core, sink, observer)
        sink.finalize(core)
        if tables is not None and fixed is not None:
            tables.keep(config, fixed.step_costs)
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    return SimResult(trace=trace, counters=dict(core.counters),
                     wall_s=time.perf_counter() - t0, path=path, trace_path=out_path,
                     cpu_s=time.process_time() - c0)
