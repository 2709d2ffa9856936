"""`psdlab plan CONFIG.toml`: capacity planning with the simulator -- for each mode x k x m x
drafter (x replicas) the highest request rate that meets a latency SLO and the tokens/s per
device, with the Pareto set (devices vs sustainable rate) as a table and a CSV."""
from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan", help="highest sustainable request rate under an SLO, per configuration",
        description="Sweep the [plan] table of a simulator config (modes, k, m, drafters, "
                    "replicas, slo = {ttft_p99 = ..., tpot_p50 = ...}, requests, iterations) "
                    "and bisect on the Poisson rate; see sim/capacity.py and "
                    "sim/configs/plan_example.toml.")
    p.add_argument("config", help="simulator config (.toml) with a [plan] table")
    p.add_argument("--jobs", type=int, help="worker processes (default: plan.jobs or 1)")
    p.add_argument("--csv", metavar="PATH", help="CSV of all rows (default: plan.csv)")
    p.add_argument("--requests", type=int, help="requests per trial (overrides plan.requests)")
    p.add_argument("--workload", metavar="FILE",
                   help="plan on the requests of FILE (a vLLM or SGLang bench result, an Azure, "
                        "BurstGPT or Mooncake trace, ...: psdlab.analysis.formats): their "
                        "lengths and arrival pattern, scaled in rate, instead of Poisson")
    p.add_argument("--format", metavar="F", help="FILE's format (default: told by content)")
    p.add_argument("--all", action="store_true", help="print every row, not only the Pareto set")
    p.add_argument("--json", action="store_true", help="one JSON object with all rows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import os

    from psdlab.analysis.checks import check_int
    from psdlab.sim.sim_config import config_from_dict, read_toml
    from psdlab.sim.capacity import format_table, parse_plan, run_plan, write_csv

    raw = read_toml(args.config)
    cfg = config_from_dict(raw, os.path.dirname(os.path.abspath(args.config)))
    if args.workload is not None:
        cfg = cfg.replace(workload={"name": "file", "path": args.workload,
                                    **({"format": args.format} if args.format else {})})
    elif args.format is not None:
        raise ValueError("--format: only with --workload")
    spec = parse_plan(raw.get("plan"), cfg)
    if args.requests is not None:
        spec = dataclasses.replace(spec, requests=check_int("--requests", args.requests, 10))
    jobs = check_int("--jobs", args.jobs, 1, 256) if args.jobs is not None else spec.jobs
    rows = run_plan(cfg, spec, jobs, progress=sys.stderr.isatty() and not args.json)
    csv_path = args.csv or spec.csv
    if csv_path:
        write_csv(rows, csv_path)
    if args.json:
        print(json.dumps({"rows": rows, "csv": csv_path}, sort_keys=True))
        return 0
    slo = ", ".join(f"{mt} {st} <= {b:g} s" for mt, st, b in spec.slo)
    print(f"SLO: {slo}; {spec.requests} requests per trial, {spec.iterations} bisection steps")
    print(format_table(rows, only_pareto=not args.all))
    if csv_path:
        print(f"csv: {csv_path}")
    return 0
