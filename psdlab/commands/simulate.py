"""`psdlab simulate CONFIG.toml`: run the SimPy simulator, write the trace, print the metrics
(from analysis.metrics, the same code that summarises real runs).  This module parses the
arguments and prints; ``sim.simulate_command.simulate_command`` does the rest."""
from __future__ import annotations

import argparse

from psdlab.cli_options import (DEPLOYMENT_OPTIONS, add_deployment_args, add_override_args,
                                 check_one_command, one_command_options)
from psdlab.sim.simulate_command import RESULT_FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate", help="simulate AR / SD / PSD serving from a TOML config",
        description="Simulate a server (sim/configs/*.toml are examples), write the step-level "
                    "trace and print its metrics.  Or in one command, no config: psdlab simulate "
                    "--target llama-3.1-8b --gpu h100 --workload bench.json (a vLLM bench "
                    "result's requests; the rest defaulted and printed).")
    p.add_argument("config", nargs="?", help="simulator config (.toml) (or --target, --gpu)")
    add_override_args(p)
    q = add_deployment_args(p, "a simulation")
    q.add_argument("--rate", type=float, metavar="REQ_S",
                   help="the built-in traffic at R req/s, Poisson (default: all at once)")
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
    from psdlab.sim.quick_plan import DEFAULT_ENGINE, Deployment
    from psdlab.sim.simulate_command import SimulateOptions, simulate_command
    given = one_command_options(args, (*DEPLOYMENT_OPTIONS, "rate"))
    quick = None
    if check_one_command(args, given, "simulate"):
        quick = Deployment(target=args.target, gpu=args.gpu, tp=1 if args.tp is None else args.tp,
                           drafter=args.drafter, drafter_gpu=args.drafter_gpu,
                           drafter_tp=(1 if args.drafter_tp is None
                                       else args.drafter_tp), alpha=args.alpha,
                           engine=args.engine or DEFAULT_ENGINE, dtype=args.dtype or "bf16")
    print(simulate_command(SimulateOptions(
        config=args.config, mode=args.mode, k=args.k, m=args.m, policy=args.policy,
        requests=args.requests, seed=args.seed, workload=args.workload, format=args.format,
        max_model_len=args.max_model_len, engine_step=args.engine_step, trace=args.trace,
        trace_level=args.trace_level, path=args.path, perfetto=args.perfetto,
        as_json=args.json, results_format=args.results_format,
        result_file=args.result_file, quick=quick, rate=args.rate)))
    return 0
