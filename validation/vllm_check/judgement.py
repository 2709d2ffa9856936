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
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

#: the compared figures: vLLM bench key -> label
METRICS = {"mean_ttft_ms": "mean TTFT (ms)", "mean_tpot_ms": "mean TPOT (ms)",
           "output_throughput": "output throughput (tok/s)",
           "spec_decode_acceptance_length": "acceptance length"}
GOAL = 0.10


@dataclass(frozen=True)
class RunRecord:
    """One measured bench run of a configuration."""

    config: str            # e.g. "sd-k4@0.5"
    mode: str              # "ar" or "sd"
    k: int
    request_rate: float
    repeat: int
    result: str            # the bench JSON
    metrics_before: str
    metrics_after: str
    load_before: tuple[float, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_config_name(mode: str, k: int, rate: float) -> str:
    return f"{'ar' if mode == 'ar' else f'sd-k{k}'}@{rate:g}"


def measured(rec: RunRecord) -> dict[str, float | None]:
    """The compared figures of one run: vLLM bench's, with the acceptance length from the run's
    ``/metrics`` counters (1 + accepted / drafts) when speculation is on."""
    from psdlab.analysis.formats import vllm_bench, vllm_metrics
    s = vllm_bench.read(rec.result)
    out: dict[str, float | None] = {"mean_ttft_ms": s.stats_ms.get("mean_ttft_ms"),
                                    "mean_tpot_ms": s.stats_ms.get("mean_tpot_ms"),
                                    "output_throughput": s.output_throughput,
                                    "spec_decode_acceptance_length": None}
    if rec.mode != "ar":
        c = vllm_metrics.read_delta(rec.metrics_before, rec.metrics_after)
        out["spec_decode_acceptance_length"] = (
            1.0 + c.num_accepted_tokens / c.num_drafts if c.num_drafts else None)
    return out


def counters(rec: RunRecord) -> dict[str, Any] | None:
    """The run's spec-decode counter deltas (None for AR)."""
    if rec.mode == "ar":
        return None
    from psdlab.analysis.formats import vllm_metrics
    c = vllm_metrics.read_delta(rec.metrics_before, rec.metrics_after)
    return {"num_drafts": c.num_drafts, "num_draft_tokens": c.num_draft_tokens,
            "num_accepted_tokens": c.num_accepted_tokens,
            "accepted_per_pos": list(c.accepted_per_pos)}


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas:
        return None
    return pred / meas - 1.0


def noise(values: Sequence[float | None]) -> float | None:
    """Run-to-run spread of repeats: (max - min) / mean."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or not statistics.fmean(vals):
        return None
    return (max(vals) - min(vals)) / statistics.fmean(vals)


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
             drafter_to_target_ratio: float | None = None) -> dict[str, Any]:
    """Fit on the runs of configuration ``calibration``, predict every configuration (the
    calibration one in-sample), compare; the results document's body."""
    from psdlab.validation.serving_results.calibration import fit_from_bench
    from psdlab.validation.serving_results.predict import predict_bench

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
    workload = cal[0].result
    configs: dict[str, list[RunRecord]] = {}
    for r in runs:
        configs.setdefault(r.config, []).append(r)
    rows: list[dict[str, Any]] = []
    for name, reps in configs.items():
        first = reps[0]
        meas_each = [measured(r) for r in reps]
        meas = {m: _mean([x[m] for x in meas_each]) for m in METRICS}
        try:
            pred_doc = predict_bench(fit, workload, mode=first.mode, k=first.k,
                                     request_rate=first.request_rate, max_concurrency=None,
                                     seed=seed)
            why = None
        except ValueError as exc:      # e.g. SD from a fit that saw no speculation
            pred_doc, why = {}, str(exc).splitlines()[0]
        pred = {m: (None if first.mode == "ar" and m == "spec_decode_acceptance_length"
                    else _num(pred_doc.get(m))) for m in METRICS}
        expected = (pred_doc.get("psdlab", {}).get("prediction", {})
                    .get("expected_acceptance_length"))
        if first.mode != "ar" and expected is not None:
            # the fitted acceptance's expectation, not one simulated run's draw of it
            pred["spec_decode_acceptance_length"] = _num(expected)
        rows.append({
            "config": name, "mode": first.mode, "k": first.k,
            "request_rate": first.request_rate,
            "role": "calibration" if in_calibration(name, calibration) else "held-out",
            "repeats": len(reps), "measured": meas, "predicted": pred,
            "not_predicted": why,
            "error": {m: _err(pred[m], meas[m]) for m in METRICS},
            "noise": {m: noise([x[m] for x in meas_each]) for m in METRICS},
            "measured_repeats": meas_each, "counters": [counters(r) for r in reps],
            "load_before": [r.load_before for r in reps],
            "results": [r.result for r in reps]})
    held = [r for r in rows if r["role"] == "held-out"]
    within = {m: [abs(r["error"][m]) <= GOAL for r in held if r["error"][m] is not None]
              for m in METRICS}
    judged = [(r["error"][m], r["noise"][m]) for r in held for m in METRICS
              if r["error"][m] is not None]
    misses = [(e, n) for e, n in judged if abs(e) > GOAL]
    span = _counter_span(list(runs), cal, calibration) if sd else None
    return {"calibration": calibration,
            "calibration_configs": sorted({r.config for r in cal}),
            "goal": GOAL, "fit": fit.to_dict(),
            "drafter_to_target_ratio": ratio,
            "notes": [span] if span else [],
            "rows": rows,
            "held_out": {"judged": len(judged),
                         "within_goal": sum(abs(e) <= GOAL for e, _ in judged),
                         "with_repeat_noise": sum(n is not None for _, n in judged),
                         "misses_beyond_noise": sum(n is not None and abs(e) > n
                                                    for e, n in misses),
                         "misses_within_noise": sum(n is not None and abs(e) <= n
                                                    for e, n in misses),
                         "misses_noise_unmeasured": sum(n is None for _, n in misses)},
            "summary": {m: {"held_out_within_goal": sum(v), "held_out_compared": len(v),
                            "max_abs_error": max((abs(r["error"][m]) for r in held
                                                  if r["error"][m] is not None), default=None)}
                        for m, v in within.items()}}


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


def _provenance(doc: Mapping[str, Any]) -> list[str]:
    """Where and when (lines for the markdown), when the document says."""
    if "machine" not in doc:
        return []
    m, g = doc["machine"], doc.get("git") or {}
    loads = [r["load_before"][0] for r in doc.get("runs", []) if r.get("load_before")]
    load = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "not recorded"
    lines = [f"Measured {doc.get('date')} on {m.get('cpu_model')} ({m.get('cpus')} CPUs; "
             f"{', '.join(m.get('cpu_flags') or [])}), {doc.get('vllm_version')}, commit "
             f"{g.get('short')} ({g.get('tree')}). Other jobs shared the cores: 1-minute load "
             f"average before the runs {load}.", ""]
    again = doc.get("rejudged")
    if again:
        rg = again.get("git") or {}
        lines += [f"Re-judged without a server {again.get('date')} at commit {rg.get('short')} "
                  f"({rg.get('tree')}): `{doc.get('command')}`.", ""]
    return lines


def _calibration(doc: Mapping[str, Any]) -> list[str]:
    """What the fit saw and why (lines for the markdown)."""
    configs = doc.get("calibration_configs") or [doc["calibration"]]
    how = ("every rate of one server, fitted jointly" if len(configs) > 1
           else "one configuration")
    line = f"Calibration: {', '.join(configs)} ({how})."
    if doc.get("calibration_rule"):
        line += (" Chosen by the default rule, stated before any held-out error was seen: "
                 f"{doc['calibration_rule']}." if doc.get("calibration_default")
                 else " Chosen with --calibration.")
    return [line, ""]


def _mark(r: Mapping[str, Any], m: str, goal: float) -> str:
    err, spread = r["error"][m], r["noise"][m]
    if r["role"] != "held-out" or err is None:
        return ""
    if abs(err) <= goal:
        return " ok"
    if spread is None:
        return " MISS"
    return " MISS (within noise)" if abs(err) <= spread else " MISS (beyond noise)"


def check_markdown(doc: Mapping[str, Any]) -> str:
    """The predicted-vs-measured table (one line per configuration and figure)."""
    lines = [f"# psdlab check-vllm: calibrated on `{doc['calibration']}`, predicting the others",
             "", *_calibration(doc),
             f"Goal: |error| <= {100 * doc['goal']:.0f}% on every held-out figure (each of "
             "the four on every held-out configuration; acceptance length where it "
             "speculates). Repeat noise: (max - min) / mean over a configuration's repeats "
             "(- : run once).", "",
             *_provenance(doc),
             "| configuration | role | figure | measured | predicted | error | repeat noise |",
             "|---|---|---|---|---|---|---|"]
    order = sorted(doc["rows"], key=lambda r: (r["role"] != "calibration", r["config"]))
    for r in order:
        for m, label in METRICS.items():
            if r["measured"][m] is None and r["predicted"][m] is None:
                continue
            lines.append(f"| {r['config']} | {r['role']} (x{r['repeats']}) | {label} | "
                         f"{_f(r['measured'][m], '.4g')} | {_f(r['predicted'][m], '.4g')} | "
                         f"{_pct(r['error'][m])}{_mark(r, m, doc['goal'])} | "
                         f"{_pct(r['noise'][m]).lstrip('+')} |")
    lines += [f"\n{r['config']}: not predicted ({r['not_predicted']})" for r in order
              if r.get("not_predicted")]
    lines += ["", "Held-out figures within the goal: " + ", ".join(
        f"{METRICS[m]} {s['held_out_within_goal']}/{s['held_out_compared']}"
        for m, s in doc["summary"].items())]
    h = doc.get("held_out")
    if h:
        misses = h["judged"] - h["within_goal"]
        lines[-1] += f"; {h['within_goal']} of {h['judged']} in all."
        lines += ["", f"Repeat noise measured for {h['with_repeat_noise']} of {h['judged']} "
                  f"held-out figures (a configuration run once has none). Of the {misses} "
                  f"misses, {h['misses_beyond_noise']} exceed their repeat noise, "
                  f"{h['misses_within_noise']} lie within it, {h['misses_noise_unmeasured']} "
                  f"have no repeat noise measured."]
    notes = list(doc.get("notes") or []) + list((doc.get("fit") or {}).get("notes") or [])
    if notes:
        lines += ["", "What the calibration could and could not identify (the fit's notes):", ""]
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
