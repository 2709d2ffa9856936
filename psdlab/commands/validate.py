"""`psdlab validate --model MODEL.json TRACE...`: replay measured workloads in the calibrated
simulator and print predicted vs measured (throughput, TTFT / TPOT / end-to-end mean, p50, p90,
p99, acceptance) per trace, plus the PSD/SD gain (simulator and closed form) for every SD and
PSD trace of the same workload; ``-o DIR`` also writes the report folder (markdown, CSVs,
figures).

Given vLLM / SGLang serving-benchmark results as the measurements (and a model file from
`psdlab calibrate` on bench results), it predicts each run -- its arrivals, lengths,
concurrency cap, mode and k -- and prints predicted vs measured in vLLM bench's keys and
units with the error (``validation.serving_results.compare_results``).  This module parses the
arguments and prints; ``validation.validate_command`` does the rest."""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="predicted vs measured: replay traces in the calibrated simulator",
        description="Replay each measured trace's workload (same arrivals, prompt and output "
                    "lengths) in the simulator calibrated by `psdlab calibrate`, and compare "
                    "throughput, TTFT, TPOT and end-to-end latency (mean/p50/p90/p99) and "
                    "acceptance with the measurement; for an SD and a PSD trace of the same "
                    "workload also the PSD/SD gain, from the simulator and the closed form. "
                    "Traces named NAME_rN (same mode and workload) are repeats of NAME and "
                    "are compared as one: the median over them, with their spread.")
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="measured trace (psdlab JSONL or MineDraft trace file)")
    p.add_argument("--model", required=True, metavar="MODEL.json",
                   help="calibrated model file written by `psdlab calibrate`")
    p.add_argument("-o", "--output", default=None, metavar="DIR",
                   help="also write the report folder here (report.md, CSVs, PNG figures)")
    p.add_argument("--seeds", type=int, default=5,
                   help="simulator runs per trace, averaged (1..50, default 5)")
    p.add_argument("--raw", action="store_true",
                   help="ignore the controller overhead and overlap slowdown stored in the "
                        "model file (meta.replay, written by `psdlab demo`)")
    p.add_argument("--acceptance", default=None, metavar="NAME",
                   help="acceptance model of the model file to use (positional, beta, "
                        "geometric; default: the file's default)")
    p.add_argument("--all-rows", action="store_true",
                   help="print every metric, not only the headline ones")
    p.add_argument("--json", action="store_true", help="print the table as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.validation.validate_command import validate_command
    printout = validate_command(args.model, args.traces, seeds=args.seeds, output=args.output,
                                raw=args.raw, acceptance=args.acceptance,
                                all_rows=args.all_rows, as_json=args.json)
    for line in printout.out:
        print(line)
    for line in printout.err:
        print(line, file=sys.stderr)
    return 0
