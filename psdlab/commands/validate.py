"""`psdlab validate --model MODEL.json TRACE...`: replay measured workloads in the calibrated
simulator and print predicted vs measured (throughput, TTFT / TPOT / end-to-end mean, p50, p90,
p99, acceptance) per trace, plus the PSD/SD gain (simulator and closed form) for every SD and
PSD trace of the same workload; ``-o DIR`` also writes the report folder (markdown, CSVs,
figures).

Given vLLM / SGLang serving-benchmark results as the measurements (and a model file from
`psdlab calibrate` on bench results), it predicts each run -- its arrivals, lengths,
concurrency cap, mode and k -- and prints predicted vs measured in vLLM bench's keys and
units with the error (``validation.serving_results.compare_results``)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

SHOWN = ("throughput_tok_s", "ttft.mean", "ttft.p99", "tpot.mean", "tpot.p99", "e2e.mean",
         "e2e.p50", "e2e.p90", "e2e.p99", "acceptance_rate")


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


def _run_bench(args: argparse.Namespace, seeds: int) -> int:
    from psdlab.validation.serving_results.calibration import BenchFit
    from psdlab.validation.serving_results.compare_results import compare_bench, format_rows

    if args.output or args.raw or args.acceptance:
        raise ValueError("-o/--raw/--acceptance: not used with bench results as measurements")
    fit = BenchFit.load(args.model)
    rows = compare_bench(fit, args.traces, seeds=seeds)
    if args.json:
        print(json.dumps({"model": args.model, "seeds": seeds,
                          "rows": [r.to_dict() for r in rows]}, allow_nan=False))
        return 0
    print(format_rows(rows))
    return 0


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_int
    from psdlab.validation.serving_results.replay import bench_inputs
    from psdlab.validation.importers import load_traces
    from psdlab.validation.model_file import acceptance_spec, read_model
    from psdlab.validation.report import format_summary, format_table, write_report
    from psdlab.validation.validate import trace_name, validate

    seeds = check_int("--seeds", args.seeds, 1, 50)
    if bench_inputs(args.traces):
        return _run_bench(args, seeds)
    model = read_model(args.model)
    acceptance = acceptance_spec(model, args.acceptance) if args.acceptance else None
    named: list[tuple[str, Any]] = []
    used: set[str] = set()
    for path in args.traces:
        for tr in load_traces(path):
            named.append((trace_name(path, tr, used), tr))
    from psdlab.validation.replay_model import ReplayParams
    result = validate(args.model, named, seeds=range(seeds),
                      params=ReplayParams() if args.raw else None,
                      acceptance=acceptance)
    files = {}
    if args.output:
        files = write_report(args.output, result, named, title="psdlab validate report")
    if args.json:
        print(json.dumps({**result.to_dict(), "files": files}, allow_nan=False, default=str))
        return 0
    rows = result.rows if args.all_rows else [r for r in result.rows if r.metric in SHOWN
                                              or r.metric.startswith(("gain.", "speedup."))]
    print(format_table(rows))
    print()
    print(format_summary(result.summary()))
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if files:
        print(f"wrote {files['report']}")
    return 0
