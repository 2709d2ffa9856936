"""Calibrate the simulator from serving-benchmark results (vLLM ``bench serve
--save-result --save-detailed``, SGLang ``bench_serving --output-details``) and, optionally,
vLLM ``/metrics`` snapshots taken before and after the runs.

What is fitted (``fit_from_bench``), in this order:

1. **Acceptance** per draft position (speculative runs only): from the snapshots' counter
   difference when given, else from the results' ``spec_decode_per_position_acceptance_rates``
   pooled over runs (weighted by drafts), else (SGLang) a geometric rate from the mean
   acceptance length (``validation.serving_results.acceptance_counts``).
2. **Target step cost** (``sim.costs`` affine: base + per_seq x seqs + per_token x tokens +
   per_context x context tokens, per forward pass), on the non-speculative (AR) runs, by
   replaying their requests (``validation.serving_results.replay``,
   ``validation.serving_results.replay_fit``): log errors of the mean TTFT and TPOT of groups of
   requests, Nelder-Mead with restarts and a bounded Gauss-Newton polish (``scipy.optimize``).
3. **Drafter step cost** (affine base + per_token per one-token drafting forward; in SD the
   drafter shares the target's device) on the speculative runs with the target's cost fixed
   at step 2's -- or, with no AR run, the target's base, per_seq and per_token and the
   drafter's base jointly on the speculative runs (per_context then fixed at 0).

With a structural prior (``drafter_to_target_ratio``, or ``target_config``/``draft_config``:
``validation.serving_results.drafter_prior``, the rule in one place) steps 2 and 3 are one fit on
all runs: every drafter coefficient is tied to the target's (drafter = ratio x target) and the
target's are fitted; the split of a speculative step between the models then comes from the prior.

The replays draw gamma step-time jitter at the spread of consecutive inter-token latencies
inside requests (``replay.step_time_cv``, the smallest over the runs): queueing under
variable step times is slower than under their mean, and a jitter-free replay would push
that into the coefficients.

Intervals: bootstrap over requests (``validation.serving_results.replay_fit``; the drafter's
replicates use the target's, so its interval carries the target's uncertainty) for the costs, Wilson
95% per position for the acceptance.  ``BenchFit.notes`` says what the inputs
could and could not identify.  ``BenchFit.save`` writes the model file the simulator reads
(``psdlab.cost-fit``: ``{"name": "fitted", "path": F, "role": "target" | "drafter"}``, the
acceptance in ``meta.acceptance``), ``BenchFit.load`` reads it back.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.formats.errors import FormatError
from psdlab.sim.costs.affine import AFFINE_TERMS
from psdlab.sim.sim_config import SimModel, ServerConfig, SimConfig, TraceConfig
from psdlab.validation.serving_results.acceptance_counts import (AcceptanceEstimate, from_counters,
                                                                 from_runs)
from psdlab.validation.serving_results.replay_fit import FitOutcome, Param, fit_stage
from psdlab.validation.serving_results.identifiability import identifiability_notes
from psdlab.validation.serving_results.replay import (BenchRun, load_bench_run, server_for,
                                                      step_time_cv)

#: largest step-time CV the replays use (a spread above it is batch changes, not noise)
MAX_JITTER = 0.5
INTERVAL_METHOD = ("bootstrap over requests ({b} replicates, each a Gauss-Newton step from the "
                   "estimate, replays re-seeded), percentile 95%; acceptance: Wilson 95% per "
                   "position")


@dataclass(frozen=True)
class BenchFit:
    """A calibration from benchmark results (module docstring); times in seconds."""
    target_cost: Mapping[str, Any]
    drafter_cost: Mapping[str, Any] | None
    acceptance: Mapping[str, Any] | None          # {"name": "positional", "rates": [...]}
    acceptance_per_position: tuple[float, ...] | None   # vLLM's unconditional rates
    intervals: Mapping[str, tuple[float, float]]  # "target.base" -> 95% (s); "acceptance.p1"...
    interval_method: str
    notes: tuple[str, ...]
    inputs: tuple[str, ...]
    server: Mapping[str, Any]                     # the replay's server (m, policy, kv)
    k: int | None
    fit_error: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    correlations: Mapping[str, float] = field(default_factory=dict)
    jitter_cv: float = 0.0                        # step-time spread the replays use (gamma)
    drafter_to_target_ratio: float | None = None  # the structural prior, when one was used

    # ------------------------------------------------------------------ model file
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["intervals"] = {k: list(v) for k, v in self.intervals.items()}
        out["correlations"] = {k: (None if not math.isfinite(v) else v)
                               for k, v in self.correlations.items()}
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """The ``psdlab.cost-fit`` model file (temp file and rename: nothing half-written)."""
        from psdlab.sim.costs.fitted import write_fit
        roles = {"target": _role(self.target_cost, self.intervals, "target")}
        if self.drafter_cost is not None:
            roles["drafter"] = _role(self.drafter_cost, self.intervals, "drafter")
        meta: dict[str, Any] = {"bench_fit": self.to_dict()}
        if self.acceptance is not None:
            meta["acceptance"] = {"default": "positional", "positional": dict(self.acceptance)}
        write_fit(path, roles, meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BenchFit:
        from psdlab.sim.costs.fitted import read_fit_file
        doc = read_fit_file(path, "model").doc
        raw = (doc.get("meta") or {}).get("bench_fit")
        if not isinstance(raw, dict):
            raise ValueError(f"{os.fspath(path)}: field 'meta.bench_fit': missing (not written "
                             f"by a calibration from bench results)")
        raw = dict(raw)
        for key in ("acceptance_per_position", "notes", "inputs"):
            if raw.get(key) is not None:
                raw[key] = tuple(raw[key])
        raw["intervals"] = {k: tuple(v) for k, v in raw.get("intervals", {}).items()}
        raw["correlations"] = {k: (float("nan") if v is None else v)
                               for k, v in raw.get("correlations", {}).items()}
        try:
            return cls(**raw)
        except TypeError as exc:
            raise ValueError(f"{os.fspath(path)}: field 'meta.bench_fit': {exc}") from None

    # ------------------------------------------------------------------ simulation
    def sim_config(self, workload_path: str, mode: str, k: int,
                   request_rate: float | None = None, max_concurrency: int | None = None,
                   seed: int = 0) -> SimConfig:
        """A simulator config with these models serving ``workload_path``'s requests (any
        format ``analysis.formats`` reads): their own arrivals, or re-timed to
        ``request_rate`` (inf: all at once); a client cap ``max_concurrency`` caps the
        server's batch (the prediction in ``predict`` also counts TTFT from the
        client's send)."""
        from psdlab.sim.workloads import requests_from_file
        if mode != "ar" and (self.drafter_cost is None or self.acceptance is None):
            raise ValueError(f"mode: {mode!r} needs a drafter cost and acceptance, which this "
                             f"calibration has not (no speculative run in its inputs)")
        spec: dict[str, Any] = {"name": "file", "path": os.fspath(workload_path)}
        reqs = requests_from_file(spec, "workload")
        if request_rate is not None:
            spec["rate_scale"] = _rate_scale(reqs.arrival, request_rate, workload_path)
        base = ServerConfig(**{k_: v for k_, v in self.server.items()
                               if k_ in ("m", "policy", "kv_blocks", "block_size",
                                         "cap_proposals")})
        server = server_for(mode, k, base, max_concurrency)
        spec_mode = mode != "ar"
        return SimConfig(
            server=server, target=SimModel("target", "sim:target", dict(self.target_cost)),
            drafter=(SimModel("drafter", "sim:drafter", dict(self.drafter_cost or {}))
                     if spec_mode else None),
            acceptance=dict(self.acceptance or {}) if spec_mode else {"name": "none"},
            workload=spec, requests=len(reqs), seed=seed,
            jitter={"dist": "gamma", "cv": self.jitter_cv} if self.jitter_cv > 0 else None,
            trace=TraceConfig(path=None, level="step"))


def _rate_scale(arrivals: np.ndarray, rate: float, path: str) -> float:
    if not rate > 0:
        raise ValueError(f"request_rate: must be > 0 (inf: all at once), got {rate}")
    if math.isinf(rate):
        return 1e6
    span = float(arrivals.max() - arrivals.min()) if arrivals.size > 1 else 0.0
    if span <= 0:
        raise ValueError(f"request_rate: {path}'s requests all arrive at once; they cannot be "
                         f"re-timed to {rate:g}/s (give a file with arrival times)")
    return min(1e6, rate / ((arrivals.size - 1) / span))


def _role(cost: Mapping[str, Any], intervals: Mapping[str, tuple[float, float]],
          role: str) -> dict[str, Any]:
    coef = {t: float(cost.get(t, 0.0)) for t in AFFINE_TERMS}
    ci = {t: list(intervals[f"{role}.{t}"]) for t in AFFINE_TERMS if f"{role}.{t}" in intervals}
    return {"kind": "affine", "coef": coef, "ci95": ci}


# ---------------------------------------------------------------------------- the fit

def _median(values: np.ndarray) -> float:
    v = values[np.isfinite(values) & (values > 0)]
    return float(np.median(v)) if v.size else 1e-2


def _load_base(base_config: str | None) -> ServerConfig | None:
    if base_config is None:
        return None
    from psdlab.sim.sim_config import load_config
    return load_config(base_config).server


def _guesses(runs: Sequence[BenchRun], accept_len: float, k: int) -> dict[str, float]:
    """Initial coefficients from the data's medians: the step time is TPOT x tokens per step;
    TTFT over the prompt length bounds per_token."""
    tpot = _median(np.concatenate([r.tpot_s for r in runs]))
    ttft = _median(np.concatenate([r.ttft_s for r in runs]))
    prompt = float(np.median(np.concatenate([r.prompt for r in runs])))
    busy = sum(float(np.nansum(r.ttft_s + np.nan_to_num(r.tpot_s) * (r.output - 1)))
               for r in runs)
    span = sum(float(r.send_s.max() + r.ttft_s.max()) for r in runs) or 1.0
    conc = max(1.0, busy / span)
    context = float(np.median(np.concatenate([r.prompt + r.output / 2 for r in runs])))
    step = tpot * accept_len
    return {"target.base": 0.6 * step / (1.0 if k == 0 else 1.5),
            "target.per_seq": 0.3 * step / conc,
            "target.per_token": max(0.3 * ttft, ttft - step) / max(prompt, 1.0),
            "target.per_context": 0.05 * step / max(conc * context, 1.0),
            "drafter.base": 0.25 * step / max(k, 1),
            "drafter.per_token": 0.05 * step / max(k, 1) / conc}


def _errors(runs: Sequence[BenchRun], outcome_costs: Mapping[str, Mapping[str, Any]],
            acceptance: Mapping[str, Any] | None, base: ServerConfig | None,
            seed: int, jitter_cv: float) -> dict[str, dict[str, Any]]:
    """Per input, measured and simulated mean TTFT and TPOT at the fit (relative error)."""
    import tempfile

    from psdlab.validation.serving_results.replay import (replay_config, replay_times,
                                                          write_replay_csv)
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="psdlab-bench-err-") as folder:
        for r in runs:
            cfg = replay_config({"name": "replay", "path": write_replay_csv(r, folder)}, len(r),
                                server_for(r.mode, r.k, base), outcome_costs["target"],
                                outcome_costs.get("drafter"), acceptance, seed=seed,
                                jitter_cv=jitter_cv)
            ttft, tpot = replay_times(cfg)
            keep = np.isfinite(r.tpot_s)
            m_ttft, s_ttft = float(r.ttft_s.mean()), float(ttft.mean())
            m_tpot, s_tpot = float(r.tpot_s[keep].mean()), float(np.nanmean(tpot[keep]))
            out[r.path] = {"mode": r.mode, "requests": len(r),
                           "mean_ttft_ms_measured": 1e3 * m_ttft,
                           "mean_ttft_ms_fitted": 1e3 * s_ttft,
                           "ttft_error": s_ttft / m_ttft - 1.0,
                           "mean_tpot_ms_measured": 1e3 * m_tpot,
                           "mean_tpot_ms_fitted": 1e3 * s_tpot,
                           "tpot_error": s_tpot / m_tpot - 1.0}
    return out


def fit_from_bench(results: Sequence[str], *, metrics_before: str | None = None,
                   metrics_after: str | None = None, base_config: str | None = None,
                   seed: int = 0, bootstrap: int = 20,
                   target_terms: Sequence[str] = AFFINE_TERMS,
                   drafter_to_target_ratio: float | None = None,
                   target_config: str | None = None,
                   draft_config: str | None = None) -> BenchFit:
    """Calibrate from benchmark results (module docstring).  ``target_terms``: the target's
    affine terms fitted on the AR runs (the others fixed at 0).  ``drafter_to_target_ratio``
    (in (0, 10]) or the two models' ``config.json`` (``target_config``, ``draft_config``):
    the structural prior tying drafter to target cost.  Bad input raises a one-line
    ValueError naming the file and field."""
    from psdlab.validation.serving_results.drafter_prior import resolve_ratio
    ratio = resolve_ratio(drafter_to_target_ratio, target_config, draft_config)
    for t in target_terms:
        if t not in AFFINE_TERMS:
            raise ValueError(f"target_terms: {t!r} is not one of {', '.join(AFFINE_TERMS)}")
    if not results:
        raise ValueError("results: need at least one vLLM or SGLang bench result")
    if (metrics_before is None) != (metrics_after is None):
        raise ValueError("--metrics-before/--metrics-after: give both snapshots or neither")
    if not (isinstance(bootstrap, int) and 2 <= bootstrap <= 10_000):
        raise ValueError(f"bootstrap: must be an integer in [2, 10000], got {bootstrap!r}")
    base = _load_base(base_config)
    runs = [load_bench_run(p) for p in results]
    ar = [r for r in runs if not r.spec]
    sd = [r for r in runs if r.spec]
    acc: AcceptanceEstimate | None = None
    if sd:
        k_base = base.k if base is not None and base.mode != "ar" else None
        acc = (from_counters(metrics_before, metrics_after)
               if metrics_before is not None and metrics_after is not None
               else from_runs(sd, k_base))
        sd = [_with_k(r, acc.k) for r in sd]
    elif metrics_before is not None:
        raise FormatError(f"{results[0]}: no speculative-decoding run among the results; the "
                          f"/metrics snapshots have nothing to calibrate")
    if ratio is not None and not sd:
        raise ValueError("drafter_to_target_ratio: a structural prior needs a speculative "
                         "run among the results (there is no drafter to tie)")
    spreads = [cv for cv in (step_time_cv(r) for r in runs) if cv is not None]
    jitter_cv = min(min(spreads), MAX_JITTER) if spreads else 0.0
    k = acc.k if acc is not None else 0
    costs, intervals, correlations = _fit_stages(runs, ar, sd, ratio, acc, target_terms, base,
                                                 seed=seed, bootstrap=bootstrap,
                                                 jitter_cv=jitter_cv)
    notes = identifiability_notes(runs, acc, intervals, correlations, costs,
                                  with_counters=metrics_before is not None, prior=ratio)
    notes.append(f"step-time spread: the replays draw gamma step-time jitter of CV "
                 f"{jitter_cv:.3f}, the smallest over the runs of the spread of consecutive "
                 f"inter-token latencies inside requests (batch changes inflate it)"
                 if spreads else "step-time spread: no inter-token latencies; the replays have "
                 "no step-time jitter")
    server = {"m": base.m if base is not None else server_for("ar", None, None).m,
              **({} if base is None else {"policy": base.policy, "kv_blocks": base.kv_blocks,
                                          "block_size": base.block_size,
                                          "cap_proposals": base.cap_proposals})}
    inputs = tuple(list(results) + [p for p in (metrics_before, metrics_after) if p]
                   + ([base_config] if base_config else [])
                   + [p for p in (target_config, draft_config) if p])
    return BenchFit(
        target_cost=costs["target"], drafter_cost=costs.get("drafter"),
        acceptance=acc.spec() if acc is not None else None,
        acceptance_per_position=acc.per_position if acc is not None else None,
        intervals=intervals, interval_method=INTERVAL_METHOD.format(b=bootstrap),
        notes=tuple(notes), inputs=inputs, server=server, k=k or None,
        fit_error=_errors(runs, costs, acc.spec() if acc else None, base, seed, jitter_cv),
        correlations=correlations, jitter_cv=jitter_cv, drafter_to_target_ratio=ratio)


def _fit_stages(runs: Sequence[BenchRun], ar: Sequence[BenchRun], sd: Sequence[BenchRun],
                ratio: float | None, acc: AcceptanceEstimate | None, target_terms: Sequence[str],
                base: ServerConfig | None, *, seed: int, bootstrap: int, jitter_cv: float
                ) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[float, float]],
                           dict[str, float]]:
    """The fit's stages (the structural prior's joint stage, else the target on the AR runs
    then the drafter on the speculative ones): the affine costs per role, the intervals (the
    drafter's through the prior's tie; the acceptance's per position) and correlations."""
    k = acc.k if acc is not None else 0
    accept_len = acc.mean_acceptance_length() if acc is not None else 1.0
    outcomes: list[FitOutcome] = []
    costs: dict[str, dict[str, Any]] = {}
    if ratio is not None:
        assert acc is not None
        outcomes.append(_prior_stage(runs, ar, sd, ratio, acc, target_terms, base, seed=seed,
                                     bootstrap=bootstrap, jitter_cv=jitter_cv))
        costs["target"] = {"name": "affine", **{t: outcomes[-1].values.get(f"target.{t}", 0.0)
                                                for t in AFFINE_TERMS}}
        costs["drafter"] = {"name": "affine", **{t: ratio * costs["target"][t]
                                                 for t in AFFINE_TERMS}}
    elif ar:
        g = _guesses(ar, 1.0, 0)
        params = [Param("target", t, g[f"target.{t}"]) for t in target_terms]
        outcomes.append(fit_stage(ar, params, {}, None, base, seed=seed, bootstrap=bootstrap,
                                  jitter_cv=jitter_cv))
        costs["target"] = {"name": "affine", **{t: outcomes[-1].values.get(f"target.{t}", 0.0)
                                                for t in AFFINE_TERMS}}
    if sd and ratio is None:
        assert acc is not None
        g = _guesses(sd, accept_len, k)
        if ar:
            params = [Param("drafter", t, g[f"drafter.{t}"]) for t in ("base", "per_token")]
            fixed = {"target": {t: costs["target"][t] for t in AFFINE_TERMS}}
        else:
            params = [Param("target", t, g[f"target.{t}"])
                      for t in ("base", "per_seq", "per_token")]
            params.append(Param("drafter", "base", g["drafter.base"]))
            fixed = {}
        draws = []
        if ar:   # the target's replicates: its uncertainty carried into the drafter's
            draws = [{"target": {**fixed["target"], **d["target"]}} for d in outcomes[0].draws]
        out = fit_stage(sd, params, fixed, acc.spec(), base, seed=seed, bootstrap=bootstrap,
                        fixed_draws=draws, jitter_cv=jitter_cv)
        outcomes.append(out)
        for role in ("target", "drafter"):
            vals = {t: out.values[f"{role}.{t}"] for t in AFFINE_TERMS if f"{role}.{t}" in
                    out.values}
            if vals:
                costs.setdefault(role, {"name": "affine"}).update(vals)
    intervals: dict[str, tuple[float, float]] = {}
    correlations: dict[str, float] = {}
    for o in outcomes:
        intervals.update(o.intervals)
        correlations.update(o.correlations)
    if ratio is not None:          # the drafter's follow the target's through the tie
        intervals.update({f"drafter.{n[7:]}": (ratio * lo, ratio * hi)
                          for n, (lo, hi) in list(intervals.items())
                          if n.startswith("target.")})
    if acc is not None:
        for i, ci in enumerate(acc.per_position_ci95, start=1):
            intervals[f"acceptance.p{i}"] = ci
    return costs, intervals, correlations


def _prior_stage(runs: Sequence[BenchRun], ar: Sequence[BenchRun], sd: Sequence[BenchRun],
                 ratio: float, acc: AcceptanceEstimate, target_terms: Sequence[str],
                 base: ServerConfig | None, *, seed: int, bootstrap: int,
                 jitter_cv: float) -> FitOutcome:
    """The target's coefficients on all runs with every drafter coefficient tied to them
    (drafter = ``ratio`` x target): the AR runs' terms when there are AR runs, else base,
    per_seq and per_token (per_context fixed at 0, as without the prior)."""
    terms = tuple(target_terms) if ar else ("base", "per_seq", "per_token")
    g = _guesses(ar, 1.0, 0) if ar else _guesses(sd, acc.mean_acceptance_length(), acc.k)
    if not ar:                    # the step holds k drafter forwards besides the target's
        g = {n: v * 1.5 / (1.0 + acc.k * ratio) for n, v in g.items()}
    params = [Param("target", t, g[f"target.{t}"], tied=(("drafter", ratio),)) for t in terms]
    return fit_stage(runs, params, {}, acc.spec(), base, seed=seed, bootstrap=bootstrap,
                     jitter_cv=jitter_cv)


def _with_k(run: BenchRun, k: int) -> BenchRun:
    from dataclasses import replace
    return run if run.k == k else replace(run, k=k)


def describe(fit: BenchFit) -> str:
    """The fit as JSON text (for ``--json``)."""
    return json.dumps(fit.to_dict(), allow_nan=False)
