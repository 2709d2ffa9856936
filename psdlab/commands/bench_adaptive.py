"""`psdlab bench-adaptive -o DIR`: the adaptive policy against every fixed configuration on the
real CPU pair, at several loads (validation.adaptive.bench_adaptive)."""
from __future__ import annotations

import argparse

from psdlab.analysis.json_out import finite_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-adaptive", help="measure the adaptive policy against fixed AR / SD / PSD by load",
        description="On the real CPU pair (drafter and target on their own cores): an offline "
                    "batch and Poisson arrivals at low, medium and high rates, each served by "
                    "AR, SD(k), PSD(k) and the adaptive policy on the same prompts; before the "
                    "runs the simulator predicts each load's winner; writes results.json and "
                    "throughput_vs_load.png to DIR.")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--depth", type=int, default=30,
                   help="the drafter: an early exit of the target at this many layers (30)")
    p.add_argument("--k", type=int, default=3, help="draft tokens per step (default 3)")
    p.add_argument("--m", type=int, default=4,
                   help="most sequences running (PSD: two batches of m/2; default 4)")
    p.add_argument("--requests", type=int, default=8, help="requests per load (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=24, help="tokens per request (24)")
    p.add_argument("--no-repeat", action="store_true",
                   help="skip the repeat of the offline load (the noise estimate)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_int, check_output_path
    from psdlab.validation.adaptive.adaptive_results import BenchPlan
    check_output_path("--output", args.output, folder=True)     # before any model loads
    from psdlab.validation.adaptive.bench_adaptive import (format_adaptive_bench_report,
                                                           run_adaptive_bench)
    plan = BenchPlan(depth=check_int("--depth", args.depth, 1, 64),
                     k=check_int("--k", args.k, 1, 16), m=check_int("--m", args.m, 2, 64),
                     requests=check_int("--requests", args.requests, 1, 1000),
                     max_new_tokens=check_int("--max-new-tokens", args.max_new_tokens, 2, 512),
                     repeat=not args.no_repeat)
    result = run_adaptive_bench(args, plan)
    print(finite_json(result.to_dict(), sort_keys=True) if args.json
          else format_adaptive_bench_report(result))
    return 0
