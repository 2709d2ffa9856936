"""Where the adaptive policy switches: by batch size (its thresholds, from the same rule the
servers use) and by request rate (simulated), with the fixed configurations beside it.

- ``thresholds(cfg)``: for n = 1 .. server.m running sequences (contexts at the workload's
  mean prompt + half its mean output, acceptance per position from the config's acceptance
  model), the choice ``analysis.adaptive_policy.rank`` makes, as ranges of n (the policy's
  thresholds; with hysteresis it switches there once the state has stayed past them).
- ``rate_sweep(cfg, rates, fixed)``: at each Poisson rate (and offline), the adaptive server
  (``sim.adaptive``) and every fixed configuration (the same server allowed one choice: the same
  slots, prompts and acceptance draws) simulated; per rate the throughput, TPOT p50/p99, the
  winner (highest throughput; within 1 % of it, the lowest TPOT p50), the adaptive/best-fixed
  ratio, the adaptive policy's share of steps per choice; and the
  switch points: the rates between which the winner (or the adaptive policy's main choice)
  changes.
- ``policy_report(cfg)``: both, as one dict; ``format_policy_report`` prints it (``psdlab plan``).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from psdlab.analysis.adaptive_policy import LiveState, PolicyConfig, predict_candidates, rank

#: the fixed configurations compared by default: (label, mode, k)
DEFAULT_FIXED = (("ar", "ar", 0), ("sd2", "sd", 2), ("sd4", "sd", 4), ("psd2", "psd", 2),
                 ("psd4", "psd", 4))


def _models(cfg):
    from psdlab.sim.acceptance_registry import make_acceptance
    from psdlab.sim.costs import make_cost_model
    if cfg.drafter is None:
        raise ValueError("drafter: the adaptive policy needs a [drafter] table")
    return (make_cost_model(dict(cfg.target.cost), "target.cost"),
            make_cost_model(dict(cfg.drafter.cost), "drafter.cost"),
            make_acceptance(dict(cfg.acceptance)))


def position_rates(acceptance, kmax: int) -> tuple[float, ...]:
    """a_i = P(draft i accepted | 1..i-1 accepted) from a model's E[accepted | k]."""
    acc = [0.0] + [float(acceptance.expected_accepted(k)) for k in range(1, kmax + 1)]
    p = [1.0] + [max(acc[i] - acc[i - 1], 0.0) for i in range(1, kmax + 1)]
    return tuple(min(1.0, p[i] / p[i - 1]) if p[i - 1] > 0 else 0.0
                 for i in range(1, kmax + 1))


def _mean_lengths(cfg, n: int = 400) -> tuple[float, float]:
    from psdlab.sim.workloads import make_workload
    workload = make_workload(dict(cfg.workload))
    # a replay or a trace file has its own requests: all of them; a distribution: n draws
    size = None if getattr(workload, "rows", None) is not None else n
    reqs = workload.generate(np.random.default_rng(cfg.seed), size)
    return float(np.mean(reqs.prompt_len)), float(np.mean(reqs.output_len))


def thresholds(cfg) -> dict[str, Any]:
    """The policy's choice per running-batch size n = 1..server.m, and its ranges."""
    from psdlab.sim.adaptive_costs import ModelCosts
    pcfg = cfg.policy or PolicyConfig()          # read by SimConfig; defaults without one
    target, drafter, acceptance = _models(cfg)
    prompt, output = _mean_lengths(cfg)
    costs = ModelCosts(target, drafter, prompt + output / 2)
    rates = position_rates(acceptance, max(pcfg.k_choices, default=1))
    per_n = []
    for n in range(1, cfg.server.m + 1):
        state = LiveState(running=n, waiting=0, slots=cfg.server.m, acceptance=rates)
        best = rank(pcfg, state, costs)
        scores = {c.label: c.score for c in predict_candidates(pcfg, state, costs)}
        per_n.append({"n": n, "choice": best.label, "tok_s": scores})
    ranges: list[dict[str, Any]] = []
    for row in per_n:
        if ranges and ranges[-1]["choice"] == row["choice"]:
            ranges[-1]["n_to"] = row["n"]
        else:
            ranges.append({"choice": row["choice"], "n_from": row["n"], "n_to": row["n"]})
    return {"context_tokens": prompt + output / 2, "acceptance": list(rates), "per_n": per_n,
            "ranges": ranges}


def _variant(cfg, workload: Mapping[str, Any], adaptive: Mapping[str, Any]):
    return cfg.replace(workload=dict(workload), adaptive=dict(adaptive), trace_level="none",
                       trace_path=None, server_mode="adaptive", server_k_choices=())


def _summ(res) -> dict[str, Any]:
    m = res.metrics
    tpot = m.get("tpot") or {}
    return {"tok_s": m.get("throughput_tok_s"), "tpot_p50": tpot.get("p50"),
            "tpot_p99": tpot.get("p99")}


def rate_sweep(cfg, rates: Sequence[float], fixed: Iterable[tuple[str, str, int]] = DEFAULT_FIXED,
               offline: bool = True) -> dict[str, Any]:
    """Adaptive vs fixed configurations at each load (Poisson rates in req/s, and offline)."""
    from psdlab.sim.simulation import simulate
    base = dict(cfg.adaptive or {})
    fixed = tuple(fixed)
    loads: list[tuple[str, dict[str, Any]]] = []
    if offline:
        loads.append(("offline", {**dict(cfg.workload), "name": "offline"}))
        loads[-1][1].pop("rate", None)
    for r in rates:
        loads.append((f"{r:g}", {**dict(cfg.workload), "name": "poisson", "rate": float(r)}))
    rows = []
    for label, wl in loads:
        row: dict[str, Any] = {"load": label, "configs": {}}
        for name, mode, k in fixed:
            pol = {**base, "modes": [mode], "k_choices": [k] if k else base.get(
                "k_choices", [1])}
            row["configs"][name] = _summ(simulate(_variant(cfg, wl, pol)))
        res = simulate(_variant(cfg, wl, base))
        row["configs"]["adaptive"] = _summ(res)
        summary = res.trace.run.extra["adaptive"]
        steps = summary["steps"]
        row["adaptive_switches"] = summary["switches"]
        row["adaptive_timeline_choices"] = sorted({lab for _, lab in summary["timeline"]})
        row["adaptive_steps"] = steps
        best = winner(row["configs"], [f[0] for f in fixed])
        row["winner_fixed"] = best
        ad = row["configs"]["adaptive"]["tok_s"] or 0.0
        row["adaptive_vs_best"] = ad / (row["configs"][best]["tok_s"] or math.inf)
        rows.append(row)
    return {"rows": rows, "switch_points": switch_points(rows)}


#: throughputs within this fraction of the best count as a tie (below saturation every
#: configuration serves what arrives); the tie goes to the lowest TPOT p50
TIE = 0.01


def winner(configs: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> str:
    """The fixed configuration with the highest throughput; among those within ``TIE`` of it,
    the one with the lowest median TPOT."""
    top = max(configs[n]["tok_s"] or 0.0 for n in names)
    tied = [n for n in names if (configs[n]["tok_s"] or 0.0) >= (1 - TIE) * top]
    return min(tied, key=lambda n: (configs[n]["tpot_p50"] is None,
                                    configs[n]["tpot_p50"] or 0.0))


def switch_points(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive Poisson loads whose fixed winner differs: the switch lies between them."""
    out = []
    timed = [r for r in rows if r["load"] != "offline"]
    for a, b in zip(timed, timed[1:]):
        if a["winner_fixed"] != b["winner_fixed"]:
            out.append({"from": a["winner_fixed"], "to": b["winner_fixed"],
                        "between_req_s": [float(a["load"]), float(b["load"])]})
    return out


def policy_report(cfg, rates: Sequence[float] | None = None) -> dict[str, Any]:
    """The policy's thresholds by batch size and, with ``rates``, the simulated loads."""
    if cfg.adaptive is None:
        cfg = cfg.replace(adaptive={})
    out: dict[str, Any] = {"thresholds": thresholds(cfg)}
    if rates:
        out["loads"] = rate_sweep(cfg, rates)
    return out


def plan_thresholds(cfg) -> dict[str, Any] | None:
    """For ``psdlab plan``: the policy's thresholds by batch size up to the largest m the plan
    tries (default settings unless the config has an [adaptive] table); None without a
    drafter."""
    if cfg.drafter is None:
        return None
    return {"thresholds": thresholds(cfg.replace(adaptive=dict(cfg.adaptive or {}),
                                                 server_mode="adaptive",
                                                 server_k_choices=()))}


def format_policy_report(report: Mapping[str, Any]) -> str:
    th = report["thresholds"]
    lines = ["adaptive policy (analysis.adaptive_policy), its choice by running sequences n "
             f"(context {th['context_tokens']:.0f} tokens, acceptance "
             f"{', '.join(f'{a:.2f}' for a in th['acceptance'])}):"]
    for r in th["ranges"]:
        lines.append(f"  n {r['n_from']:>4d}..{r['n_to']:<4d} -> {r['choice']}")
    loads = report.get("loads")
    if loads:
        lines.append("simulated loads (tok/s; adaptive vs best fixed):")
        for row in loads["rows"]:
            cfgs = "  ".join(f"{k} {v['tok_s']:.1f}" for k, v in row["configs"].items())
            lines.append(f"  {row['load']:>8s}: {cfgs}  winner {row['winner_fixed']}  "
                         f"adaptive/best {row['adaptive_vs_best']:.3f}")
        for sp in loads["switch_points"]:
            lo, hi = sp["between_req_s"]
            lines.append(f"  switch {sp['from']} -> {sp['to']} between {lo:g} and {hi:g} req/s")
    return "\n".join(lines)
