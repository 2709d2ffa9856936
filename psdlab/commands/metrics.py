"""`psdlab metrics TRACE`: the metrics of a trace file (throughput, latency percentiles,
acceptance, overlap, idle time), as a readable summary or, with --json, one JSON object.
This module parses the arguments and prints; ``analysis.metrics.trace_metrics_text`` does the
rest."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "metrics", help="compute throughput, TTFT/TPOT/e2e, acceptance and overlap from a trace",
        description="Read a psdlab JSONL trace (runtime or simulator) and print its metrics.")
    p.add_argument("trace", help="trace file (.jsonl)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--steps-fraction", type=float, default=1.0, metavar="F",
                   help="decode throughput over the first F of the steps, 0 < F <= 1 "
                        "(the paper uses 0.7/0.8/1.0 to cut the drain tail; default 1.0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.metrics import trace_metrics_text

    print(trace_metrics_text(args.trace, args.steps_fraction, as_json=args.json))
    return 0
