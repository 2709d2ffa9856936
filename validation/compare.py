"""Predicted vs measured: replay a measured workload in the calibrated simulator.

For each measured trace the simulator is configured like the run (mode, k, batch size m, the
runtime's batch manager) with the calibrated cost models (``sim.costs.calibrated``: decode and
prefill fits, plus the controller overhead of ``validation.replay_model`` and the multipliers
of ``validation.replay_scales``: overlap contention) and the calibrated
acceptance model, and replays the measured workload: the same requests (their ids as the
replay's keys), arrival times, prompt lengths and output lengths, in the order the run admitted
them (``sim.workloads`` replay).  With the greedy match patterns (``sim.acceptance_matches``)
the replay knows each request's acceptance position by position; otherwise the simulator is
stochastic in acceptance.  Either way it is run with several seeds and each metric is averaged
over them.  When the engine caps proposals at the output budget, so does the replay
(``server.cap_proposals``): the last steps of each request draft and verify fewer tokens,
and the acceptance rates count alike.  Every metric comes from
``analysis.metrics.summarize`` on both sides.

Repeated runs of one configuration (same mode and workload shape) are compared as one: the
measured value of each metric is the median over the repeats, and ``(max - min) / median``
over them is kept as the measurement's own spread (the noise floor of that comparison).  The
prediction is made alike: each repeat's own workload replayed (repeats may serve other prompts,
hence other prompt lengths and request ids), the median over them.

Errors: relative, ``(predicted - measured) / measured``, for times and rates; for the PSD/SD
gain (``throughput(PSD) / throughput(SD) - 1``) the difference in percentage points.  The
closed-form prediction of the gain (``validation.gains``) comes from the measured t and V.
"""
from __future__ import annotations

import csv
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from psdlab.analysis.modes import TRACE_MODES, mode_spec
from psdlab.analysis.metrics import summarize
from psdlab.analysis.trace import Trace
from psdlab.sim.costs.fitted import FitFile, read_fit_file
from psdlab.validation.model_file import acceptance_spec

#: (metric key in the flattened summary, label, unit); errors are relative
METRICS: tuple[tuple[str, str, str], ...] = (
    ("throughput_tok_s", "throughput (output tokens / makespan)", "tok/s"),
    ("decode_throughput_tok_s", "decode throughput (paper's)", "tok/s"),
    ("makespan_s", "makespan", "s"),
    *((f"ttft.{q}", f"TTFT {q}", "s") for q in ("mean", "p50", "p90", "p99")),
    *((f"tpot.{q}", f"TPOT {q}", "s") for q in ("mean", "p50", "p90", "p99")),
    *((f"e2e.{q}", f"end-to-end {q}", "s") for q in ("mean", "p50", "p90", "p99")),
    ("acceptance_rate", "acceptance rate (VSR)", ""),
    ("mean_acceptance_length", "mean acceptance length", "tok"),
    ("mean_draft_time_s", "mean draft phase", "s"),
    ("mean_verify_time_s", "mean verify phase", "s"),
)
DEFAULT_SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Row:
    """One predicted-vs-measured comparison (the unit of every table and CSV)."""
    run: str
    metric: str
    label: str
    unit: str
    measured: float | None
    predicted: float | None
    error: float | None          # relative error, or percentage points for a gain
    error_kind: str = "rel"      # "rel" | "pp"
    source: str = "sim"          # "sim" | "closed form"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def flatten(summary: dict[str, Any]) -> dict[str, float | None]:
    """``{"ttft": {"p99": x}}`` -> ``{"ttft.p99": x}`` for the numeric metrics."""
    out: dict[str, float | None] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                if v is None or isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"{key}.{sub}"] = None if v is None else float(v)
        elif value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = None if value is None else float(value)
    return out


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


# ---------------------------------------------------------------------------- the replay

def _id_key(rid: Any) -> tuple:
    """Ties in admission time (a simulator admits a batch at one instant) go by id: numbers
    numerically, names as text."""
    return (0, rid, "") if isinstance(rid, int) else (1, 0, str(rid))


def admission_order(trace: Trace) -> list:
    """The trace's requests in the order the engine admitted them (a trace lists them as they
    finished): arrival, admission time, then id."""
    return sorted(trace.requests, key=lambda r: (r.arrival, r.admitted, _id_key(r.id)))


def replay_rows(trace: Trace) -> tuple[tuple[float, int, int, str], ...]:
    """The measured workload as a replay's rows (arrival, prompt_len, output_len, key = the
    request id, for acceptance models that know requests: ``sim.acceptance_matches``),
    arrivals relative to the first one, in the order the run admitted them (ties in arrival
    keep that order in the replay): the simulator's ``replay`` workload takes them inline."""
    reqs = admission_order(trace)
    if not reqs:
        raise ValueError(f"trace: {trace.run.mode} run has no request records to replay")
    t0 = reqs[0].arrival
    return tuple((r.arrival - t0, max(1, r.prompt_len), max(1, r.output_len), str(r.id))
                 for r in reqs)


def write_replay(trace: Trace, path: str | os.PathLike) -> str:
    """The measured workload as a replay CSV (``replay_rows``), for a user who wants the file
    (``psdlab simulate`` takes it as ``{name = "replay", path = ...}``)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["arrival", "prompt_len", "output_len", "key"])
        for a, p, o, key in replay_rows(trace):
            w.writerow([repr(a), p, o, key])
    return os.fspath(path)


def trace_sim_config(trace: Trace, model: str | FitFile, replay: Sequence[Any] | str, *,
               seed: int = 0,
               params: Any = None, acceptance: dict[str, Any] | None = None,
               jitter: dict[str, Any] | None = None,
               overlap_share: tuple[float, float] | None = None):
    """A SimConfig that replays ``trace``'s workload with the calibrated models, the
    controller overhead and the overlap contention of ``params`` (a ReplayParams), applied to
    ``overlap_share`` of the decode time (``validation.replay_scales``)."""
    import psdlab.sim.costs.calibrated as sc
    from psdlab.sim.sim_config import SimModel, ServerConfig, SimConfig, TraceConfig
    from psdlab.validation.replay_model import ReplayParams
    from psdlab.validation.replay_scales import decode_scales

    run = trace.run
    mode = run.mode
    if mode not in TRACE_MODES:
        raise ValueError(f"trace: mode {mode!r} cannot be replayed")
    spec = mode_spec(mode)
    params = params or ReplayParams()
    acc: dict[str, Any] = {"name": "none"}
    if spec.drafting:
        acc = acceptance or acceptance_spec(read_fit_file(model, "model").doc)
    t_scale, d_scale = decode_scales(trace, model, params, overlap_share)
    # two batches: the runtime's batch manager rebalances them (runtime.batch_manager)
    server = ServerConfig(mode=mode, k=max(run.k, 1) if spec.drafting else 0, m=run.m,
                          policy="rebalance" if spec.batches == 2 else "paper",
                          cap_proposals=bool(params.draft_cap) and spec.drafting)
    devices = run.devices or {}
    target = SimModel(name=str((run.models or {}).get("target", "target")),
                      device=str(devices.get("target", "sim:target")),
                      cost=sc.calibrated_cost_spec(model, "target",
                                                   overhead=params.overhead(mode),
                                                   scale=t_scale,
                                                   prefill_scale=params.prefill_target,
                                                   prefill_overhead=params.prefill_overhead(mode)))
    drafter = None
    if spec.drafting:
        drafter = SimModel(name=str((run.models or {}).get("drafter", "drafter")),
                           device=str(devices.get("drafter", "sim:drafter")),
                           cost=sc.calibrated_cost_spec(model, "drafter", scale=d_scale,
                                                        prefill_scale=params.prefill_drafter))
    return SimConfig(server=server, target=target, drafter=drafter, acceptance=acc,
                     workload={"name": "replay", "path": replay} if isinstance(replay, str)
                     else {"name": "replay", "rows": list(replay)},
                     requests=len(trace.requests), seed=seed,
                     jitter=jitter if jitter is not None else params.jitter(),
                     trace=TraceConfig(path=None, level="step"))


def predict_trace(trace: Trace, model: str | FitFile, *, seeds: Sequence[int] = DEFAULT_SEEDS,
            params: Any = None, acceptance: dict[str, Any] | None = None,
            jitter: dict[str, Any] | None = None
            ) -> tuple[dict[str, float | None], Trace]:
    """Simulated metrics for a measured trace (mean over ``seeds``) and the first seed's
    simulated trace; the measured workload goes to the simulator as the replay's rows
    (``replay_rows``), no file between them."""
    from psdlab.sim.simulation import simulate

    if not seeds:
        raise ValueError("seeds: need at least one")
    model = read_fit_file(model, "model")           # read once for every seed's cost models
    from psdlab.validation.replay_scales import overlap_share
    replay = replay_rows(trace)
    share = None
    if trace.run.mode in TRACE_MODES and mode_spec(trace.run.mode).overlap:
        # the contention applies to overlapped steps only: one pass to see which share
        # of the replay's decode time overlaps, then the seeds with that share
        probe = simulate(trace_sim_config(trace, model, replay, seed=seeds[0],
                                    params=params, acceptance=acceptance, jitter=jitter))
        share = overlap_share(probe.trace)
    runs: list[dict[str, float | None]] = []
    first: Trace | None = None
    for seed in seeds:
        cfg = trace_sim_config(trace, model, replay, seed=seed, params=params,
                         acceptance=acceptance, jitter=jitter, overlap_share=share)
        res = simulate(cfg)
        runs.append(flatten(res.metrics))
        first = first or res.trace
    keys = runs[0].keys()
    mean: dict[str, float | None] = {}
    for key in keys:
        vals = [r.get(key) for r in runs]
        known = [v for v in vals if v is not None]
        mean[key] = None if len(known) < len(vals) else float(np.mean(known))
    assert first is not None            # seeds is not empty: every seed sets it
    return mean, first


def compare_metrics(run: str, measured: dict[str, float | None],
                    predicted: dict[str, float | None]) -> list[Row]:
    rows = []
    for key, label, unit in METRICS:
        m, p = measured.get(key), predicted.get(key)
        if m is None and p is None:
            continue
        rows.append(Row(run, key, label, unit, m, p, rel_error(p, m)))
    return rows


@dataclass
class TraceComparison:
    """A measured trace (or repeats of one configuration: ``repeats``), its replay in the
    simulator, and the rows comparing them."""
    name: str
    trace: Trace
    measured: dict[str, float | None]
    predicted: dict[str, float | None]
    rows: list[Row]
    sim_trace: Trace | None = None
    repeats: list[Trace] = field(default_factory=list)
    spread: dict[str, float | None] = field(default_factory=dict)
    sim_repeats: list[Trace] = field(default_factory=list)   # each repeat's replay, 1st seed


def median_metrics(traces: Sequence[Trace]) -> tuple[dict[str, float | None],
                                                      dict[str, float | None]]:
    """Per metric, the median over repeated runs and their spread ((max - min) / median)."""
    runs = [flatten(summarize(t)) for t in traces]
    med: dict[str, float | None] = {}
    spread: dict[str, float | None] = {}
    for key in runs[0]:
        vals = [r.get(key) for r in runs]
        known = [v for v in vals if v is not None]
        if len(known) < len(vals):
            med[key] = spread[key] = None
            continue
        m = med[key] = float(np.median(known))
        spread[key] = (float((max(known) - min(known)) / abs(m))
                       if m and len(known) > 1 else None)
    return med, spread


def merged(traces: Sequence[Trace]) -> Trace:
    """One trace holding the steps of all repeats (the first one's run info and requests), for
    statistics over steps such as the closed form's mean phase times."""
    if len(traces) == 1:
        return traces[0]
    return Trace(traces[0].run, [s for t in traces for s in t.steps], list(traces[0].requests))


def workload_signature(trace: Trace) -> tuple:
    """What a replay of ``trace`` depends on besides the models: its requests (id, arrival
    relative to the first, prompt and output length) in admission order."""
    reqs = admission_order(trace)
    t0 = reqs[0].arrival if reqs else 0.0
    return tuple((str(r.id), round(r.arrival - t0, 9), r.prompt_len, r.output_len)
                 for r in reqs)


def predict_repeats(reps: Sequence[Trace], model: str | FitFile, **kw: Any
                    ) -> tuple[dict[str, float | None], list[Trace]]:
    """The prediction for repeats of one configuration, like the measurement: each repeat's
    own workload (its prompts, lengths, arrivals) replayed, and per metric the median over
    the repeats (a workload served twice counts twice, replayed once); with each repeat's
    simulated trace (first seed)."""
    cache: dict[tuple, tuple[dict[str, float | None], Trace]] = {}
    preds, sims = [], []
    for tr in reps:
        sig = workload_signature(tr)
        if sig not in cache:
            cache[sig] = predict_trace(tr, model, **kw)
        preds.append(cache[sig][0])
        sims.append(cache[sig][1])
    med: dict[str, float | None] = {}
    for key in preds[0]:
        vals = [p.get(key) for p in preds]
        known = [v for v in vals if v is not None]
        med[key] = None if len(known) < len(vals) else float(np.median(known))
    return med, sims


def compare_trace(name: str, trace: Trace | Sequence[Trace], model: str | FitFile,
                  **kw: Any) -> TraceComparison:
    """Compare one trace, or the median of repeated runs of one configuration, with its
    replay (the median of the repeats' own replays: ``predict_repeats``)."""
    reps = [trace] if isinstance(trace, Trace) else list(trace)
    measured, spread = median_metrics(reps)
    predicted, sims = predict_repeats(reps, model, **kw)
    return TraceComparison(name, reps[0], measured, predicted,
                           compare_metrics(name, measured, predicted), sims[0], reps, spread,
                           sims)
