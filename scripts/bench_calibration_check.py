"""Does the calibration from serving-benchmark results recover a known engine?

Simulates vLLM-bench-shaped results (``vllm_bench_write``) from a known affine step cost
(target, and a drafter for SD) with gamma step-time jitter, at two AR and two SD request
rates, calibrates on them (``validation.serving_results.calibration.fit_from_bench``: the same code
as ``psdlab calibrate R.json ...``), and writes per coefficient the truth, the estimate, its 95%
interval and whether the interval holds the truth, the acceptance per position, the fit's
mean-latency errors, then predicts a held-out AR and SD rate (``predict_bench``) against a
fresh simulation of the truth there.  Synthetic: it checks the method, not any machine.

    .venv/bin/python scripts/bench_calibration_check.py -o results/bench_calibration
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

from psdlab.analysis.formats.vllm_bench_write import write_bench_result
from psdlab.sim.sim_config import config_from_dict
from psdlab.validation.serving_results.calibration import fit_from_bench
from psdlab.validation.serving_results.predict import predict_bench, simulated_bench
from psdlab.validation.results_file import git_info, machine_info

TARGET: dict[str, Any] = {"name": "affine", "base": 0.012, "per_seq": 0.0006, "per_token": 4e-5,
          "per_context": 0.0}
DRAFTER: dict[str, Any] = {"name": "affine", "base": 0.002, "per_token": 1e-4}
RATES = [0.85, 0.6, 0.4]
CALIBRATION = ("ar_4", "ar_20", "sd_4", "sd_16")
HELDOUT = ("ar_12_heldout", "sd_10_heldout")
KEYS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput", "spec_decode_acceptance_length")


def config(mode: str, rate: float, n: int, seed: int, jitter: float):
    raw: dict[str, Any] = {
        "seed": seed, "requests": n, "server": {"mode": mode, "k": 3 if mode != "ar" else 0,
                                                "m": 256, "first_token": "step"},
        "target": {"name": "target", "cost": TARGET},
        "workload": {"name": "poisson", "rate": rate,
                     "prompt": {"name": "lognormal", "mean": 300, "median": 250, "max": 1000},
                     "output": {"name": "lognormal", "mean": 60, "median": 50, "max": 200}},
        "jitter": {"dist": "gamma", "cv": jitter}}
    if mode != "ar":
        raw["drafter"] = {"name": "drafter", "cost": DRAFTER}
        raw["acceptance"] = {"name": "positional", "rates": RATES}
    return config_from_dict(raw)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--out", required=True, help="folder for the results file")
    p.add_argument("--requests", type=int, default=100, help="requests per run (default 100)")
    p.add_argument("--bootstrap", type=int, default=20)
    p.add_argument("--jitter", type=float, default=0.05, help="step-time CV of the truth")
    args = p.parse_args(argv)
    load0 = list(os.getloadavg())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        runs = {"ar_4": ("ar", 4.0), "ar_20": ("ar", 20.0), "sd_4": ("sd", 4.0),
                "sd_16": ("sd", 16.0), "ar_12_heldout": ("ar", 12.0),
                "sd_10_heldout": ("sd", 10.0)}
        paths = {}
        for i, (name, (mode, rate)) in enumerate(runs.items()):
            paths[name] = os.path.join(d, f"{name}.json")
            write_bench_result(paths[name], simulated_bench(
                config(mode, rate, args.requests, 1 + i, args.jitter), request_rate=rate))
        fit = fit_from_bench([paths[n] for n in CALIBRATION],
                             bootstrap=args.bootstrap,
                             target_terms=("base", "per_seq", "per_token"))
        coefs = []
        for role, truth, est in (("target", TARGET, fit.target_cost),
                                 ("drafter", DRAFTER, fit.drafter_cost or {})):
            for term in ("base", "per_seq", "per_token"):
                name = f"{role}.{term}"
                if name not in fit.intervals:
                    continue
                lo, hi = fit.intervals[name]
                coefs.append({"coefficient": name, "truth": truth[term], "estimate": est[term],
                              "ci95": [lo, hi], "covered": lo <= truth[term] <= hi,
                              "error": est[term] / truth[term] - 1.0})
        shares = [math.prod(RATES[:i + 1]) for i in range(len(RATES))]
        acceptance = [{"position": i + 1, "truth": s, "estimate": e,
                       "ci95": list(fit.intervals[f"acceptance.p{i + 1}"])}
                      for i, (s, e) in enumerate(zip(shares, fit.acceptance_per_position or ()))]
        held: list[dict[str, Any]] = []
        for name in HELDOUT:
            mode = runs[name][0]
            measured = json.load(open(paths[name]))
            pred = predict_bench(fit, paths[name], mode=mode, k=3, request_rate=None,
                                 max_concurrency=None, seed=0)
            held.append({"run": name, **{k: {"predicted": pred.get(k), "truth": measured.get(k),
                                             "error": (pred[k] / measured[k] - 1.0)
                                             if pred.get(k) and measured.get(k) else None}
                                         for k in KEYS if measured.get(k) is not None}})
    doc: dict[str, Any] = {
           "what": "bench calibration on synthetic vLLM-bench results of a known engine",
           "command": "python scripts/bench_calibration_check.py " + " ".join(argv or
                                                                              sys.argv[1:]),
           "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
               timespec="seconds"),
           "machine": machine_info(load0), "git": git_info(),
           "note": "other jobs shared the CPU cores; wall time is not a benchmark",
           "wall_s": time.perf_counter() - t0,
           "settings": {"requests_per_run": args.requests, "bootstrap": args.bootstrap,
                        "jitter_cv": args.jitter, "calibration_runs": list(CALIBRATION),
                        "heldout_runs": list(HELDOUT)},
           "interval_method": fit.interval_method, "coefficients": coefs,
           "acceptance": acceptance, "fit_error": fit.fit_error, "heldout": held,
           "notes": list(fit.notes)}
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, f"synthetic_check-{doc['date_utc'][:10]}-n{args.requests}-"
                                 f"cv{args.jitter:g}.json")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, allow_nan=False, default=str)
    os.replace(tmp, out)
    for c in coefs:
        print(f"{c['coefficient']:<18} truth {c['truth']:.4g}  est {c['estimate']:.4g}  "
              f"[{c['ci95'][0]:.4g}, {c['ci95'][1]:.4g}]  covered={c['covered']}")
    for h in held:
        print(h["run"], {k: round(v["error"], 3) for k, v in h.items()
                         if isinstance(v, dict) and v["error"] is not None})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
