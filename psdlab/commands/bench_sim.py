"""`psdlab bench-sim`: how fast the simulator runs (simulated requests and events per wall
second) on a fixed ShareGPT-like PSD workload; the setup is in sim/speed_bench.py and is printed."""
from __future__ import annotations

import argparse
import sys

from psdlab.analysis.json_out import finite_json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-sim", help="simulator speed: simulated requests and events per wall second",
        description="Simulate N ShareGPT-like requests in PSD mode (m = 16 per batch, k = 4, "
                    "Qwen3-32B on 4x L40 / Qwen3-1.7B, roofline costs, Poisson arrivals at "
                    "LOAD x the measured saturated throughput) and report the speed.")
    p.add_argument("--requests", type=int, default=100_000, help="requests (default 100000)")
    p.add_argument("--load", type=float, default=1.0,
                   help="arrival rate as a fraction of the saturated throughput (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--path", choices=("fast", "simpy"), default="fast",
                   help="execution path to time (default fast)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object (keys requests_per_s, events_per_s, ...)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.sim.speed_bench import run_speed_bench, speed_text

    out = run_speed_bench(args.requests, args.load, args.seed, args.path,
                    progress=sys.stderr.isatty() and not args.json)
    print(finite_json(out, sort_keys=True) if args.json else speed_text(out))
    return 0
