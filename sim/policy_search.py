"""Where the adaptive policy switches: by batch size (its thresholds, from the same rule the
servers use) and by request rate (simulated), with the fixed configurations beside it.

- ``policy_thresholds(cfg)``: for n = 1 .. server.m running sequences (contexts at the workload's
  mean prompt + half its mean output, acceptance per position from the config's acceptance
  model), the choice ``analysis.adaptive_policy.rank`` makes, as ranges of n (the policy's
  thresholds; with hysteresis it switches there once the state has stayed past them).
- ``load_sweep(cfg, rates, fixed)``: at each Poisson rate (and offline), the adaptive server
  (``sim.adaptive``) and every fixed configuration (the same server allowed one choice: the same
  slots, prompts and acceptance draws) simulated; per rate the throughput, TPOT p50/p99, the
  winner (highest throughput; within 1 % of it, the lowest TPOT p50), the adaptive/best-fixed
  ratio, the adaptive policy's share of steps per choice; and the
  switch points: the rates between which the winner (or the adaptive policy's main choice)
  changes.
- ``policy_report(cfg)``: both, as one ``PolicyReport``; ``format_policy_report`` prints it
  (``psdlab policy``, ``psdlab plan``).

The results are frozen dataclasses (``PolicyThresholds``, ``LoadSweep``, ``PolicyReport``); each
one's ``to_dict()`` is its JSON document (the adaptive benchmark,
``validation.adaptive.bench_adaptive``, keeps the records in its prediction).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

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


@dataclass(frozen=True)
class BatchChoice:
    """The policy's choice at ``n`` running sequences, and each candidate's predicted tok/s."""
    n: int
    choice: str
    tok_s: tuple[tuple[str, float], ...]        # (candidate label, predicted tokens/s)


@dataclass(frozen=True)
class ChoiceRange:
    """Running-batch sizes n_from..n_to over which the policy makes one choice."""
    choice: str
    n_from: int
    n_to: int


@dataclass(frozen=True)
class PolicyThresholds:
    """The policy's choice per running-batch size n = 1..server.m, and its ranges."""
    context_tokens: float
    acceptance: tuple[float, ...]               # per draft position
    per_n: tuple[BatchChoice, ...]
    ranges: tuple[ChoiceRange, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"context_tokens": self.context_tokens, "acceptance": list(self.acceptance),
                "per_n": [{"n": r.n, "choice": r.choice, "tok_s": dict(r.tok_s)}
                          for r in self.per_n],
                "ranges": [dataclasses.asdict(r) for r in self.ranges]}


def policy_thresholds(cfg) -> PolicyThresholds:
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
        per_n.append(BatchChoice(n=n, choice=best.label, tok_s=tuple(scores.items())))
    ranges: list[ChoiceRange] = []
    for row in per_n:
        if ranges and ranges[-1].choice == row.choice:
            ranges[-1] = dataclasses.replace(ranges[-1], n_to=row.n)
        else:
            ranges.append(ChoiceRange(choice=row.choice, n_from=row.n, n_to=row.n))
    return PolicyThresholds(context_tokens=prompt + output / 2, acceptance=tuple(rates),
                            per_n=tuple(per_n), ranges=tuple(ranges))


def _variant(cfg, workload: Mapping[str, Any], adaptive: Mapping[str, Any]):
    return cfg.replace(workload=dict(workload), adaptive=dict(adaptive), trace_level="none",
                       trace_path=None, server_mode="adaptive", server_k_choices=())


@dataclass(frozen=True)
class ConfigThroughput:
    """One configuration's simulated run at one load (None: the run had no such metric)."""
    name: str
    tok_s: float | None
    tpot_p50: float | None
    tpot_p99: float | None


def _summ(name: str, res) -> ConfigThroughput:
    m = res.metrics
    tpot = m.get("tpot") or {}
    return ConfigThroughput(name=name, tok_s=m.get("throughput_tok_s"), tpot_p50=tpot.get("p50"),
                            tpot_p99=tpot.get("p99"))


@dataclass(frozen=True)
class LoadRow:
    """One load: every fixed configuration and the adaptive server (last), the adaptive
    policy's switches and steps per mode, the fixed winner and adaptive / winner."""
    load: str                                   # "offline" or the Poisson rate ("0.5")
    configs: tuple[ConfigThroughput, ...]
    adaptive_switches: int
    adaptive_timeline_choices: tuple[str, ...]
    adaptive_steps: tuple[tuple[str, int], ...]   # (mode, steps)
    winner_fixed: str
    adaptive_vs_best: float

    def to_dict(self) -> dict[str, Any]:
        return {"load": self.load,
                "configs": {c.name: {"tok_s": c.tok_s, "tpot_p50": c.tpot_p50,
                                     "tpot_p99": c.tpot_p99} for c in self.configs},
                "adaptive_switches": self.adaptive_switches,
                "adaptive_timeline_choices": list(self.adaptive_timeline_choices),
                "adaptive_steps": dict(self.adaptive_steps), "winner_fixed": self.winner_fixed,
                "adaptive_vs_best": self.adaptive_vs_best}

    def config(self, name: str) -> ConfigThroughput | None:
        """The configuration of that name at this load (None: not simulated)."""
        return next((c for c in self.configs if c.name == name), None)


@dataclass(frozen=True)
class WinnerSwitch:
    """The fixed winner changes between two consecutive Poisson rates."""
    from_choice: str
    to_choice: str
    between_req_s: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.from_choice, "to": self.to_choice,
                "between_req_s": list(self.between_req_s)}


@dataclass(frozen=True)
class LoadSweep:
    """Adaptive vs fixed at each load, and where the fixed winner switches."""
    rows: tuple[LoadRow, ...]
    switch_points: tuple[WinnerSwitch, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows],
                "switch_points": [sp.to_dict() for sp in self.switch_points]}


def load_sweep(cfg, rates: Sequence[float], fixed: Iterable[tuple[str, str, int]] = DEFAULT_FIXED,
               offline: bool = True) -> LoadSweep:
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
        runs = {}
        for name, mode, k in fixed:
            pol = {**base, "modes": [mode], "k_choices": [k] if k else base.get(
                "k_choices", [1])}
            runs[name] = _summ(name, simulate(_variant(cfg, wl, pol)))
        res = simulate(_variant(cfg, wl, base))
        runs["adaptive"] = _summ("adaptive", res)
        summary = res.trace.run.extra["adaptive"]
        best = _fixed_winner(runs, [f[0] for f in fixed])
        rows.append(LoadRow(
            load=label, configs=tuple(runs.values()), adaptive_switches=summary["switches"],
            adaptive_timeline_choices=tuple(sorted({lab for _, lab in summary["timeline"]})),
            adaptive_steps=tuple(summary["steps"].items()), winner_fixed=best,
            adaptive_vs_best=(runs["adaptive"].tok_s or 0.0) / (runs[best].tok_s or math.inf)))
    return LoadSweep(rows=tuple(rows),
                     switch_points=switch_points([(r.load, r.winner_fixed) for r in rows]))


#: throughputs within this fraction of the best count as a tie (below saturation every
#: configuration serves what arrives); the tie goes to the lowest TPOT p50
TIE = 0.01


def winner(configs: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> str:
    """The fixed configuration with the highest throughput; among those within ``TIE`` of it,
    the one with the lowest median TPOT (``configs``: name -> {"tok_s", "tpot_p50", ...})."""
    return _pick(names, lambda n: configs[n]["tok_s"], lambda n: configs[n]["tpot_p50"])


def _fixed_winner(runs: Mapping[str, ConfigThroughput], names: Sequence[str]) -> str:
    return _pick(names, lambda n: runs[n].tok_s, lambda n: runs[n].tpot_p50)


def _pick(names: Sequence[str], tok_s: Callable[[str], float | None],
          tpot_p50: Callable[[str], float | None]) -> str:
    """``winner``'s rule over any record of the runs."""
    top = max(tok_s(n) or 0.0 for n in names)
    tied = [n for n in names if (tok_s(n) or 0.0) >= (1 - TIE) * top]
    return min(tied, key=lambda n: (tpot_p50(n) is None, tpot_p50(n) or 0.0))


def switch_points(winners: Sequence[tuple[str, str]]) -> tuple[WinnerSwitch, ...]:
    """Consecutive Poisson loads whose fixed winner differs: the switch lies between them
    (``winners``: (load, fixed winner) in load order; "offline" is skipped)."""
    out = []
    timed = [(load, best) for load, best in winners if load != "offline"]
    for (load_a, a), (load_b, b) in zip(timed, timed[1:]):
        if a != b:
            out.append(WinnerSwitch(from_choice=a, to_choice=b,
                                   between_req_s=(float(load_a), float(load_b))))
    return tuple(out)


@dataclass(frozen=True)
class PolicyReport:
    """The policy's thresholds by batch size and, when rates were given, the simulated
    loads."""
    thresholds: PolicyThresholds
    loads: LoadSweep | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"thresholds": self.thresholds.to_dict()}
        if self.loads is not None:
            out["loads"] = self.loads.to_dict()
        return out


def policy_report(cfg, rates: Sequence[float] | None = None) -> PolicyReport:
    """The policy's thresholds by batch size and, with ``rates``, the simulated loads."""
    if cfg.adaptive is None:
        cfg = cfg.replace(adaptive={})
    return PolicyReport(thresholds=policy_thresholds(cfg),
                        loads=load_sweep(cfg, rates) if rates else None)


def plan_thresholds(cfg, modes: Sequence[str] | None = None,
                    ks: Sequence[int] | None = None) -> PolicyReport | None:
    """For ``psdlab plan``: the policy's thresholds by batch size up to the largest m the plan
    tries (default settings unless the config has an [adaptive] table), choosing among the
    plan's ``modes`` (those the policy can pick step by step) and ``ks`` where the [adaptive]
    table does not name its own ``modes`` / ``k_choices``; None without a drafter or without
    a speculative mode to choose."""
    from psdlab.analysis.modes import STEP_MODES
    if cfg.drafter is None:
        return None
    adaptive = dict(cfg.adaptive or {})
    if modes is not None and "modes" not in adaptive:
        adaptive["modes"] = [m for m in modes if m in STEP_MODES]
    if ks is not None and "k_choices" not in adaptive:
        adaptive["k_choices"] = sorted(set(ks))
    if not any(m != "ar" for m in adaptive.get("modes", STEP_MODES)):
        return None
    return PolicyReport(thresholds=policy_thresholds(
        cfg.replace(adaptive=adaptive, server_mode="adaptive", server_k_choices=())))


def policy_agreement(report: PolicyReport, levels: Sequence[Mapping[str, Any]]) -> str:
    """One line: whether the policy's choice at n = m running sequences is the plan tables'
    best fixed configuration at each swept m (or one tied with it: ``levels`` as
    ``sim.plan_report.best_per_load`` gives them), and where it is not, which the tables
    pick."""
    per_n = {c.n: c.choice for c in report.thresholds.per_n}
    agree, differ = [], []
    for level in levels:
        winner = level["winner"]
        if winner is None or not per_n:
            continue
        n = min(level["m"], max(per_n))
        picks = [b for b in level["per_mode"] if b is winner or b["mode"] in level["ties"]]
        labels = ["ar" if b["mode"] == "ar" else f"{b['mode']}{b['k']}" for b in picks]
        if per_n[n] in labels:
            agree.append(str(level["m"]))
        else:
            differ.append(f"m = {level['m']}: the tables' best {' or '.join(labels)}, the "
                          f"policy {per_n[n]} at n = {n}")
    if not differ:
        return (f"  the policy agrees with the tables at m = {', '.join(agree)}" if agree
                else "  the tables have no configuration meeting the SLO to compare with")
    return ("  the policy differs from the tables (" + "; ".join(differ) + "): the tables "
            "simulate each fixed configuration under the SLO per device, the policy ranks "
            "one step's predicted tokens/s; for a fixed configuration follow the tables")


def format_policy_report(report: PolicyReport) -> str:
    th = report.thresholds
    lines = ["adaptive policy (analysis.adaptive_policy), its choice by running sequences n "
             f"(context {th.context_tokens:.0f} tokens, acceptance "
             f"{', '.join(f'{a:.2f}' for a in th.acceptance)}):"]
    for r in th.ranges:
        lines.append(f"  n {r.n_from:>4d}..{r.n_to:<4d} -> {r.choice}")
    loads = report.loads
    if loads:
        lines.append("simulated loads (tok/s; adaptive vs best fixed):")
        for row in loads.rows:
            cfgs = "  ".join(f"{c.name} {c.tok_s:.1f}" for c in row.configs)
            lines.append(f"  {row.load:>8s}: {cfgs}  winner {row.winner_fixed}  "
                         f"adaptive/best {row.adaptive_vs_best:.3f}")
        for sp in loads.switch_points:
            lo, hi = sp.between_req_s
            lines.append(f"  switch {sp.from_choice} -> {sp.to_choice} between {lo:g} and "
                         f"{hi:g} req/s")
    return "\n".join(lines)
