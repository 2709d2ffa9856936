"""`psdlab validate` in one call: every trace replayed in the calibrated simulator, the PSD/SD
gains of the SD/PSD pairs among them, and a summary against the targets the package sets
itself (issue 5): on held-out runs throughput and TPOT within 5%, p99 end-to-end latency within
10%, the PSD/SD gain within 5 percentage points, and the closed-form speedup within 10%.

The simulator's gain is judged both on the end-to-end throughput (output tokens / makespan,
the demo's headline) and on the paper's decode throughput (prefill steps excluded; the
simulator writes a prefill as a step of its own, as the runtime does, so both count the same
work).  The closed form is judged in the steady state it models (``validation.gains``); its error
over whole runs, drain tail included, is listed without a bound (``UNJUDGED``).  Each target
also says how much of its error the measurement's own noise explains (``validation.noise``):
the typical standard error of the measured medians and the chance that noise alone, with a
perfect prediction, would break the bound on at least one of the runs judged.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Sequence

import numpy as np

from psdlab.analysis.metrics import summarize
from psdlab.analysis.trace import Trace
from psdlab.sim.costs.fitted import FitFile, read_fit_file
from psdlab.validation.model_file import acceptance_spec
from psdlab.validation.compare import (DEFAULT_SEEDS, Row, TraceComparison, compare_trace, flatten,
                                merged)
from psdlab.validation.gains import (GainResult, closed_form, gain_rows, pair_traces,
                                    predicted_closed_form, predicted_rows, workload_key)
from psdlab.validation.noise import NoiseModel, noise_of
from psdlab.validation.replay_model import ReplayParams, load_replay_params

#: summary checks: (label, row metric, row source, bound, error kind)
TARGETS: tuple[tuple[str, str, str, float, str], ...] = (
    ("throughput", "throughput_tok_s", "sim", 0.05, "rel"),
    ("TPOT mean", "tpot.mean", "sim", 0.05, "rel"),
    ("e2e p99", "e2e.p99", "sim", 0.10, "rel"),
    ("PSD/SD gain (throughput)", "gain.throughput_tok_s", "sim", 5.0, "pp"),
    ("PSD/SD gain (decode throughput)", "gain.decode_throughput_tok_s", "sim", 5.0, "pp"),
    ("closed-form prediction (steady state)", "speedup.steady.predicted", "closed form", 0.10,
     "rel"),
    ("closed-form consistency check (steady state)", "speedup.steady", "closed form", 0.10,
     "rel"),
    ("closed form + overlap slowdown (steady)", "speedup.steady.slowdown", "closed form", 0.10,
     "rel"),
)
#: listed under the targets without a bound: the closed form over whole runs, drain included
UNJUDGED: tuple[tuple[str, str, str], ...] = (
    ("closed-form speedup (whole run, drain tail included)", "speedup.decode", "closed form"),
)


@dataclass
class Validation:
    comparisons: list[TraceComparison]
    gains: list[GainResult]
    model: FitFile
    params: ReplayParams
    seeds: tuple[int, ...]
    notes: list[str] = field(default_factory=list)
    #: the configurations the model was calibrated on (their noise: ``noise.calibration_se``)
    calibration: frozenset[str] = frozenset()

    @property
    def model_path(self) -> str:
        return self.model.path

    @property
    def rows(self) -> list[Row]:
        out = [r for c in self.comparisons for r in c.rows]
        return out + [r for g in self.gains for r in g.rows]

    def rows_of(self, only: set[str] | None = None) -> list[Row]:
        """Rows of the named runs (a gain row counts when both its runs are named)."""
        if only is None:
            return self.rows
        keep = [r for c in self.comparisons if c.name in only for r in c.rows]
        return keep + [r for g in self.gains if g.sd in only and g.psd in only for r in g.rows]

    def target_rows(self, only: set[str] | None = None
                    ) -> Iterator[tuple[str, str, str, float | None, str, list[Row]]]:
        """(label, metric, source, bound, kind, rows with an error) per target of TARGETS
        and UNJUDGED (bound None) that the runs named in ``only`` (all when None) have."""
        listed = [(label, metric, source, None, "rel") for label, metric, source in UNJUDGED]
        for label, metric, source, bound, kind in (*TARGETS, *listed):
            rows = [r for r in self.rows_of(only)
                    if r.metric == metric and r.source == source and r.error is not None]
            if rows:
                yield label, metric, source, bound, kind, rows

    def summary(self, only: set[str] | None = None) -> list[dict[str, Any]]:
        """Worst absolute error per target (see TARGETS; UNJUDGED ones with bound and
        within None) over the rows of the runs named in ``only`` (all runs when None)."""
        out = []
        for label, metric, source, bound, kind, rows in self.target_rows(only):
            errs = [(abs(r.error), r.run) for r in rows if r.error is not None]  # all of them
            worst, run = max(errs)
            mean = float(np.mean([e for e, _ in errs]))
            noisy = [(abs(r.error), se) for r in rows if (se := self.noise(r)) is not None
                     and se > 0 and r.error is not None]
            ses = [se for _, se in noisy]
            z = (float(np.sqrt(np.mean([(e / se) ** 2 for e, se in noisy]))) if noisy
                 else None)
            out.append({"target": label, "metric": metric, "source": source, "bound": bound,
                        "kind": kind, "n": len(errs), "mean_abs_error": mean,
                        "max_abs_error": worst, "worst_run": run,
                        "within": None if bound is None else worst <= bound,
                        "noise_se": float(np.median(ses)) if ses else None,
                        "error_over_noise": z,
                        "noise_break_chance": (None if bound is None
                                               else self.noise_model.chance(rows, bound))})
        return out

    @cached_property
    def noise_model(self) -> NoiseModel:
        """The measurement noise of these runs (``validation.noise``)."""
        return noise_of(self)

    def noise(self, row: Row) -> float | None:
        """Standard error of a row's measured value from run-to-run noise
        (``validation.noise``)."""
        return self.noise_model.se(row)

    @property
    def noise_cvs(self) -> dict[str, float | None]:
        """Pooled run-to-run CV per metric over all configurations with repeats."""
        return dict(self.noise_model.cvs)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model.path, "replay_params": self.params.to_dict(),
                "seeds": list(self.seeds), "rows": [r.to_dict() for r in self.rows],
                "gains": [{"name": g.name, "sd": g.sd, "psd": g.psd,
                           "closed_form": g.closed_form.to_dict() if g.closed_form else None,
                           "closed_form_predicted": g.predicted_cf.to_dict()
                           if g.predicted_cf else None}
                          for g in self.gains],
                "summary": self.summary(), "notes": list(self.notes)}


def model_params(model: str | FitFile) -> ReplayParams:
    """The replay parameters stored in a model file (defaults when absent)."""
    return load_replay_params(read_fit_file(model, "model").doc)


def trace_name(path: str, trace: Trace, used: set[str]) -> str:
    base = os.path.splitext(os.path.basename(path))[0] or trace.run.mode
    name, i = base, 2
    while name in used:
        name, i = f"{base}#{i}", i + 1
    used.add(name)
    return name


_REPEAT = re.compile(r"^(.+)_r\d+$")


def config_name(name: str) -> str:
    """The configuration a run repeats: ``NAME_rN`` -> ``NAME``; other names are their own."""
    m = _REPEAT.match(name)
    return m.group(1) if m else name


def _shape_key(trace: Trace) -> tuple:
    """What repeats of one configuration share even when they serve different prompts (the
    demo's repeats each serve the next window of their side's prompts): mode, k, m, the
    number of requests, their arrival times and output lengths in order of arrival."""
    reqs = sorted((round(r.arrival, 2), r.output_len) for r in trace.requests)
    return (trace.run.mode, trace.run.k, trace.run.m, tuple(reqs))


def group_repeats(traces: Sequence[tuple[str, Trace]], groups: dict[str, str] | None = None
                  ) -> list[tuple[str, list[Trace]]]:
    """(config, [traces]) in first-seen order: runs map to configs by ``groups`` (default
    ``config_name``) and are grouped only when they agree: on mode and the whole workload
    (`workload_key`), or, for a run ``groups`` names, on its shape (`_shape_key`: its
    prompts may differ); otherwise they are kept apart."""
    out: dict[str, list[Trace]] = {}
    for name, tr in traces:
        named = name in (groups or {})
        cfg = (groups or {}).get(name) or config_name(name)
        first = out.get(cfg)
        if first is not None:
            same = (_shape_key(first[0]) == _shape_key(tr) if named else
                    first[0].run.mode == tr.run.mode
                    and workload_key(first[0]) == workload_key(tr))
            if not same:
                cfg = name
        out.setdefault(cfg, []).append(tr)
    return list(out.items())


def validate(model: str | FitFile, traces: Sequence[tuple[str, Trace]], *,
             seeds: Sequence[int] = DEFAULT_SEEDS, params: ReplayParams | None = None,
             acceptance: dict[str, Any] | None = None, jitter: dict[str, Any] | None = None,
             progress: Any = None, groups: dict[str, str] | None = None,
             calibration: Sequence[str] = ()) -> Validation:
    """Replay each named trace, or each configuration's repeats as one (``group_repeats``:
    measured = median over them); pair SD and PSD configurations of one workload for the
    gain.  ``calibration``: the configurations the model file was fitted on (their noise
    enters the chance that noise alone breaks a bound, ``validation.noise``)."""
    if not traces:
        raise ValueError("traces: need at least one trace")
    model = read_fit_file(model, "model")  # read once; every replay below is handed the object
    params = model_params(model) if params is None else params
    comps: list[TraceComparison] = []
    notes: list[str] = []
    for name, reps in group_repeats(traces, groups):
        if not all(tr.requests for tr in reps):
            notes.append(f"{name}: no request records; skipped")
            continue
        comps.append(compare_trace(name, reps, model, seeds=tuple(seeds), params=params,
                                   acceptance=acceptance, jitter=jitter))
        if progress is not None:
            progress(name)
    by_name = {c.name: c for c in comps}
    gains = []
    for sd, psd in pair_traces([(c.name, c.trace) for c in comps]):
        a, b = by_name[sd], by_name[psd]
        cf = _closed_form(merged(a.repeats or [a.trace]), merged(b.repeats or [b.trace]),
                          f"{sd}/{psd}", notes, params.slowdown,
                          (params.contention_target, params.contention_drafter))
        label = f"{psd} vs {sd}"
        rows = gain_rows(label, a.measured, b.measured, a.predicted, b.predicted, cf)
        pcf = None
        if cf is not None:        # offline pairs only, as the consistency check
            pcf = predicted_closed_form(a.trace, model, params,
                                        acceptance or _default_acceptance(model))
            if pcf is not None:
                rows += predicted_rows(label, a.measured, b.measured, pcf)
        gains.append(GainResult(label, sd, psd, rows, cf, pcf))
    return Validation(comps, gains, model, params, tuple(seeds), notes,
                      frozenset(calibration or calibration_configs(model, traces, groups)))


def calibration_configs(model: str | FitFile, traces: Sequence[tuple[str, Trace]],
                        groups: dict[str, str] | None = None) -> set[str]:
    """The configurations of the named traces that the model file says it was fitted on
    (``meta.calibration.traces``: file names, matched on their stem)."""
    meta = (read_fit_file(model, "model").doc.get("meta") or {}).get("calibration") or {}
    stems = {os.path.splitext(os.path.basename(str(t)))[0] for t in meta.get("traces") or ()}
    return {(groups or {}).get(name) or config_name(name) for name, _ in traces
            if os.path.splitext(os.path.basename(name))[0] in stems}


def _default_acceptance(model: str | FitFile) -> dict[str, Any] | None:
    try:
        return acceptance_spec(read_fit_file(model, "model").doc)
    except ValueError:
        return None


def _closed_form(sd: Trace, psd: Trace, label: str, notes: list[str],
                 slowdown: tuple[float, float] | None = None,
                 contention: tuple[float, float] | None = None) -> Any:
    """The closed form for an offline pair (None, with a note, otherwise): it is a
    steady-state model of full batches, which timed arrivals do not keep."""
    if any(r.arrival > 0 for r in sd.requests):
        notes.append(f"{label}: timed arrivals; the closed form (full batches) is not compared")
        return None
    try:
        return closed_form(sd, psd, slowdown, contention)
    except ValueError as exc:
        notes.append(f"{label}: no closed form ({exc})")
        return None


def measured_gains(traces: Sequence[tuple[str, Trace]]) -> list[GainResult]:
    """Measured and closed-form gains only (no simulator), e.g. for calibration runs."""
    named = {n: t for n, t in traces}
    out = []
    for sd, psd in pair_traces(list(traces)):
        a, b = flatten(summarize(named[sd])), flatten(summarize(named[psd]))
        cf = _closed_form(named[sd], named[psd], f"{sd}/{psd}", [])
        label = f"{psd} vs {sd}"
        out.append(GainResult(label, sd, psd, gain_rows(label, a, b, None, None, cf), cf))
    return out
