"""`psdlab bench-adaptive`: the adaptive policy against every fixed configuration, measured on
the real CPU pair (drafter and target on their own cores), with the simulator's prediction made
before the runs.

1. Calibration (its own prompts, not the measured ones): AR and SD runs at 1 and ``m``
   sequences give the step costs (verification, drafting per pass, the drafter's prefill) as
   least-squares affine fits and the acceptance per draft position.
2. Prediction: the simulator's adaptive server (``sim.adaptive``) with those costs predicts
   each load's winner among the fixed configurations, the adaptive policy's throughput and the
   switch points (``sim.policy_search``); the loads are an offline batch and Poisson rates at
   ``RATE_FACTORS`` x r1, r1 = 1 / one request's predicted AR service time alone.
3. Measurement: at each load, AR, SD(k), PSD(k) and the adaptive policy (seeded with the
   calibration's costs, then measuring its own) serve the same requests, on one set of workers,
   in turn; every output is checked against AR's (greedy: lossless).  A second pass (the
   configurations in reverse order) shows the run-to-run noise; per load the two passes'
   mean is judged too.
Writes ``results.json`` (`validation.adaptive.adaptive_results.AdaptiveBenchResult`) and
``throughput_vs_load.png`` (one line per configuration) to DIR.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.adaptive_policy import AcceptanceTracker, AffineCosts, PolicyConfig
from psdlab.analysis.atomic_write import write_all
from psdlab.analysis.trace import Trace
from psdlab.validation.adaptive.adaptive_results import (AdaptiveBenchResult, AdaptiveCalibration,
                                                         AdaptiveJudgement, AdaptivePrediction,
                                                         AdaptiveRunStats, BenchPlan, ConfigRun,
                                                         FitPoints, LoadResult, LoadRun,
                                                         PassPooling)

if TYPE_CHECKING:
    from psdlab.runtime.controller import EngineConfig

#: Poisson rates as multiples of r1 = 1 / (one request's AR service time alone, predicted from
#: the calibration): ~0.5, ~1.5 and ~4 requests' worth of work arriving per service time
RATE_FACTORS = {"low": 0.5, "medium": 1.5, "high": 4.0}


def _fit_costs(traces: list[Trace], drafter_label: str) -> tuple[AffineCosts, FitPoints]:
    """Affine fits of the calibration runs' phases (least squares, clipped at 0)."""
    v, d, p = [], [], []
    for tr in traces:
        for s in tr.steps:
            for ph in s.phases:
                dt_ = ph.end - ph.start
                if ph.kind == "verify":
                    v.append((ph.seqs, ph.tokens, dt_))
                elif ph.kind == "draft":
                    k = -(-ph.tokens // max(ph.seqs, 1))
                    d.append((ph.seqs, dt_ / max(k, 1)))
                elif ph.kind == "prefill" and ph.device == drafter_label:
                    p.append((ph.tokens, dt_))
    V = np.array(v, float)
    X = np.column_stack([np.ones(len(V)), V[:, 0], V[:, 1]])
    c0, c_seq, c_tok = np.clip(np.linalg.lstsq(X, V[:, 2], rcond=None)[0], 0.0, None)
    D = np.array(d, float)
    d_seq, d0 = np.polyfit(D[:, 0], D[:, 1], 1) if len(set(D[:, 0])) > 1 else (0.0, D[:, 1].mean())
    P = np.array(p, float) if p else np.zeros((0, 2))
    p_tok, p0 = (np.polyfit(P[:, 0], P[:, 1], 1) if len(set(P[:, 0])) > 1
                 else (float(P[:, 1].mean() / max(P[:, 0].mean(), 1)) if len(P) else 0.0, 0.0))
    costs = AffineCosts(c0=float(c0), c_seq=float(c_seq), c_tok=float(c_tok),
                        d0=max(float(d0), 0.0), d_seq=max(float(d_seq), 0.0),
                        p0=max(float(p0), 0.0), p_tok=max(float(p_tok), 0.0))
    return costs, FitPoints(verify_points=len(v), draft_points=len(d), prefill_points=len(p))


def _acceptance(traces: list[Trace], k: int) -> tuple[float, ...]:
    tr = AcceptanceTracker(prior=0.5, prior_weight=0.0, decay=1.0)
    for t in traces:
        for s in t.steps:
            tr.update([(v.proposed, v.accepted) for v in s.verified])
    return tr.rates(k)


def adaptive_sim_config(plan: BenchPlan, costs: AffineCosts, rates: tuple[float, ...],
                        prompt: float, policy: dict[str, Any]):
    """The simulator's view of the pair: affine costs, the measured per-position acceptance."""
    from psdlab.sim.sim_config import config_from_dict
    raw = {"seed": plan.seed, "requests": plan.requests,
           "server": {"mode": "adaptive", "m": plan.m}, "adaptive": policy,
           "target": {"name": "target", "device": "cpu:1", "cost": {
               "name": "affine", "base": costs.c0, "per_seq": costs.c_seq,
               "per_token": costs.c_tok}},
           "drafter": {"name": f"exit-{plan.depth}", "device": "cpu:0", "cost": {
               "name": "affine", "base": costs.d0, "per_token": costs.d_seq}},
           "acceptance": {"name": "positional", "rates": [max(min(a, 0.999), 0.001)
                                                          for a in rates]},
           "workload": {"name": "offline", "prompt": {"name": "fixed", "value": int(prompt)},
                        "output": {"name": "fixed", "value": plan.max_new_tokens}},
           "trace": {"level": "none"}}
    return config_from_dict(raw)


def _configs(plan: BenchPlan, base: EngineConfig, pcfg: PolicyConfig, prior: AffineCosts
             ) -> dict[str, EngineConfig]:
    rep = dataclasses.replace
    half = max(plan.m // 2, 1)
    return {"ar": rep(base, mode="ar", batch=plan.m, max_num_seqs=plan.m),
            f"sd{plan.k}": rep(base, mode="sd-sep", k=plan.k, batch=plan.m, max_num_seqs=plan.m),
            f"psd{plan.k}": rep(base, mode="psd", k=plan.k, batch=half, max_num_seqs=plan.m),
            "adaptive": rep(base, mode="adaptive", k=plan.k, batch=plan.m, max_num_seqs=plan.m,
                            adaptive_policy=pcfg, adaptive_prior=prior)}


def _measure(eng: Any, cfg: EngineConfig, reqs: list[Any]) -> ConfigRun:
    from psdlab.analysis.metrics import summarize
    t0 = time.perf_counter()
    res = eng.run(reqs, config=cfg)
    m = summarize(res.trace)
    tpot = m.get("tpot") or {}
    wall_s = time.perf_counter() - t0
    a = res.trace.run.extra.get("adaptive")
    stats = None if a is None else AdaptiveRunStats(
        steps_ar=a["steps_ar"], steps_sd=a["steps_sd"], steps_psd=a["steps_psd"],
        switches=a["switches"], transitions=dict(a["transitions"]),
        timeline=tuple((t, lab) for t, lab in a["timeline"]),
        catch_up_tokens=a["catch_up_tokens"], drafts_dropped=a["drafts_dropped"])
    return ConfigRun(tok_s=m["throughput_tok_s"], tpot_p50=tpot.get("p50"),
                     tpot_p99=tpot.get("p99"), wall_s=wall_s,
                     outputs=tuple(tuple(o.token_ids) for o in res.outputs), adaptive=stats)


def _calibrate(eng: Any, plan: BenchPlan, base: Any, calib: list[Any], measured: list[Any],
               t_start: float) -> tuple[dict[str, Any], AdaptiveCalibration]:
    """1. calibration: AR and SD-sep at m and at 1; the policy (as a config table) and the
    fitted costs, the acceptance and the measured prompts' mean length."""
    rep = dataclasses.replace
    cal_traces = []
    for mode, m, reqs in (("ar", plan.m, calib), ("sd-sep", plan.m, calib),
                          ("ar", 1, calib[:2]), ("sd-sep", 1, calib[:2])):
        cfg = rep(base, mode=mode, batch=m, max_num_seqs=m, max_new_tokens=plan.calib_tokens)
        cal_traces.append(eng.run([rep(r, arrival=0.0) for r in reqs], config=cfg).trace)
    assert eng.drafter is not None
    prior, points = _fit_costs(cal_traces, eng.drafter.label)
    acc = _acceptance(cal_traces[1::2], plan.k)
    policy = {"modes": ["ar", "sd", "psd"], "k_choices": [plan.k], "margin": 0.05,
              "hold": 2}
    prompt_len = float(np.mean([len(r.prompt_ids) for r in measured]))
    return policy, AdaptiveCalibration(costs=prior, points=points, acceptance=acc,
                                       prompt_mean=prompt_len,
                                       wall_s=time.perf_counter() - t_start)


def _predict(plan: BenchPlan, cal: AdaptiveCalibration, policy: dict[str, Any]
             ) -> AdaptivePrediction:
    """2. prediction (before the measured runs): the rates and the simulated sweep."""
    from psdlab.sim.policy_search import load_sweep, policy_thresholds
    scfg = adaptive_sim_config(plan, cal.costs, cal.acceptance, cal.prompt_mean, policy)
    fixed = (("ar", "ar", 0), (f"sd{plan.k}", "sd", plan.k), (f"psd{plan.k}", "psd", plan.k))
    alone = plan.max_new_tokens * cal.costs.verify(1, 0)
    rates = {name: f / alone for name, f in RATE_FACTORS.items()}
    sweep = load_sweep(scfg, list(rates.values()), fixed)
    return AdaptivePrediction(service_time_alone_s=alone, rates_req_s=rates,
                              thresholds=policy_thresholds(scfg).ranges, rows=sweep.rows,
                              switch_points=sweep.switch_points)


def _measure_loads(eng: Any, plan: BenchPlan, configs: dict[str, EngineConfig], measured: list[Any],
                   rates: Mapping[str, float], t_start: float) -> list[LoadRun]:
    """3. measurement: every config at every load (a second pass in reverse order when
    ``plan.repeat`` and half the budget is left)."""
    from psdlab.runtime.requests import Request, arrival_times
    loads: list[tuple[str, float | None]] = [("offline", None), *rates.items()]
    rows = []
    for npass in range(2 if plan.repeat else 1):
        if npass and time.perf_counter() - t_start > plan.budget_s / 2:
            break                                   # no time for a second pass
        order = list(configs.items())[::-1 if npass else 1]
        for name, rate in loads:
            times = ([0.0] * len(measured) if rate is None else
                     arrival_times(f"poisson:{rate}", len(measured), plan.seed))
            reqs = [Request(r.id, r.prompt_ids, t, r.prompt_text)
                    for r, t in zip(measured, times, strict=True)]
            uptime = tuple(os.getloadavg())
            done = {label: _measure(eng, cfg, reqs) for label, cfg in order}
            rows.append(LoadRun(load=name + (" (repeat)" if npass else ""), rate_req_s=rate,
                                configs={lab: done[lab] for lab in configs}, uptime=uptime))
    return rows


def _write_results(result: AdaptiveBenchResult, out_dir: Path) -> AdaptiveBenchResult:
    """The run's figure and results.json; the result with the files it wrote."""
    from psdlab.validation.adaptive.adaptive_report import write_adaptive_figure
    write_all({str(out_dir / "throughput_vs_load.png"): lambda p: write_adaptive_figure(result, p)})
    write_all({str(out_dir / "results.json"): lambda p: Path(p).write_text(
        json.dumps(result.to_dict(), indent=1, sort_keys=True))})
    return dataclasses.replace(result, files=(str(out_dir / "results.json"),
                                              str(out_dir / "throughput_vs_load.png")))


def run_adaptive_bench(args: Any, plan: BenchPlan | None = None) -> AdaptiveBenchResult:
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.drafter_build import early_exit_spec
    from psdlab.runtime.model_pair import prepare_drafter, prepare_target
    from psdlab.runtime import run_setup as session
    from psdlab.runtime.runner import ModelSpec
    from psdlab.validation.results_file import git_info, machine_info

    plan = plan or BenchPlan()
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    load0 = list(os.getloadavg())
    target = prepare_target(None, False)
    n_layers = json.loads((Path(target) / "config.json").read_text())["num_hidden_layers"]
    drafter = prepare_drafter(Path(target), early_exit_spec(plan.depth, n_target=n_layers),
                              progress=False)
    tok = session.load_tokenizer(str(target))
    prompts = session.load_requests(None, tok, "offline", None, plan.seed)
    calib, measured = prompts[:4], prompts[4:4 + plan.requests]
    base = EngineConfig(mode="psd", k=plan.k, batch=max(plan.m // 2, 1), max_num_seqs=plan.m,
                        max_new_tokens=plan.max_new_tokens, ignore_eos=True, max_len=1024,
                        backend="process", seed=plan.seed)
    with Engine(base, ModelSpec(str(target)), ModelSpec(str(drafter)), tok) as eng:
        policy, cal = _calibrate(eng, plan, base, calib, measured, t_start)
        pcfg = PolicyConfig(modes=("ar", "sd", "psd"), k_choices=(plan.k,), margin=0.05, hold=2)
        pred = _predict(plan, cal, policy)
        configs = _configs(plan, base, pcfg, cal.costs)
        rows = _measure_loads(eng, plan, configs, measured, pred.rates_req_s, t_start)
    judged = _judge(rows, {r.load: r.winner_fixed for r in pred.rows}, list(configs))
    result = AdaptiveBenchResult(
        plan=plan, drafter=f"exit-{plan.depth}", uptime_before=tuple(load0), calibration=cal,
        prediction=pred, measured=judged, machine=machine_info(load0), git=git_info(),
        date_utc=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        uptime_after=tuple(os.getloadavg()), wall_s=time.perf_counter() - t_start,
        note="2 shared cores: other jobs ran on this machine during the runs "
             "(load averages per load in 'uptime')")
    return _write_results(result, out_dir)


def _judge(rows: Sequence[LoadRun], predicted: Mapping[str, str], labels: list[str]
           ) -> AdaptiveJudgement:
    """The measured rows judged (``predicted``: each simulated load's fixed winner)."""
    from psdlab.sim.policy_search import winner
    fixed = [lab for lab in labels if lab != "adaptive"]
    judged = []
    for row in rows:
        cfgs = row.configs
        best = winner({lab: {"tok_s": c.tok_s, "tpot_p50": c.tpot_p50}
                       for lab, c in cfgs.items()}, fixed)   # as the prediction's: ties by TPOT
        key = "offline" if row.load.startswith("offline") else f"{row.rate_req_s:g}"
        judged.append(LoadResult(
            load=row.load, rate_req_s=row.rate_req_s, configs=cfgs, uptime=row.uptime,
            lossless={lab: cfgs[lab].outputs == cfgs["ar"].outputs for lab in labels},
            winner_measured=best, adaptive_vs_best=cfgs["adaptive"].tok_s / cfgs[best].tok_s,
            winner_predicted=predicted.get(key)))
    again = {r.load[:-len(" (repeat)")]: r for r in judged if r.load.endswith("(repeat)")}
    rows_out = [r if r.load.endswith("(repeat)") or r.load not in again
                else dataclasses.replace(r, pooled=_pooled(r, again[r.load], labels, fixed))
                for r in judged]
    main = [r for r in rows_out if not r.load.endswith("(repeat)")]
    norm = {lab: float(np.mean([r.configs[lab].tok_s / max(r.configs[x].tok_s for x in labels)
                                for r in main])) for lab in labels}
    pooled = [r.pooled.adaptive_vs_best for r in main if r.pooled is not None]
    return AdaptiveJudgement(
        rows=tuple(rows_out), mean_normalised_tok_s=norm,
        pooled_adaptive_min_vs_best=min(pooled) if pooled else None,
        max_pass_spread=max((v for r in main if r.pooled is not None
                             for v in r.pooled.spread.values()), default=None),
        adaptive_min_vs_best=min(r.adaptive_vs_best for r in main),
        goal_097_every_load=all(r.adaptive_vs_best >= 0.97 for r in main),
        adaptive_ahead_of_every_fixed_overall=all(norm["adaptive"] > norm[f] for f in fixed),
        winners_predicted_right=sum(r.winner_measured == r.winner_predicted for r in main),
        loads=len(main))


def _pooled(r: LoadResult, r2: LoadResult, labels: list[str], fixed: list[str]) -> PassPooling:
    """Both passes of one load: their mean, and how far they differ."""
    mean = {lab: 0.5 * (r.configs[lab].tok_s + r2.configs[lab].tok_s) for lab in labels}
    return PassPooling(tok_s=mean, adaptive_vs_best=mean["adaptive"] / max(mean[f] for f in fixed),
                       spread={lab: abs(r.configs[lab].tok_s - r2.configs[lab].tok_s) / mean[lab]
                               for lab in labels})


def format_adaptive_bench_report(result: AdaptiveBenchResult) -> str:
    from psdlab.validation.adaptive.adaptive_report import format_text
    return format_text(result)
