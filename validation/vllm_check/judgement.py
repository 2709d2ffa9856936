"""The judgement of `psdlab check-vllm`: calibrate on one vLLM server, predict the others.

Input: the runs the harness made (`validation.vllm_check.harness`), each a ``vllm bench serve
--save-detailed`` result plus ``/metrics`` snapshots before and after it, labelled with its
configuration (mode, k, request rate) and repeat.  The calibration -- by default every rate
of one server (`default_calibration`: a short rate sweep, as a user would record the server
they run), or one configuration -- goes to `validation.serving_results.calibration.fit_from_bench`,
all its runs jointly (two loads of one server separate the fixed cost of a step from its cost
per sequence); every other configuration is predicted by
`validation.serving_results.predict.predict_bench` from the calibration's first result's requests
(lengths, and vLLM's seeded arrival pattern re-timed to the configuration's rate, which is how
``vllm bench serve --seed`` draws them: the same gamma draws scaled by 1/rate), so no held-out
measurement enters a prediction.  Each configuration is compared on mean TTFT, mean TPOT,
output throughput and acceptance length (vLLM bench's own keys; every one judged on every
held-out configuration, acceptance length where it speculates), each beside the spread of the
configuration's own repeats (the run-to-run noise), so a miss can be told from noise.
`evaluate` gives the judgement as a `CheckJudgement` (`validation.vllm_check.check_results`);
`check_markdown` writes a report's table from its fields.
"""
from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from psdlab.validation.vllm_check.check_results import (GOAL, METRICS, PSD_FIGURES,
                                                        CheckJudgement, CheckReport, ConfigRow,
                                                        HeldOutTally, MetricSummary, PerFigure,
                                                        PsdJudgement, PsdRunRecord, RunRecord,
                                                        noise)

if TYPE_CHECKING:
    from psdlab.analysis.formats.records import SpecCounters
    from psdlab.validation.serving_results.calibration import BenchFit


def run_config_name(mode: str, k: int, rate: float) -> str:
    return f"{'ar' if mode == 'ar' else f'sd-k{k}'}@{rate:g}"


def measured(rec: RunRecord) -> PerFigure[float | None]:
    """The compared figures of one run: vLLM bench's, with the acceptance length from the run's
    ``/metrics`` counters (1 + accepted / drafts) when speculation is on."""
    from psdlab.analysis.formats import vllm_bench
    s = vllm_bench.read(rec.result)
    c = counters(rec)
    return PerFigure(mean_ttft_ms=s.stats_ms.get("mean_ttft_ms"),
                     mean_tpot_ms=s.stats_ms.get("mean_tpot_ms"),
                     output_throughput=s.output_throughput,
                     spec_decode_acceptance_length=(1.0 + c.num_accepted_tokens / c.num_drafts
                                                    if c is not None and c.num_drafts else None))


def counters(rec: RunRecord) -> SpecCounters | None:
    """The run's spec-decode counter deltas (None for AR)."""
    if rec.mode == "ar":
        return None
    from psdlab.analysis.formats import vllm_metrics
    return vllm_metrics.read_delta(rec.metrics_before, rec.metrics_after)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas:
        return None
    return pred / meas - 1.0


def server_of(config: str) -> str:
    """The server of configuration ``config``: ``sd-k4@0.5`` -> ``sd-k4``."""
    return config.split("@")[0]


#: the default calibration, stated before any held-out error was seen (`default_calibration`)
CALIBRATION_RULE = ("every rate of the speculative server with the largest k (the server a "
                    "user would run and record at a short rate sweep; AR when no server "
                    "speculates); its first rate alone when that server is the only one")


def default_calibration(configs: Sequence[str]) -> str:
    """`CALIBRATION_RULE` over ``configs`` (names such as ``sd-k4@0.5``, ``ar@1``)."""
    servers = list(dict.fromkeys(server_of(c) for c in configs))
    if not servers:
        raise ValueError("configurations: none to calibrate on")
    sd = [x for x in servers if x.startswith("sd-k")]
    server = max(sd, key=lambda x: int(x[4:])) if sd else servers[0]
    if len(servers) == 1:              # nothing else to predict: one rate, the others held out
        return next(c for c in configs if server_of(c) == server)
    return server


def check_calibration(calibration: str | None, configs: Sequence[str]) -> str:
    """``--calibration`` checked against ``configs`` (a configuration or a server name); None:
    `default_calibration`.  A one-line error naming the option and the allowed names."""
    if calibration is None:
        return default_calibration(configs)
    if calibration not in list(configs) + sorted({server_of(c) for c in configs}):
        raise ValueError(f"--calibration: must be one of {', '.join(configs)} (or a server "
                         f"name such as {server_of(configs[0])}: all its rates), "
                         f"got {calibration!r}")
    return calibration


def in_calibration(config: str, calibration: str) -> bool:
    """Whether configuration ``config`` (``sd-k4@0.5``) is calibration data: ``calibration``
    names one configuration, or one server (``sd-k4``: all its request rates)."""
    return config == calibration or server_of(config) == calibration


def _counter_span(runs: Sequence[RunRecord], cal: Sequence[RunRecord],
                  calibration: str) -> str | None:
    """A note when the acceptance counters' span (the first calibration run's snapshot before
    to the last one's after) also counts runs outside the calibration on that server."""
    first, last = runs.index(cal[0]), runs.index(cal[-1])
    others = sorted({r.config for r in runs[first:last + 1]
                     if (r.mode, r.k) == (cal[0].mode, cal[0].k)
                     and not in_calibration(r.config, calibration)})
    if not others:
        return None
    return (f"the acceptance counters span {cal[0].config} r{cal[0].repeat} to "
            f"{cal[-1].config} r{cal[-1].repeat} on one server, so they also count the "
            f"drafts of {', '.join(others)} run in between (held-out runs of the same server)")


def evaluate(runs: Sequence[RunRecord], calibration: str, *, seed: int = 0,
             bootstrap: int = 10,
             drafter_to_target_ratio: float | None = None,
             psd_runs: Sequence[PsdRunRecord] = (),
             corun_probe: str | None = None) -> CheckJudgement:
    """Fit on the runs of configuration ``calibration``, predict every configuration (the
    calibration one in-sample), compare; and PSD inside vLLM's runs ``psd_runs``, held out,
    predicted from the same fit and the co-run probe's record ``corun_probe``
    (`validation.vllm_check.psd_check`: no PSD run is among the fit's inputs); the
    judgement."""
    from psdlab.validation.serving_results.calibration import fit_from_bench
    from psdlab.validation.vllm_check.psd_check import judge_psd

    cal = [r for r in runs if in_calibration(r.config, calibration)]
    if not cal:
        raise ValueError(f"calibration: no run of configuration {calibration!r}")
    sd = cal[0].mode != "ar"          # AR runs have no spec-decode counters to give
    ratio = drafter_to_target_ratio if sd else None      # a prior splits speculative steps
    fit = fit_from_bench([r.result for r in cal],
                         metrics_before=cal[0].metrics_before if sd else None,
                         metrics_after=cal[-1].metrics_after if sd else None,
                         seed=seed, bootstrap=bootstrap,
                         drafter_to_target_ratio=ratio)
    configs: dict[str, list[RunRecord]] = {}
    for r in runs:
        configs.setdefault(r.config, []).append(r)
    rows = tuple(_row(reps, fit, cal[0].result, calibration, seed) for reps in configs.values())
    held = [r for r in rows if r.role == "held-out"]
    judged = [(e, r.noise.get(m)) for r in held for m, e in r.error.items() if e is not None]
    span = _counter_span(list(runs), cal, calibration) if sd else None
    return CheckJudgement(
        calibration=calibration, calibration_configs=tuple(sorted({r.config for r in cal})),
        goal=GOAL, fit=fit, drafter_to_target_ratio=ratio, notes=(span,) if span else (),
        rows=rows, held_out=HeldOutTally.of(judged),
        summary=PerFigure.of(lambda m: MetricSummary.of(
            [e for e in (r.error.get(m) for r in held) if e is not None])),
        psd=judge_psd(psd_runs, corun_probe, fit, seed))


def _row(reps: Sequence[RunRecord], fit: BenchFit, workload: str, calibration: str,
         seed: int) -> ConfigRow:
    """One configuration's runs ``reps`` measured, predicted from ``fit`` on the calibration's
    first result's requests ``workload``, compared."""
    from psdlab.validation.serving_results.predict import predict_bench

    first = reps[0]
    each = tuple(measured(r) for r in reps)
    meas = PerFigure.of(lambda m: _mean([x.get(m) for x in each]))
    pred_doc: Mapping[str, Any]
    try:
        pred_doc = predict_bench(fit, workload, mode=first.mode, k=first.k,
                                 request_rate=first.request_rate, max_concurrency=None,
                                 seed=seed)
        why = None
    except ValueError as exc:      # e.g. SD from a fit that saw no speculation
        pred_doc, why = {}, str(exc).splitlines()[0]
    expected = (pred_doc.get("psdlab", {}).get("prediction", {})
                .get("expected_acceptance_length"))

    def predicted(m: str) -> float | None:
        if m != "spec_decode_acceptance_length":
            return _num(pred_doc.get(m))
        if first.mode == "ar":
            return None
        # the fitted acceptance's expectation, not one simulated run's draw of it
        return _num(pred_doc.get(m) if expected is None else expected)

    pred = PerFigure.of(predicted)
    return ConfigRow(
        config=first.config, mode=first.mode, k=first.k, request_rate=first.request_rate,
        role="calibration" if in_calibration(first.config, calibration) else "held-out",
        repeats=len(reps), measured=meas, predicted=pred, not_predicted=why,
        error=PerFigure.of(lambda m: _err(pred.get(m), meas.get(m))),
        noise=PerFigure.of(lambda m: noise([x.get(m) for x in each])),
        measured_repeats=each, counters=tuple(counters(r) for r in reps),
        load_before=tuple(r.load_before for r in reps), results=tuple(r.result for r in reps))


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _provenance(report: CheckReport) -> list[str]:
    """Where and when (lines for the markdown), when the report says."""
    run = report.measured
    if run is None:
        return []
    m, g = run.machine or {}, run.git or {}
    loads = [r.load_before[0] for r in run.runs if r.load_before]
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "not recorded"
    lines = [f"Measured {run.date} on {m.get('cpu_model')} ({m.get('cpus')} CPUs; "
             f"{', '.join(m.get('cpu_flags') or [])}), {run.vllm_version}, commit "
             f"{g.get('short')} ({g.get('tree')}). Other jobs shared the cores: 1-minute load "
             f"average before the runs {load}.", ""]
    again = report.rejudged
    if again:
        rg = again.git or {}
        lines += [f"Re-judged without a server {again.date} at commit {rg.get('short')} "
                  f"({rg.get('tree')}): `{report.command}`.", ""]
    return lines


def _calibration(report: CheckReport) -> list[str]:
    """What the fit saw and why (lines for the markdown)."""
    judged, choice = report.judgement, report.choice
    configs = judged.calibration_configs or (judged.calibration,)
    how = ("every rate of one server, fitted jointly" if len(configs) > 1
           else "one configuration")
    line = f"Calibration: {', '.join(configs)} ({how})."
    if choice is not None and choice.rule:
        line += (" Chosen by the default rule, stated before any held-out error was seen: "
                 f"{choice.rule}." if choice.default else " Chosen with --calibration.")
    return [line, ""]


def _mark(role: str, err: float | None, spread: float | None, goal: float) -> str:
    """A figure's verdict: within ``goal``, or a miss told from its repeat noise ``spread``
    (held-out figures only)."""
    if role != "held-out" or err is None:
        return ""
    if abs(err) <= goal:
        return " ok"
    if spread is None:
        return " MISS"
    return " MISS (within noise)" if abs(err) <= spread else " MISS (beyond noise)"


def check_markdown(report: CheckReport) -> str:
    """The predicted-vs-measured table (one line per configuration and figure)."""
    doc = report.judgement
    lines = [f"# psdlab check-vllm: calibrated on `{doc.calibration}`, predicting the others",
             "", *_calibration(report),
             f"Goal: |error| <= {100 * doc.goal:.0f}% on every held-out figure (each of "
             "the four on every held-out configuration; acceptance length where it "
             "speculates). Repeat noise: (max - min) / mean over a configuration's repeats "
             "(- : run once).", "",
             *_provenance(report),
             "| configuration | role | figure | measured | predicted | error | repeat noise |",
             "|---|---|---|---|---|---|---|"]
    order = sorted(doc.rows, key=lambda r: (r.role != "calibration", r.config))
    for r in order:
        for m, label in METRICS.items():
            meas, pred, err = r.measured.get(m), r.predicted.get(m), r.error.get(m)
            if meas is None and pred is None:
                continue
            lines.append(f"| {r.config} | {r.role} (x{r.repeats}) | {label} | "
                         f"{_f(meas, '.4g')} | {_f(pred, '.4g')} | "
                         f"{_pct(err)}{_mark(r.role, err, r.noise.get(m), doc.goal)} | "
                         f"{_pct(r.noise.get(m)).lstrip('+')} |")
    psd = doc.psd
    for pr in (psd.rows if psd is not None else ()):
        for m, label in PSD_FIGURES.items():
            err = pr.error.get(m)
            lines.append(f"| {pr.config} (PSD in vLLM, offline) | held-out (x{pr.repeats}) | "
                         f"{label} | {_f(pr.measured.get(m), '.4g')} | "
                         f"{_f(pr.predicted.get(m), '.4g')} | "
                         f"{_pct(err)}{_mark('held-out', err, pr.noise.get(m), doc.goal)} | "
                         f"{_pct(pr.noise.get(m)).lstrip('+')} |")
    lines += [f"\n{r.config}: not predicted ({r.not_predicted})" for r in order
              if r.not_predicted]
    lines += [f"\n{r.config}: not predicted ({r.not_predicted})"
              for r in (psd.rows if psd is not None else ()) if r.not_predicted]
    lines += ["", "Held-out figures within the goal: " + ", ".join(
        f"{METRICS[m]} {s.held_out_within_goal}/{s.held_out_compared}"
        for m, s in doc.summary.items())]
    h = doc.held_out
    misses = h.judged - h.within_goal
    lines[-1] += f"; {h.within_goal} of {h.judged} in all."
    lines += ["", f"Repeat noise measured for {h.with_repeat_noise} of {h.judged} "
              f"held-out figures (a configuration run once has none). Of the {misses} "
              f"misses, {h.misses_beyond_noise} exceed their repeat noise, "
              f"{h.misses_within_noise} lie within it, {h.misses_noise_unmeasured} "
              f"have no repeat noise measured."]
    if psd is not None:
        lines += _psd_lines(psd, doc.calibration)
    notes = list(doc.notes) + list(doc.fit.notes)
    if notes:
        lines += ["", "What the calibration could and could not identify (the fit's notes):", ""]
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _psd_lines(psd: PsdJudgement, calibration: str) -> list[str]:
    """PSD inside vLLM's paragraph of the markdown: not measured, or its tally, the probe's
    contention and what differs from the served calibration."""
    if not psd.measured:
        return ["", f"{psd.why}."]
    h, c = psd.held_out, psd.contention or {}
    misses = h.judged - h.within_goal
    out = ["", f"PSD inside vLLM (offline, held out: predicted before it ran, from the "
               f"`{calibration}` calibration and the co-run probe `{psd.probe}`; no PSD run is "
               f"among the fit's inputs): {h.within_goal} of {h.judged} figures within the "
               f"goal; of the {misses} misses, {h.misses_beyond_noise} exceed their repeat "
               f"noise, {h.misses_within_noise} lie within it, "
               f"{h.misses_noise_unmeasured} have no repeat noise measured.",
           "", f"Co-run probe ({c.get('why')}): contention c target "
               f"{_f(c.get('target'), '+.3f')}, drafter {_f(c.get('drafter'), '+.3f')}; "
               f"co-run / solo verification {_f(c.get('overlap_target'), '.3f')}, drafting "
               f"{_f(c.get('overlap_drafter'), '.3f')}; PSD's drafter pass "
               f"{_f(psd.drafter_scale, '.3f')} x the fit's (drafter_scale). It ran on psdlab's "
               f"CPU runner of the same model pair on the same two cores (vLLM's plugin exposes "
               f"no way to run its drafter's and target's passes at once outside a PSD step; "
               f"PSD's drafter is psdlab's runner, and psdlab's runner prices the target's "
               f"passes within 1% of vLLM's, docs/vllm.md).",
           "", "What differs between the served calibration and the offline PSD run:", ""]
    return out + [f"- {n}" for n in psd.notes]
