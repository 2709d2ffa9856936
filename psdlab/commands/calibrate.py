"""`psdlab calibrate TRACE... -o MODEL.json`: fit the simulator's cost and acceptance models to
psdlab traces and MineDraft trace files (told apart by content), print the coefficients with
95% confidence intervals and held-out errors, and write the model file the simulator loads
(``{"name": "fitted", "path": MODEL.json, "role": ...}``).  The file also holds what a replay
needs beyond the fits (overlap contention, controller overhead, step-time spread:
``meta.replay``), so `psdlab validate --model MODEL.json` uses it as the demo does.

Given serving-benchmark results instead (vLLM ``bench serve --save-result --save-detailed``
JSON, SGLang ``bench_serving --output-details`` JSONL; told by content), it fits the step
costs by replaying their requests through the simulator and the acceptance per position from
their spec-decode figures or ``--metrics-before/--metrics-after`` ``/metrics`` snapshots
(``validation.bench_calibrate``), and says what those inputs can and cannot identify."""
from __future__ import annotations

import argparse
import json
import os
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="fit simulator cost/acceptance models to traces",
        description="Fit the simulator's cost models (verify, draft, prefill time) and "
                    "acceptance models (per-position rates, per-request Beta spread; from "
                    "greedy traces also each request's match pattern, the default model, "
                    "which predicts the acceptance of those requests at any k) to "
                    "psdlab traces or MineDraft trace files, with 95% confidence intervals "
                    "and held-out errors; warn when a held-out error is above 10%.")
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="psdlab trace (.jsonl) or MineDraft trace file; format detected by "
                        "content")
    p.add_argument("-o", "--output", required=True, metavar="MODEL.json",
                   help="where to write the calibrated model")
    p.add_argument("--context-probe", metavar="FILE", default=None,
                   help="a context probe's result (context_probe.json, written beside the "
                        "traces by psdlab demo: the same passes timed at two contexts); fixes "
                        "the decode fits' context slopes (default: the context_probe.json in "
                        "the first trace's folder, when there is one)")
    p.add_argument("--holdout", type=float, default=0.2, metavar="F",
                   help="fraction of phases held out to measure the fit error, in [0, 0.9] "
                        "(default 0.2; 0 = no held-out error)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split and "
                                                       "bootstraps (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the "
                                                       "table")
    g = p.add_argument_group("serving-benchmark results (vLLM / SGLang) as input")
    g.add_argument("--metrics-before", metavar="FILE", default=None,
                   help="vLLM /metrics text scraped before the speculative runs")
    g.add_argument("--metrics-after", metavar="FILE", default=None,
                   help="vLLM /metrics text scraped after them (acceptance per position from "
                        "the counters' difference)")
    g.add_argument("--config", metavar="CONFIG.toml", default=None,
                   help="simulator config whose [server] (max sequences, KV blocks, k) the "
                        "replays use (default: 256 sequences, unlimited KV)")
    g.add_argument("--bootstrap", type=int, default=20, metavar="B",
                   help="bootstrap replicates for the intervals, 2..10000 (default 20)")
    g.add_argument("--drafter-ratio", type=float, default=None, metavar="R",
                   help="structural prior: a drafter forward costs R x a target forward "
                        "(every coefficient), R in (0, 10]; identifies the split of "
                        "speculative runs between the models when no AR run is given")
    g.add_argument("--target-config", metavar="CONFIG.json", default=None,
                   help="the target's Hugging Face config.json (or its folder); with "
                        "--draft-config, R from the two models' matmul weights")
    g.add_argument("--draft-config", metavar="CONFIG.json", default=None,
                   help="the drafter's Hugging Face config.json (or its folder)")
    p.set_defaults(func=run)


def _run_bench(args: argparse.Namespace) -> int:
    from psdlab.validation.bench_calibrate import describe, fit_from_bench

    fit = fit_from_bench(args.traces, metrics_before=args.metrics_before,
                         metrics_after=args.metrics_after, base_config=args.config,
                         seed=args.seed, bootstrap=args.bootstrap,
                         drafter_to_target_ratio=args.drafter_ratio,
                         target_config=args.target_config, draft_config=args.draft_config)
    fit.save(args.output)
    if args.json:
        print(describe(fit))
        return 0
    print(f"calibrated on {len(args.traces)} bench result(s); intervals: {fit.interval_method}")
    print(f"{'coefficient':<22}{'estimate':>12}  {'95% interval':<26}unit")
    for role, cost in (("target", fit.target_cost), ("drafter", fit.drafter_cost)):
        for term in ("base", "per_seq", "per_token", "per_context"):
            name = f"{role}.{term}"
            if cost is None or name not in fit.intervals:
                continue
            lo, hi = fit.intervals[name]
            print(f"{name:<22}{1e3 * float(cost[term]):>12.4g}  "
                  f"[{1e3 * lo:.4g}, {1e3 * hi:.4g}]".ljust(62) + _UNITS[term])
    for i, p in enumerate(fit.acceptance_per_position or (), start=1):
        lo, hi = fit.intervals.get(f"acceptance.p{i}", (p, p))
        print(f"acceptance position {i}: {p:.3f} [{lo:.3f}, {hi:.3f}] (share of drafts)")
    for path, err in fit.fit_error.items():
        print(f"fit on {path}: mean TTFT {err['mean_ttft_ms_fitted']:.4g} ms vs measured "
              f"{err['mean_ttft_ms_measured']:.4g} ({100 * err['ttft_error']:+.1f}%), mean TPOT "
              f"{err['mean_tpot_ms_fitted']:.4g} ms vs {err['mean_tpot_ms_measured']:.4g} "
              f"({100 * err['tpot_error']:+.1f}%)")
    if fit.drafter_to_target_ratio is not None:
        print(f"structural prior: drafter = {fit.drafter_to_target_ratio:.4g} x target")
    for note in fit.notes:
        print(f"note: {note}")
    print(f"wrote {args.output}")
    return 0


def _ms(x: float | None) -> str:
    return "inf" if x is None or x == float("inf") else f"{1e3 * x:.4g}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


_UNITS = {"base": "ms", "per_seq": "ms/seq", "per_token": "ms/token",
          "per_context": "ms/ctx token"}


def _cost_lines(fits: dict) -> list[str]:
    from psdlab.validation.phase_model import FITS
    lines = [f"{'fit':<16}{'role':<9}{'term':<13}{'estimate':>12}  {'95% CI':<24}unit"]
    for name, fit in fits.items():
        for term in ("base", "per_seq", "per_token", "per_context"):
            lo, hi = fit["ci95"][term]
            est = _ms(fit["coef"][term]) if fit["identified"][term] else "-"
            ci = f"[{_ms(lo)}, {_ms(hi)}]" if fit["identified"][term] else "(not identified)"
            lines.append(f"{name:<16}{FITS[name][0]:<9}{term:<13}{est:>12}  {ci:<24}"
                         f"{_UNITS[term]}")
        lines.append(f"{'':<16}held-out error {_pct(fit['heldout_error'])} per phase, "
                     f"{_pct(fit['heldout_total_error'])} on the total "
                     f"({fit['n_heldout']} of {fit['n']} phases held out)")
    return lines


def _acceptance_lines(acc: dict | None) -> list[str]:
    if acc is None:
        return ["acceptance: no verified draft tokens in the traces"]
    lines = [f"acceptance ({acc['method']}, {acc['n_rows']} verified sequences, "
             f"{acc['n_requests']} requests): VSR {acc['vsr']:.3f}"]
    for j, (rate, (lo, hi)) in enumerate(zip(acc["rates"], acc["rates_ci95"]), start=1):
        lines.append(f"  position {j}: {rate:.3f} [{lo:.3f}, {hi:.3f}]")
    lo, hi = acc["mean_ci95"]
    beta = f"  per-request Beta: mean {acc['mean']:.3f} [{lo:.3f}, {hi:.3f}]"
    if acc["concentration"] is not None:
        clo, chi = acc["concentration_ci95"]
        beta += f", concentration {acc['concentration']:.3g} [{clo:.3g}, {chi:.3g}]"
    else:
        beta += ", concentration not identified"
    lines.append(beta)
    mp = acc.get("match_patterns")
    if mp:
        lines.append(f"  greedy match patterns (default model): {mp['requests']} requests, "
                     f"{100 * mp['coverage']:.0f}% of their positions seen, "
                     f"{mp['conflicts']} disagreements between runs; unseen positions and "
                     f"requests use the per-position rates")
    return lines


def _replay_lines(rp: dict | None) -> list[str]:
    if not rp:
        return []
    return [f"replay: controller overhead per decode step {1e3 * rp['overhead_serial']:.2f} ms "
            f"serial, {1e3 * rp['overhead_overlapped']:.2f} ms overlapped; overlap "
            f"contention (share of solo speed lost while the other device runs) target "
            f"{rp['contention_target']:+.3f}, drafter {rp['contention_drafter']:+.3f}; step-time "
            f"jitter CV {rp['jitter_cv']:.3f}; proposals capped at the output budget: "
            f"{'yes' if rp.get('draft_cap') else 'no'}"]


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_range
    from psdlab.validation.calibrate import calibrate
    from psdlab.validation.context_slopes import read_probe, read_probe_file
    from psdlab.validation.importers import load_traces
    from psdlab.validation.model_file import write_model

    from psdlab.validation.bench_replay import bench_inputs

    if bench_inputs(args.traces):
        return _run_bench(args)
    if (args.metrics_before or args.metrics_after or args.config
            or args.drafter_ratio is not None or args.target_config or args.draft_config):
        raise ValueError("--metrics-before/--metrics-after/--config/--drafter-ratio/"
                         "--target-config/--draft-config: only with vLLM or SGLang bench "
                         "results as input")
    holdout = check_range("--holdout", args.holdout, 0.0, 0.9)
    traces = [t for path in args.traces for t in load_traces(path)]
    probe = (read_probe_file(args.context_probe) if args.context_probe else
             read_probe(os.path.dirname(os.path.abspath(args.traces[0]))))
    cal = calibrate(traces, holdout=holdout, seed=args.seed, context_probe=probe)
    model = write_model(args.output, cal, traces=list(args.traces), holdout=holdout,
                        seed=args.seed)
    if args.json:
        print(json.dumps({"output": args.output, "n_traces": len(traces), **model},
                         allow_nan=False))
        return 0
    meta = model["meta"]
    info = meta["calibration"]
    print(f"calibrated on {len(traces)} trace(s) (sources: {', '.join(info['sources'])}; "
          f"k: {', '.join(map(str, info['k']))}; m: {', '.join(map(str, info['m']))})")
    print("\n".join(_cost_lines(meta["fits"]) + _acceptance_lines(meta["acceptance_fit"])
                    + _replay_lines(meta.get("replay"))))
    for note in info["notes"]:
        print(f"note: {note}")
    for warning in info["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {args.output}")
    return 0
