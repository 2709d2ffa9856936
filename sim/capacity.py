"""Capacity planning (``psdlab plan``): the highest request rate each configuration sustains
under a latency SLO, and the tokens per second per device it then delivers.

For every combination of mode x k x m x drafter (x replicas) in the config's ``[plan]`` table:

1. Simulate a Poisson workload of ``plan.requests`` requests (the config's workload lengths)
   at rate r and check the SLO (``plan.slo``, e.g. ``{ttft_p99 = 2.0, tpot_p50 = 0.05}``:
   each ``<ttft|tpot|e2e>_<mean|p50|p90|p99>`` must be <= its bound, seconds) on the steady
   part of the trial: the requests by arrival order less the first ``WARMUP_SHARE`` (the
   system still filling) and the last ``DRAIN_SHARE`` (it empties after the last arrival),
   ``steady_metrics``.
2. The saturated capacity C: an offline run of the same configuration (every request waiting
   at once), its output tokens per second in its steady window -- from the first completion
   to the last admission, while every slot refills as soon as it frees -- over the mean
   output length (``steady_capacity``; the whole run's requests / makespan, drain included,
   is the CSV's ``offline_req_s``).  No rate above C is sustainable (the queue grows without
   bound), so the search never goes above it: a trial at C that meets the SLO makes the rate
   C (``bound = "capacity"``: capped, the SLO did not bind below saturation in a trial of
   this length; at C itself the queue is only critically stable, so read it as an upper
   bound), else [0, C] is halved ``plan.iterations`` times by bisection (``bound = "slo"``;
   ``"none"`` when even the lowest rate tried misses the SLO: rate 0).  The trials of one
   seed share its random numbers; bisection assumes the SLO metrics grow with the rate --
   true of queueing, but a noisy run can break it near the boundary; more requests make it
   smoother.
3. Seeds: steps 1-2 run once per seed (``plan.seeds``, the config's seed and the next ones);
   a row is the mean over them with a 95 % Student-t interval (``seed_interval``), in the CSV's
   ``max_rate_lo_req_s`` / ``max_rate_hi_req_s``.  Two configurations tie when their
   difference is within ``sqrt(h1^2 + h2^2)`` of the half-widths (``rates_tie``).
4. Replicas: R independent replicas behind a random (Poisson-splitting) load balancer each see
   rate r / R, so R replicas sustain R times the one-replica rate with the same per-replica
   latency -- computed, not simulated.  Devices per replica: the target's tensor-parallel degree
   (cost spec ``tp``, default 1) plus the drafter's for ``sd-sep`` and ``psd`` (its own device);
   ``sd`` shares the target's devices, ``ar`` has no drafter.

The Pareto set is over (devices: fewer is better, sustainable rate: higher is better).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_fields, check_int, check_positive
from psdlab.analysis.modes import SERVER_MODES, Mode, check_mode
from psdlab.analysis.trace import Trace
from psdlab.sim.plan_rows import ConfigResult, PlanCombo, PlanRow
from psdlab.sim.sim_config import SimConfig, SimModel, drafter_placement

SLO_METRICS = ("ttft", "tpot", "e2e")
SLO_STATS = ("mean", "p50", "p90", "p99")
_PLAN_KEYS = ("modes", "k", "m", "drafters", "replicas", "slo", "requests", "iterations",
              "jobs", "csv", "seeds")
#: requests left out of a trial's SLO percentiles, by arrival order: the first share (warm-up:
#: the system fills) and the last (drain: it empties after the last arrival)
WARMUP_SHARE = 0.2
DRAIN_SHARE = 0.1
#: the two-sided confidence of a row's interval over seeds
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PlanSpec:
    modes: tuple[Mode, ...]
    ks: tuple[int, ...]
    ms: tuple[int, ...]
    drafters: tuple[tuple[SimModel, Mapping[str, Any] | None], ...]   # (drafter, acceptance)
    replicas: tuple[int, ...]
    slo: tuple[tuple[str, str, float], ...]
    requests: int = 300
    iterations: int = 7
    jobs: int = 1
    csv: str | None = None
    seeds: int = 3


#: the largest k and m a plan may sweep (the simulator's ``server.k`` and ``server.m`` ranges)
MAX_K, MAX_M = 64, 4096


def _int_list(raw: Any, name: str, lo: int, hi: int | None = None) -> tuple[int, ...]:
    vals = raw if isinstance(raw, list) else [raw]
    if not vals:
        raise ValueError(f"plan.{name}: must not be empty")
    return tuple(check_int(f"plan.{name}[{i}]", v, lo, hi) for i, v in enumerate(vals))


def parse_slo(raw: Any) -> tuple[tuple[str, str, float], ...]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("plan.slo: expected a table like {ttft_p99 = 2.0, tpot_p50 = 0.05}")
    out = []
    for key, bound in raw.items():
        metric, _, stat = key.partition("_")
        if metric not in SLO_METRICS or stat not in SLO_STATS:
            raise ValueError(f"plan.slo.{key}: unknown SLO; use <{'|'.join(SLO_METRICS)}>_"
                             f"<{'|'.join(SLO_STATS)}>")
        out.append((metric, stat, check_positive(f"plan.slo.{key}", bound)))
    return tuple(out)


def parse_plan(raw: Mapping[str, Any] | None, cfg: SimConfig) -> PlanSpec:
    """The ``[plan]`` table of a config (unknown keys rejected, one-line errors)."""
    if raw is None:
        raise ValueError("plan: missing table [plan] (modes, k, m, slo, ...)")
    check_fields(raw, "plan", optional=_PLAN_KEYS, named=False)
    if "modes" in raw and not isinstance(raw["modes"], list):
        raise ValueError(f"plan.modes: expected a list of modes like [\"ar\", \"psd\"], got "
                         f"{raw['modes']!r}")
    modes = tuple(check_mode(f"plan.modes[{i}]", mode, SERVER_MODES)
                  for i, mode in enumerate(raw.get("modes", [cfg.server.mode])))
    drafters = []
    for i, d in enumerate(raw.get("drafters", [])):
        if not isinstance(d, dict) or not isinstance(d.get("cost"), dict):
            raise ValueError(f"plan.drafters[{i}]: expected {{name = ..., cost = {{...}}}}")
        check_fields(d, f"plan.drafters[{i}]", optional=("name", "cost", "acceptance"),
                     named=False)
        acc = d.get("acceptance")
        if acc is not None and not isinstance(acc, dict):
            raise ValueError(f"plan.drafters[{i}].acceptance: expected a table, got {acc!r}")
        drafters.append((SimModel(name=str(d.get("name", d["cost"].get("model", i))),
                                     device="sim:drafter", cost=d["cost"]), acc))
    if not drafters and cfg.drafter is not None:
        drafters = [(cfg.drafter, None)]
    if not drafters and any(mo != "ar" for mo in modes):
        raise ValueError("plan.drafters: needed for modes other than ar (or a [drafter] table)")
    csv = raw.get("csv")
    if csv is not None and not isinstance(csv, str):
        raise ValueError(f"plan.csv: expected a file name, got {csv!r}")
    return PlanSpec(modes=modes, ks=_int_list(raw.get("k", [cfg.server.k]), "k", 1, MAX_K),
                    ms=_int_list(raw.get("m", [cfg.server.m]), "m", 1, MAX_M),
                    drafters=tuple(drafters), replicas=_int_list(raw.get("replicas", [1]),
                                                                 "replicas", 1),
                    slo=parse_slo(raw.get("slo")),
                    requests=check_int("plan.requests", raw.get("requests", 300), 10),
                    iterations=check_int("plan.iterations", raw.get("iterations", 7), 1, 40),
                    jobs=check_int("plan.jobs", raw.get("jobs", 1), 1, 256), csv=csv,
                    seeds=check_int("plan.seeds", raw.get("seeds", 3), 1, 100))


def combos(spec: PlanSpec) -> list[PlanCombo]:
    """Every configuration of the sweep (ar: once per m, k = 0, no drafter)."""
    out: list[PlanCombo] = []
    for mode, k, m in itertools.product(spec.modes, spec.ks, spec.ms):
        if mode == "ar":
            if k == spec.ks[0]:
                out.append(PlanCombo(mode, 0, m))
            continue
        out.extend(PlanCombo(mode, k, m, drafter, acc) for drafter, acc in spec.drafters)
    return out


def devices_per_replica(cfg: SimConfig, mode: Mode, drafter: SimModel | None) -> int:
    n = cfg.target.cost_spec.tp
    if drafter_placement(mode) == "own" and drafter is not None:
        n += drafter.cost_spec.tp
    return n


# ---------------------------------------------------------------------------- search

def _lengths(cfg: SimConfig) -> dict[str, Any]:
    return {key: cfg.workload[key] for key in ("prompt", "output") if key in cfg.workload}


#: a file workload's rate scale for its offline run: every request there at once, in effect
OFFLINE_SCALE = 1e6


def _workloads(cfg: SimConfig, spec: PlanSpec) -> tuple[dict[str, Any], Any, int]:
    """The offline workload, and the workload at a given request rate: Poisson with the
    config's lengths, or, for a ``file`` workload (``psdlab plan --workload``), the file's own
    requests (its first ``plan.requests``, or all when it has fewer) with their arrivals
    scaled to that mean rate; and the number of requests a trial serves."""
    if not cfg.workload_spec.is_file:
        lengths = _lengths(cfg)
        return ({"name": "offline", **lengths},
                lambda rate: {"name": "poisson", "rate": rate, **lengths}, spec.requests)
    from psdlab.sim.workloads import mean_rate, requests_from_file
    base = {k: v for k, v in cfg.workload.items() if k != "rate_scale"}
    # the requests the trials serve: the target's catalog context length refuses the longer
    # ones unless the workload sets max_model_len (sim.model_specs.WorkloadSpec.resolved)
    arrival = requests_from_file(cfg.workload_spec.resolved).arrival[:spec.requests]
    file_rate = mean_rate(arrival)
    scale = cfg.workload_spec.rate_scale

    def at_rate(rate: float) -> dict[str, Any]:
        # all at once (file_rate inf): the arrivals, re-based to 0, are the same at any scale
        return {**base, "rate_scale": scale * rate / file_rate if math.isfinite(file_rate)
                else scale}
    return ({**base, "rate_scale": OFFLINE_SCALE}, at_rate, int(arrival.size))


def trial_requests(cfg: SimConfig, spec: PlanSpec) -> int:
    """Requests one trial serves: ``plan.requests``, or all of a trace file's when it has
    fewer (the rule of `_workloads`)."""
    return _workloads(cfg, spec)[2]


def _variant(cfg: SimConfig, spec: PlanSpec, combo: PlanCombo, workload: dict[str, Any],
             requests: int | None = None) -> SimConfig:
    drafter = cfg.drafter if combo.drafter is None else combo.drafter
    acceptance = combo.acceptance
    return cfg.replace(server_mode=combo.mode, server_k=combo.k, server_m=combo.m,
                       requests=spec.requests if requests is None else requests,
                       drafter=drafter, acceptance=acceptance or cfg.acceptance,
                       workload=workload, trace_level="none", trace_path=None)


def slo_values(metrics: Mapping[str, Any], spec: PlanSpec) -> dict[str, float | None]:
    return {f"{mt}_{st}": (metrics.get(mt) or {}).get(st) for mt, st, _ in spec.slo}


def meets_slo(metrics: Mapping[str, Any], spec: PlanSpec) -> bool:
    for mt, st, bound in spec.slo:
        value = (metrics.get(mt) or {}).get(st)
        if value is None or value > bound:
            return False
    return True


def steady_requests(n: int) -> tuple[int, int]:
    """The requests (by arrival order, ``[first, stop)``) a trial of ``n`` judges the SLO on:
    all but the first ``WARMUP_SHARE`` and the last ``DRAIN_SHARE`` of them."""
    first = int(math.floor(WARMUP_SHARE * n))
    stop = n - int(math.floor(DRAIN_SHARE * n))
    return first, max(stop, first + 1)


def steady_metrics(trace: Trace) -> dict[str, Any]:
    """TTFT, TPOT and e2e percentiles (``analysis.stats.percentiles``, the definitions of
    ``analysis.metrics``) over the steady requests of a trial (``steady_requests``)."""
    from psdlab.analysis.stats import percentiles

    reqs = sorted(trace.requests, key=lambda r: (r.arrival, str(r.id)))
    first, stop = steady_requests(len(reqs))
    kept = reqs[first:stop]
    arrival = np.array([r.arrival for r in kept], dtype=float)
    first_tok = np.array([r.first_token for r in kept], dtype=float)
    finish = np.array([r.finish for r in kept], dtype=float)
    out_len = np.array([r.output_len for r in kept], dtype=float)
    multi = out_len > 1
    return {"requests": len(kept), "ttft": percentiles(first_tok - arrival),
            "tpot": percentiles((finish[multi] - first_tok[multi]) / (out_len[multi] - 1)),
            "e2e": percentiles(finish - arrival)}


def steady_capacity(trace: Trace) -> float:
    """The saturated request rate of an offline run: its output tokens per second in the
    steady window, from the first completion (every slot filled, refilled as it frees) to the
    last admission (the queue empties), over the mean output length of its requests -- the
    highest Poisson rate whose tokens the server keeps up with.  A request's tokens count as
    emitted evenly between its first token and its finish.  The whole run's requests /
    makespan where no request waited for a slot (no window)."""
    reqs = trace.requests
    first = np.array([r.first_token for r in reqs], dtype=float)
    finish = np.array([r.finish for r in reqs], dtype=float)
    out_len = np.array([r.output_len for r in reqs], dtype=float)
    start = float(np.min(np.array([r.arrival for r in reqs], dtype=float)))
    t0, t1 = float(finish.min()), max(r.admitted for r in reqs)
    if not t1 > t0:
        return len(reqs) / (float(finish.max()) - start)
    span = np.maximum(finish - first, 0.0)
    inside = np.clip(np.minimum(finish, t1) - np.maximum(first, t0), 0.0, None)
    share = np.divide(inside, span, out=np.zeros_like(span), where=span > 0)
    tokens = float(np.sum((out_len - 1) * share) + np.count_nonzero((first >= t0)
                                                                     & (first <= t1)))
    return tokens / (t1 - t0) / float(out_len.mean())


@dataclass(frozen=True)
class SeedSearch:
    """One seed's search of one configuration: its offline capacity (steady window, and the
    whole run's requests / makespan), the highest rate meeting the SLO (never above the
    capacity), what bounds it, the throughput and SLO values there, and the SLO values of the
    lowest rate tried (what comes closest when no rate meets it)."""
    capacity_req_s: float
    offline_req_s: float
    rate_req_s: float
    bound: str                                   # "capacity", "slo" or "none"
    tok_s: float | None
    slo: tuple[tuple[str, float | None], ...]
    lowest: tuple[tuple[str, float | None], ...]


def _search_seed(cfg: SimConfig, spec: PlanSpec, combo: PlanCombo, seed: int) -> SeedSearch:
    from psdlab.sim.costtable import TableShare
    from psdlab.sim.simulation import simulate

    offline_workload, at_rate, n = _workloads(cfg, spec)
    # every run here differs only in its workload ($PSDLAB_PLAN_REUSE=0: no sharing): the
    # offline run's config parsed the cost and acceptance tables and built their models once
    # (sim.model_specs); each trial replaces its workload alone and reuses them
    tables = None if os.environ.get("PSDLAB_PLAN_REUSE") == "0" else TableShare()
    base = _variant(cfg.replace(seed=seed), spec, combo, offline_workload, n)
    offline = simulate(base, tables=tables)
    capacity = steady_capacity(offline.trace)

    def trial(rate: float) -> tuple[bool, dict[str, Any], float | None]:
        res = simulate(base.replace(workload=at_rate(rate)), tables=tables)
        steady = steady_metrics(res.trace)
        return meets_slo(steady, spec), steady, res.metrics["throughput_tok_s"]

    ok, metrics, tok_s = trial(capacity)
    lo, best, bound = (capacity, (metrics, tok_s), "capacity") if ok else (0.0, None, "slo")
    lowest = metrics
    if not ok:
        hi = capacity
        for _ in range(spec.iterations):
            mid = 0.5 * (lo + hi)
            ok, metrics, tok_s = trial(mid)
            if ok:
                lo, best = mid, (metrics, tok_s)
            else:
                hi, lowest = mid, metrics
        if best is None:
            bound = "none"
    return SeedSearch(capacity_req_s=capacity, offline_req_s=n / offline.makespan_s,
                      rate_req_s=lo, bound=bound, tok_s=best[1] if best else 0.0,
                      slo=tuple(slo_values(best[0] if best else {}, spec).items()),
                      lowest=tuple(slo_values(lowest, spec).items()))


def seed_interval(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The ``CONFIDENCE`` Student-t interval of the mean of ``values`` (one per seed); (None,
    None) for a single value."""
    if len(values) < 2:
        return None, None
    from scipy import stats

    arr = np.asarray(values, dtype=float)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, arr.size - 1) * arr.std(ddof=1)
                 / math.sqrt(arr.size))
    mean = float(arr.mean())
    return mean - half, mean + half


def rates_tie(a: float, a_lo: float | None, a_hi: float | None, b: float, b_lo: float | None,
              b_hi: float | None) -> bool:
    """Whether two rates (each with its interval) are within their uncertainty of each other:
    |a - b| <= sqrt(ha^2 + hb^2), h a half-width; exact equality without intervals."""
    if a_lo is None or a_hi is None or b_lo is None or b_hi is None:
        return a == b
    ha, hb = 0.5 * (a_hi - a_lo), 0.5 * (b_hi - b_lo)
    return abs(a - b) <= math.hypot(ha, hb)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _bound(bounds: Sequence[str]) -> str:
    return bounds[0] if len(set(bounds)) == 1 else "mixed"


def evaluate_combo(cfg: SimConfig, spec: PlanSpec, combo: PlanCombo) -> ConfigResult:
    """Highest sustainable Poisson rate of one configuration (one replica): the mean over
    ``plan.seeds`` seeds of each seed's search (``_search_seed``), with its interval."""
    runs = [_search_seed(cfg, spec, combo, cfg.seed + i) for i in range(spec.seeds)]
    rates = [r.rate_req_s for r in runs]
    lo, hi = seed_interval(rates)
    drafter = combo.drafter
    keys = [key for key, _ in runs[0].slo]
    return ConfigResult(
        mode=combo.mode, k=combo.k, m=combo.m, drafter=drafter.name if drafter else "",
        capacity_req_s=float(np.mean([r.capacity_req_s for r in runs])),
        max_rate_req_s=float(np.mean(rates)),
        tok_s=_mean([r.tok_s for r in runs]),
        devices_per_replica=devices_per_replica(cfg, combo.mode, drafter),
        cost_model=cfg.target.cost_spec.label + (
            f" + {drafter.cost_spec.label}" if drafter else ""),
        slo=tuple((key, _mean([dict(r.slo)[key] for r in runs])) for key in keys),
        max_rate_lo_req_s=None if lo is None else max(lo, 0.0), max_rate_hi_req_s=hi,
        seeds=spec.seeds, bound=_bound([r.bound for r in runs]),
        offline_req_s=float(np.mean([r.offline_req_s for r in runs])),
        slo_lowest=tuple((key, _mean([dict(r.lowest)[key] for r in runs])) for key in keys))


def expand_replicas(results: list[ConfigResult], spec: PlanSpec) -> list[PlanRow]:
    """One row per configuration x replica count (Pareto flags not yet set)."""
    return [PlanRow(res, r) for res in results for r in spec.replicas]


def mark_pareto(rows: list[PlanRow]) -> list[PlanRow]:
    """The rows with their Pareto flags: over (devices: fewer better, total sustainable rate:
    higher better)."""
    points = [(r.devices, r.total_rate_req_s) for r in rows]
    # a row that sustains nothing (no rate meets the SLO) is on no front
    return [dataclasses.replace(row, pareto=ar_ > 0 and not any(
        bd <= ad and br >= ar_ and (bd < ad or br > ar_) for bd, br in points))
        for row, (ad, ar_) in zip(rows, points)]


def combo_label(combo: PlanCombo) -> str:
    """How errors and the test hook name a configuration: "psd k=4 m=16 drafter=qwen3-1.7b"."""
    return combo.label


def run_capacity_plan(cfg: SimConfig, spec: PlanSpec, jobs: int = 1, progress: bool = False,
                      backend: str = "local", address: str | None = None) -> list[PlanRow]:
    """All rows (one per combination x replicas), Pareto flags set, in sweep order.  Each
    configuration is one task of ``backend`` (``sim.sweep_backends``: "local" processes or
    "ray"); every trial uses the config's seed, so the rows do not depend on the backend."""
    from psdlab.sim.sweep_backends import run_tasks

    todo = combos(spec)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), unit="config", desc="plan", leave=False)
    try:
        results = run_tasks(backend, evaluate_combo, [(cfg, spec, c) for c in todo],
                         [combo_label(c) for c in todo], jobs=jobs, address=address,
                         on_done=bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    return mark_pareto(expand_replicas(results, spec))


COLUMNS = ("mode", "k", "m", "drafter", "replicas", "devices", "total_rate_req_s",
           "max_rate_req_s", "tok_s", "tok_s_per_device", "capacity_req_s", "pareto",
           "cost_model")
#: the columns after the SLO ones (issue 52): the rate's interval over seeds, the seeds, what
#: bounds the rate (capacity, slo, none, mixed) and the offline run's requests / makespan
TAIL_COLUMNS = ("max_rate_lo_req_s", "max_rate_hi_req_s", "seeds", "bound", "offline_req_s")


def write_plan_csv(rows: Sequence[Mapping[str, Any]], path: str) -> None:
    import csv
    rows = [r.to_csv_row() if isinstance(r, PlanRow) else r for r in rows]
    present = {k for r in rows for k in r}
    keys = (list(COLUMNS) + sorted(present - set(COLUMNS) - set(TAIL_COLUMNS))
            + [k for k in TAIL_COLUMNS if k in present])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def format_plan_table(rows: Sequence[Mapping[str, Any]], only_pareto: bool = True) -> str:
    rows = [r.to_csv_row() if isinstance(r, PlanRow) else r for r in rows]
    shown = [r for r in rows if r["pareto"] or not only_pareto]
    shown.sort(key=lambda r: (r["devices"], -r["total_rate_req_s"]))
    slo_keys = sorted({k for r in rows for k in r} - set(COLUMNS) - set(TAIL_COLUMNS)
                      - {"devices_per_replica"})
    head = (f"{'mode':<7}{'k':>3}{'m':>5} {'drafter':<14}{'repl':>5}{'dev':>5}"
            f"{'rate req/s':>12}{'+-95%':>8}{'bound':>9}{'tok/s/dev':>11}"
            + "".join(f"{k:>11}" for k in slo_keys))
    lines = [head]
    for r in shown:
        lines.append(f"{r['mode']:<7}{r['k']:>3}{r['m']:>5} {r['drafter'][:13]:<14}"
                     f"{r['replicas']:>5}{r['devices']:>5}{r['total_rate_req_s']:>12.3f}"
                     f"{_half(r):>8}{str(r.get('bound', '')):>9}"
                     f"{r['tok_s_per_device']:>11.1f}"
                     + "".join(f"{_fmt(r.get(k)):>11}" for k in slo_keys))
    return "\n".join(lines)


def _half(row: Mapping[str, Any]) -> str:
    """The half-width of a row's interval over all its replicas ("-": one seed)."""
    lo, hi = row.get("max_rate_lo_req_s"), row.get("max_rate_hi_req_s")
    if lo is None or hi is None:
        return "-"
    return f"{0.5 * (hi - lo) * row['replicas']:.3f}"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"
