"""`psdlab policy CONFIG`: where the adaptive policy (analysis.adaptive_policy) switches between
AR, SD(k) and PSD(k) -- by running-batch size (its thresholds) and, with --rates, by request
rate (the simulator's adaptive server against every fixed configuration, sim.policy_search).
This module parses the arguments and prints; ``validation.policy_command`` does the rest."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "policy", help="where the adaptive policy switches AR / SD / PSD and k, by batch and load",
        description="Read a simulator config (its [adaptive] table: the policy's settings; "
                    "server.m: most running sequences), print the policy's choice for each "
                    "running-batch size and, with --rates, simulate the adaptive server and "
                    "each fixed configuration (AR, SD k, PSD k on the same server) at each "
                    "Poisson rate and offline: throughput, TPOT p99, winner, switch points.")
    p.add_argument("config", help="simulator config (.toml)")
    p.add_argument("--rates", default=None, metavar="R[,R...]",
                   help="Poisson rates (req/s) to simulate (default: thresholds only)")
    p.add_argument("--max-n", type=int, default=None,
                   help="thresholds up to this many running sequences (default server.m)")
    p.add_argument("--m", type=int, default=None,
                   help="most running sequences (overrides server.m; PSD: two batches of m/2)")
    p.add_argument("--requests", type=int, default=None, help="requests per simulation")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write the report as JSON (with machine, date, commit)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.validation.policy_command import policy_command
    print(policy_command(args.config, rates=args.rates, max_n=args.max_n, m=args.m,
                         requests=args.requests, output=args.output, as_json=args.json))
    return 0
