"""`psdlab simulate CONFIG.toml`: run the SimPy simulator, write the trace, print the metrics
(from analysis.metrics, the same code that summarises real runs).  This module parses the
arguments and prints; ``sim.simulate_command.simulate_command`` does the rest."""
from __future__ import annotations

import argparse

from psdlab.cli_options import add_override_args
from psdlab.sim.simulate_command import RESULT_FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate", help="simulate AR / SD / PSD serving from a TOML config",
        description="Simulate a server (sim/configs/*.toml are examples), write the step-level "
                    "trace and print its metrics.")
    p.add_argument("config", help="simulator config (.toml)")
    add_override_args(p)
    p.add_argument("--trace", metavar="PATH",
                   help="trace file (default: trace.path of the config, else "
                        "CONFIG-NAME.trace.jsonl in the current directory)")
    p.add_argument("--trace-level", choices=("step", "request", "none"),
                   help="what the trace keeps (none/request: no step records, so step-based "
                        "metrics such as acceptance and overlap are null)")
    p.add_argument("--path", choices=("fast", "simpy"), default="fast",
                   help="fast: vectorised multi-step advance (default); simpy: one SimPy step "
                        "at a time (identical results, slower)")
    p.add_argument("--perfetto", metavar="PATH", help="also write a Chrome/Perfetto timeline")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--results-format", choices=RESULT_FORMATS, default="psdlab",
                   help="vllm-bench: also write the run as `vllm bench serve --save-result "
                        "--save-detailed` writes it (its keys and units; needs the step-level "
                        "trace, the default)")
    p.add_argument("--result-file", metavar="PATH", default=None,
                   help="where to write that result (default: CONFIG-NAME.vllm-bench.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.sim.simulate_command import SimulateOptions, simulate_command
    print(simulate_command(SimulateOptions(
        config=args.config, mode=args.mode, k=args.k, m=args.m, policy=args.policy,
        requests=args.requests, seed=args.seed, workload=args.workload, format=args.format,
        max_model_len=args.max_model_len, engine_step=args.engine_step, trace=args.trace,
        trace_level=args.trace_level, path=args.path, perfetto=args.perfetto,
        as_json=args.json, results_format=args.results_format,
        result_file=args.result_file)))
    return 0
