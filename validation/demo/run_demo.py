"""`psdlab demo`, the README's main job: measure, calibrate, predict the held-out runs, report.

1. Prepare the real model pair (``runtime.model_pair.prepare_pair``: SmolLM2-135M and its distilled
   drafter; converted once and cached) unless model directories are given.
2. Measure the acceptance pool untimed (``validation.demo.pool_probe``: the greedy match patterns
   of calibration-side prompts no timed run serves), then run the plan of
   ``validation.demo.measurement_plan`` on this machine: AR, SD (drafter on its own core, no
   overlap) and PSD, the calibration runs over one set of shipped prompts and the held-out runs over
   prompts written after every earlier demo (``validation.demo.prompt_sides``), at several k and
   arrival patterns, one trace per run.
3. Calibrate the simulator on the ``calibrate`` runs (``validation.calibrate``: cost models on
   their serial steps, the overlap contention, controller overhead and spread they show,
   ``validation.replay_model``) and write ``model.json`` -- the file ``psdlab calibrate``
   writes from those traces -- plus the acceptance model that transfers to new prompts
   (``validation.acceptance.cross_validation``: chosen by cross-validation over the calibration
   prompts, the pool's included), which is the model file's default acceptance: the
   prediction.
4. Replay every run in the calibrated simulator (``validation.validate``); the ``validate``
   runs were not used for the fit: other prompts, other k, Poisson arrivals.  With
   ``diagnostics``, the same replays under the diagnostic acceptance models
   (``validation.demo.diagnostic_replays``: the id-keyed replay of the calibration match
   patterns, per-position rates only; and every run's own match patterns, which leaves only
   the timing model's error) and the noise budget (``validation.demo.noise_budget``).
5. Write the report folder (``validation.demo.demo_report``: the verdict first) and
   ``results.json`` (``validation.results_file``: machine, date, commit, every judged
   figure) and return the summary lines: measured PSD/SD gain, predicted gain, error over
   the held-out SD/PSD pairs, and each gain by what it compares (iso-batch,
   iso-concurrency, against AR).
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.trace import Trace, read_trace
from psdlab.sim.costs.fitted import FitFile
from psdlab.validation.calibrate_files import calibrate_to_file
from psdlab.validation.context_slopes import read_probe
from psdlab.validation.corun_file import read_corun
from psdlab.validation.demo.diagnostic_replays import diagnostic_acceptance
from psdlab.validation.demo.measurement_plan import (Measured, MeasurementPlan, default_plan,
                                                     run_measurements)
from psdlab.validation.demo.noise_budget import budget as noise_budget
from psdlab.validation.demo.prompt_sides import POOL_EVERY, POOL_SPLITS, pool_splits_text
from psdlab.validation.demo.demo_report import write_demo_report
from psdlab.validation.demo.report_sections import transfer_sections
from psdlab.validation.psd_step import psd_step_lines, psd_step_rows
from psdlab.validation.report import spread_rows
from psdlab.validation.results_file import (build_results, concurrency_rows,
                                            headline_comparisons, headline_lines)
from psdlab.validation.validate import validate


#: seconds kept for calibration, replay and report after the last run (twice that with
#: ``diagnostics``, whose replays and sections take about as long again)
ANALYSIS_S = 75.0
#: seconds for the whole demo by default, analysis included: the main command's 15 minutes
#: less a minute to spare and the set-up before it (``scripts/setup.sh`` took 72-114 s on
#: fresh clones)
BUDGET_S = 700.0
#: simulator seeds the prediction averages.  One seed's replay of a 32-request run draws an
#: acceptance rate with an SD of about 10% and a mean TPOT with an SD of about 4.5%
#: (measured over seeds), and every run of a demo has the same seeded lengths and
#: style order, so whatever a few seeds' draws miss, every window and every demo misses alike;
#: 32 seeds bring that to about 0.8% of TPOT
SEEDS: tuple[int, ...] = tuple(range(32))
#: seeds of the diagnostic replays beside the prediction (the first ``len`` of the seeds
#: given): the id-keyed and the runs' own match patterns leave the draws little to decide
DIAGNOSTIC_SEEDS = 2


@dataclass
class DemoResult:
    out_dir: str
    model_path: str
    validation: Any
    measured: list[Measured]
    files: dict[str, str]
    headline: list[str]
    # seconds and counts by name, and load_before (a list of load averages)
    timings: dict[str, Any] = field(default_factory=dict)
    held_out: tuple[str, ...] = ()
    repeats: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"out_dir": self.out_dir, "model": self.model_path, "headline": self.headline,
                "timings_s": self.timings, "files": self.files,
                "held_out": list(self.held_out),
                "summary": self.validation.summary(only=set(self.held_out)),
                "noise_floor": self.validation.summary(only=set(self.repeats)),
                "repeat_spread": spread_rows(self.validation),
                "runs": [{"name": m.spec.name, "role": m.spec.role, "mode": m.spec.mode,
                          "k": m.spec.k, "m": m.spec.batch, "arrivals": m.spec.arrivals,
                          "rate": m.rate, "wall_s": m.wall_s, "trace": m.path}
                         for m in self.measured],
                "validation": self.validation.to_dict()}


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def resolve_pair(target: str | None, draft: str | None, quiet: bool) -> tuple[str, str, str | None]:
    """(target dir, drafter dir, tokenizer dir or None)."""
    if target is None and draft is None:
        from psdlab.runtime.model_pair import prepare_pair
        pair = prepare_pair(progress=not quiet)
        return pair.target_dir, pair.drafter_dir, pair.tokenizer_dir
    if target is None or draft is None:
        raise ValueError("target: give both --target and --draft, or neither (the real pair)")
    for name, path in (("target", target), ("draft", draft)):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise FileNotFoundError(f"{name}: no config.json in {path}")
    from psdlab.runtime.run_setup import tokenizer_dir
    return target, draft, tokenizer_dir(target)


def load_runs(measured: Sequence[Measured], loaded: Mapping[str, Trace] | None = None
              ) -> dict[str, Trace]:
    """Every run's trace by path: those in ``loaded`` or carried by the run (as the engine
    recorded it), the others read (each file once: a re-analysis of an earlier demo)."""
    out = dict(loaded or {})
    for m in measured:
        if m.path not in out:
            out[m.path] = m.trace if m.trace is not None else read_trace(m.path)
    return out


def calibrate_runs(measured: Sequence[Measured], out_dir: str,
                   pool: dict[str, str] | None = None,
                   traces: Mapping[str, Trace] | None = None) -> FitFile:
    """Fit on the calibration runs (acceptance: and the pool; context slopes: the context
    probe beside their traces, when there is one) and write model.json as ``psdlab
    calibrate`` does on those traces (``validation.calibrate_files.calibrate_to_file``: the
    replay parameters and the acceptance model for new prompts); return it as written (not
    read back).
    ``traces``: the runs' traces by path, already read."""
    os.makedirs(out_dir, exist_ok=True)
    cal = [m for m in measured if m.spec.role == "calibrate"]
    if not cal:
        raise ValueError("plan: no calibration runs")
    loaded = load_runs(cal, traces)
    path = os.path.join(out_dir, "model.json")
    folder = os.path.dirname(os.path.abspath(cal[0].path))
    doc = calibrate_to_file(path, [loaded[m.path] for m in cal],
                            [os.path.basename(m.path) for m in cal], holdout=0.2, seed=0,
                            context_probe=read_probe(folder), pool=pool,
                            corun=read_corun(folder))
    return FitFile(path, doc)


def before_it_ran(model: Mapping[str, Any], measured: Sequence[Measured]) -> list[str]:
    """The verdict's first line when no PSD run was calibrated on: what PSD's prediction
    rests on (the calibration modes and k, the co-run probe or a stated default); none when
    the calibration read PSD runs."""
    cal = [m.spec for m in measured if m.spec.role == "calibrate"]
    contention = (model.get("meta") or {}).get("contention")
    if contention is None or any(s.mode == "psd" for s in cal):
        return []
    modes = sorted({s.mode for s in cal})
    ks = sorted({s.k for s in cal if s.k > 0})
    inputs = ("the co-run probe" if contention.get("source") == "probe" else
              f"the stated default contention ({contention.get('source')})")
    return [f"PSD predicted before it ran: calibrated on {', '.join(modes)} runs "
            f"(k {', '.join(map(str, ks))}) and {inputs}; no PSD run shaped the prediction"]


def headline(validation: Any, held_out: set[str]) -> list[str]:
    """Three lines: measured gain, predicted gain, error (mean over held-out pairs), plus
    the closed form's true prediction of the steady-state decode speedup."""
    rows = [r for g in validation.gains if g.psd in held_out and g.sd in held_out
            for r in g.rows if r.metric == "gain.throughput_tok_s"]
    cf = [r for g in validation.gains if g.psd in held_out and g.sd in held_out
          for r in g.rows if r.metric == "speedup.steady.predicted" and r.measured is not None]
    if not rows:
        return ["measured PSD/SD gain: n/a (no held-out SD/PSD pair)", "predicted gain: n/a",
                "error: n/a"]
    meas = float(np.mean([r.measured for r in rows]))
    pred = float(np.mean([r.predicted for r in rows]))
    errs = [abs(r.error) for r in rows if r.error is not None]
    cf_txt = ""
    if cf:
        cf_txt = (f"; closed form (calibrated t, V) "
                  f"{100 * (np.mean([r.predicted for r in cf]) - 1):+.1f}% vs measured "
                  f"{100 * (np.mean([r.measured for r in cf]) - 1):+.1f}% (steady-state decode)")
    return [f"measured PSD/SD gain:  {100 * meas:+.1f}% (throughput, same batch size m, mean "
            f"of {len(rows)} held-out SD/PSD pairs on the held-out prompts)",
            f"predicted gain:        {100 * pred:+.1f}% (calibrated simulator, fitted "
            f"acceptance){cf_txt}",
            f"error:                 {100 * (pred - meas):+.1f} pp (max |error| over pairs "
            f"{max(errs):.1f} pp)"]


def demo(out_dir: str, *, quick: bool = False, plan: MeasurementPlan | None = None,
         target: str | None = None, draft: str | None = None,
         prompt_ids: Sequence[Sequence[int]] | None = None, backend: str | None = None,
         progress: bool = True, quiet: bool = False,
         seeds: Sequence[int] = SEEDS, budget_s: float | None = BUDGET_S,
         diagnostics: bool = False) -> DemoResult:
    """The whole main job (module docstring); ``quiet`` silences stderr, ``progress`` the
    bars, ``diagnostics`` adds the report's diagnostic sections.  ``budget_s``: seconds for
    the whole demo (model preparation included); repeats that would run past it less
    ANALYSIS_S are skipped (``validation.demo.measurement_plan.run_measurements``)."""
    t0 = time.perf_counter()
    timings: dict[str, Any] = {}        # seconds, counts, load_before: a list
    plan = plan or default_plan(quick)
    os.makedirs(out_dir, exist_ok=True)
    trace_dir = os.path.join(out_dir, "traces")
    _say("psdlab demo: preparing the model pair", quiet)
    target_dir, drafter_dir, tok_dir = resolve_pair(target, draft, quiet)
    tokenizer = None
    if prompt_ids is None:
        if tok_dir is None:
            raise ValueError("target: has no tokenizer; give prompt_ids")
        from psdlab.runtime.run_setup import load_tokenizer
        tokenizer = load_tokenizer(tok_dir)
    timings["prepare_s"] = time.perf_counter() - t0
    if hasattr(os, "getloadavg"):
        timings["load_at_start"] = os.getloadavg()[0]
        timings["load_before"] = list(os.getloadavg())
    pool = None
    if plan.probe:
        _say("psdlab demo: measuring the acceptance pool's match patterns (untimed)", quiet)
        from psdlab.validation.demo.pool_probe import probe_pool
        probed = probe_pool(plan, target_dir, drafter_dir, tokenizer, prompt_ids, out_dir)
        pool = probed["patterns"]
        timings["probe_s"] = probed["wall_s"]
        timings["pool_prompts"] = len(pool)
    from psdlab.validation.demo.progress import Bars
    bars = Bars(len(plan.runs), plan.num_prompts, progress and not quiet)
    try:
        measured = run_measurements(plan, target_dir, drafter_dir, trace_dir, tokenizer=tokenizer,
                            prompt_ids=prompt_ids, backend=backend, on_run=bars.on_run,
                            on_request=bars.on_request, on_skip=bars.on_skip,
                            deadline=None if budget_s is None else
                            t0 + budget_s - ANALYSIS_S * (2 if diagnostics else 1))
    finally:
        bars.close()
    timings["runs_s"] = (time.perf_counter() - t0 - timings["prepare_s"]
                         - timings.get("probe_s", 0.0))
    timings["skipped_runs"] = len(plan.runs) - len(measured)
    return analyse(out_dir, measured, plan, target_dir, drafter_dir, seeds=seeds,
                   quiet=quiet, timings=timings, t0=t0, pool=pool, diagnostics=diagnostics)


def analyse(out_dir: str, measured: Sequence[Measured], plan: MeasurementPlan, target_dir: str = "",
            drafter_dir: str = "", *, seeds: Sequence[int] = SEEDS,
            quiet: bool = True, timings: dict[str, Any] | None = None,
            t0: float | None = None, pool: dict[str, str] | None = None,
            diagnostics: bool = False, traces: Mapping[str, Trace] | None = None
            ) -> DemoResult:
    """Steps 3-5 on measured runs: calibrate (the acceptance model on the calibration runs
    and the acceptance ``pool``, ``validation.acceptance.pool``), replay, report;
    ``diagnostics``: the report's diagnostic sections too (module docstring); ``traces``:
    the runs' traces by path when already read (each trace file is read once)."""
    t0 = time.perf_counter() if t0 is None else t0
    timings = dict(timings or {})
    loaded = load_runs(measured, traces)
    _say("psdlab demo: calibrating the simulator on the calibration runs", quiet)
    model = calibrate_runs(measured, out_dir, pool, loaded)
    _say("psdlab demo: replaying every run in the calibrated simulator", quiet)
    named = [(m.spec.name, loaded[m.path]) for m in measured]
    validation = validate(model, named, seeds=seeds,
                          groups={m.spec.name: m.spec.config for m in measured})
    roles = {m.spec.config: m.spec.role for m in measured}
    held = {n for n, r in roles.items() if r == "validate"}
    repeats = {n for n, r in roles.items() if r == "repeat"}
    cal_cfgs = {n for n, r in roles.items() if r == "calibrate"}
    roles.update({m.spec.name: m.spec.role for m in measured})
    comparisons = headline_comparisons(concurrency_rows(validation, roles))
    lines = (before_it_ran(model.doc, measured) + headline(validation, held)
             + headline_lines(comparisons))
    selection = (model.doc.get("meta") or {}).get("acceptance_transfer")
    alternatives: list[tuple[str, Any]] = []
    sections: list[str] = []
    noise_rows: list[dict[str, Any]] = []
    if diagnostics:
        _say("psdlab demo: the same replays under the diagnostic acceptance models", quiet)
        alternatives = diagnostic_acceptance(model, named, seeds[:DIAGNOSTIC_SEEDS], measured)
        noise_rows = noise_budget(validation, held)
        sections = transfer_sections(validation, held, cal_cfgs, alternatives, selection,
                                     noise_rows)
    timings["analysis_s"] = time.perf_counter() - t0 - sum(
        timings.get(k, 0.0) for k in ("prepare_s", "probe_s", "runs_s"))
    timings["total_s"] = time.perf_counter() - t0
    intro = _intro(plan, target_dir, drafter_dir, timings, measured, loaded)
    contention = (model.doc.get("meta") or {}).get("contention")
    psd_rows = psd_step_rows(model.doc, [(m.spec.name, m.spec.config, loaded[m.path])
                                         for m in measured if m.spec.mode == "psd"])
    files = write_demo_report(out_dir, validation, named, roles=roles, held=held,
                              cal=cal_cfgs, repeats=repeats, headline=lines, intro=intro,
                              sections=sections, diagnostics=diagnostics,
                              psd_inputs=psd_step_lines(psd_rows, contention))
    results = build_results(validation=validation, roles=roles, held=held,
                            calibration=cal_cfgs, diagnostics=alternatives,
                            selection=selection, timings=timings,
                            plan={"runs": len(plan.runs), "measured": len(measured),
                                  "requests_per_run": plan.num_prompts,
                                  "max_new_tokens": plan.max_new_tokens,
                                  "heldout_configs": sorted(held),
                                  "calibration_configs": sorted(cal_cfgs)},
                            load_before=timings.get("load_before"))
    results["psd_inputs"] = {"contention": contention,
                             "steps": [r.to_dict() for r in psd_rows]}
    if diagnostics:
        results["noise_budget"] = noise_rows
    results["acceptance_pool"] = {"prompts": len(pool or {}), "splits": list(POOL_SPLITS),
                                  "every": dict(POOL_EVERY), "probe_s": timings.get("probe_s")}
    files["results"] = os.path.join(out_dir, "results.json")
    with open(files["results"], "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, default=str)
    result = DemoResult(out_dir, model.path, validation, list(measured), files, lines,
                        timings, tuple(sorted(held)), tuple(sorted(repeats)))
    with open(os.path.join(out_dir, "demo.json"), "w", encoding="utf-8") as fh:
        json.dump(result.to_dict(), fh, indent=1, default=str)
    return result


def reanalyse(trace_dir: str, out_dir: str, *, seeds: Sequence[int] = SEEDS,
              quiet: bool = True, diagnostics: bool = False) -> DemoResult:
    """Steps 3-5 again on the traces a demo wrote (``TRACE_DIR/*.jsonl``, run order = the
    order the runs were made, read from each trace's run record), into ``out_dir``."""
    from psdlab.validation.demo.run_order import RunSpec
    paths = sorted(os.path.join(trace_dir, f) for f in os.listdir(trace_dir)
                   if f.endswith(".jsonl"))
    measured = []
    loaded: dict[str, Trace] = {}
    for path in paths:
        tr = loaded[path] = read_trace(path)
        extra = tr.run.extra or {}
        if "demo_run" not in extra or "demo_role" not in extra:
            raise ValueError(f"{path}: not a psdlab demo trace (no demo_run/demo_role in its "
                             f"run record)")
        timed = any(r.arrival > 0 for r in tr.requests)
        spec = RunSpec(extra["demo_run"], tr.run.mode, tr.run.k, tr.run.m,
                       "poisson" if timed else "offline", extra["demo_role"],
                       extra.get("demo_config", ""), prompts=extra.get("demo_prompts", ""))
        start = min((s.start for s in tr.steps), default=0.0)
        measured.append((extra.get("run_started", os.path.getmtime(path)), start,
                         Measured(spec, path, 0.0, extra.get("poisson_rate"))))
    if not measured:
        raise FileNotFoundError(f"--traces: no .jsonl traces in {trace_dir}")
    measured.sort(key=lambda x: (x[0], x[1]))
    runs = [m for *_, m in measured]
    first = loaded[runs[0].path]
    offline = [m.spec.config for m in runs if m.spec.arrivals == "offline"]
    plan = MeasurementPlan(runs=tuple(m.spec for m in runs), num_prompts=len(first.requests),
                max_new_tokens=int((first.run.workload or {}).get("max_new_tokens", 32)),
                poisson_from=offline[0] if offline else "")
    models = first.run.models or {}
    from psdlab.validation.acceptance.pool import POOL_FILE, write_pool
    from psdlab.validation.demo.pool_probe import pool_for
    pool = pool_for(trace_dir)
    if pool:
        os.makedirs(out_dir, exist_ok=True)
        write_pool(os.path.join(out_dir, POOL_FILE), pool, copied=True)
    return analyse(out_dir, runs, plan, str(models.get("target", "")),
                   str(models.get("drafter", "")), seeds=seeds, quiet=quiet, pool=pool,
                   diagnostics=diagnostics, traces=loaded)


def _configs(measured: Sequence[Measured], role: str) -> list[str]:
    return list(dict.fromkeys(m.spec.config for m in measured if m.spec.role == role))


def _intro(plan: MeasurementPlan, target: str, drafter: str, timings: dict[str, Any],
           measured: Sequence[Measured], traces: Mapping[str, Trace]) -> list[str]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    rate = next((m.rate for m in measured if m.rate), None)
    configs = {m.spec.config for m in measured}
    reps = " / ".join(str(n) for n in sorted({sum(x.spec.config == c for x in measured)
                                              for c in configs}))
    lines = [f"Target `{os.path.basename(target.rstrip('/'))}`, drafter "
             f"`{os.path.basename(drafter.rstrip('/'))}`; {plan.num_prompts} requests a run "
             f"(over the prompts of its side: calibration runs and held-out runs serve "
             f"disjoint prompts; each repeat of a workload the next {plan.num_prompts} of "
             f"its side's list, its SD and PSD runs the same ones, and all calibration runs "
             f"of one repeat, whatever their k), "
             f"up to {plan.max_new_tokens} new tokens each (seeded lengths down to "
             f"{1 - plan.output_spread:.0%} of that; greedy, EOS ignored), "
             f"{len(plan.runs)} runs on one set of workers (drafter and target each on its "
             f"own CPU core): {len(configs)} configurations, each run {reps} time(s) in seeded "
             f"random rounds with the SD and PSD runs of a configuration back to back; "
             f"the comparisons use the median over a configuration's runs.",
             f"Calibrated on: {', '.join(_configs(measured, 'calibrate'))}. "
             f"Held out: {', '.join(_configs(measured, 'validate'))}.",
             f"Model preparation {timings.get('prepare_s', 0):.0f} s, runs "
             f"{timings.get('runs_s', 0):.0f} s; load average (1 min) at the start of the runs "
             f"{timings.get('load_at_start', float('nan')):.2f}, at the end {load[0]:.2f} / "
             f"{load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs."]
    if timings.get("pool_prompts"):
        lines.append(f"Acceptance pool: {timings['pool_prompts']:.0f} calibration-side prompts "
                     f"no timed run served (splits {pool_splits_text()}, never a "
                     f"held-out one), their greedy match patterns measured untimed in "
                     f"{timings.get('probe_s', 0):.0f} s before the runs "
                     f"(`runtime.acceptance_probe`): the acceptance model's data beside the "
                     f"calibration runs (`validation.acceptance.pool`).")
    if timings.get("skipped_runs"):
        lines.append(f"{timings['skipped_runs']:.0f} repeat run(s) skipped to stay within the "
                     f"time budget (every configuration ran at least once).")
    if "runs_s" not in timings:
        recorded = [(traces[m.path].run.extra or {}).get("load_1min") for m in measured]
        loads = [x for x in recorded if isinstance(x, (int, float))]
        lines[-1] = ("Re-analysed from the traces of an earlier demo (nothing was run now); "
                     "load average (1 min) at the start of its runs: "
                     + (f"{min(loads):.2f} to {max(loads):.2f}." if loads else "not recorded."))
    if rate:
        lines.append(f"Poisson runs: {rate:.3f} requests/s ({plan.load:g} x the rate the "
                     f"`{plan.poisson_from}` run served).")
    return lines
