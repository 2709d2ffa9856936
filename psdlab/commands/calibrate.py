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
(``validation.serving_results.calibration``), and says what those inputs can and cannot identify.

From traces it also chooses the acceptance model for prompts the calibration never served
(cross-validation over the calibration prompts and the acceptance pool's, as the demo does:
``validation.acceptance.cross_validation``), the file's default acceptance; the demo's
``model.json`` is this command's file for the same traces.  This module parses the arguments and
prints; ``validation.calibrate_report.calibrate_command`` does the rest."""
from __future__ import annotations

import argparse
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
    p.add_argument("--corun-probe", metavar="FILE", default=None,
                   help="a co-run probe's record (corun_probe.json: psdlab probe, or written "
                        "beside the traces by psdlab demo): PSD is then predicted from it and "
                        "the AR / SD traces alone, traces with overlapped (PSD) steps are left "
                        "out (default: the corun_probe.json in the first trace's folder, when "
                        "there is one; 'none': never)")
    p.add_argument("--holdout", type=float, default=0.2, metavar="F",
                   help="fraction of phases held out to measure the fit error, in [0, 0.9] "
                        "(default 0.2; 0 = no held-out error)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split and "
                                                       "bootstraps (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the "
                                                       "table")
    p.add_argument("--acceptance-pool", metavar="FILE", default=None,
                   help="an acceptance pool (acceptance_pool.json, written by psdlab demo: "
                        "greedy match patterns of calibration-side prompts no run served), "
                        "data for choosing the acceptance model for new prompts (default: "
                        "the acceptance_pool.json of the folder above the first trace's, a "
                        "demo's REPORT_DIR, when there is one)")
    p.add_argument("--no-acceptance-selection", action="store_true",
                   help="do not choose the acceptance model for new prompts by "
                        "cross-validation (faster: the cross-validation takes seconds to "
                        "tens of seconds on 2 cores, benchmarks/calibrate_speed.py); the "
                        "file's default "
                        "acceptance is then the calibration requests' match patterns or the "
                        "per-position rates")
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


def run(args: argparse.Namespace) -> int:
    from psdlab.validation.calibrate_report import BenchOptions, calibrate_command
    printout = calibrate_command(
        args.traces, args.output, holdout=args.holdout, seed=args.seed,
        context_probe=args.context_probe, corun_probe=args.corun_probe,
        acceptance_pool=args.acceptance_pool,
        select_acceptance=not args.no_acceptance_selection, as_json=args.json,
        bench=BenchOptions(metrics_before=args.metrics_before, metrics_after=args.metrics_after,
                           config=args.config, bootstrap=args.bootstrap,
                           drafter_ratio=args.drafter_ratio, target_config=args.target_config,
                           draft_config=args.draft_config))
    for line in printout.out:
        print(line)
    for line in printout.err:
        print(line, file=sys.stderr)
    return 0
