"""`psdlab plan CONFIG.toml`: capacity planning with the simulator -- for each mode x k x m x
drafter (x replicas) the highest request rate that meets a latency SLO and the tokens/s per
device, with the Pareto set (devices vs sustainable rate) as a table, a CSV and a PNG beside it,
the best fixed configuration per load (batch size) and vLLM's k-per-batch-size table.  The
configurations run as tasks of a backend (``--backend local``: processes; ``ray``: Ray tasks;
``psdlab.sim.sweep_backends``); nothing is written unless every configuration ran.  This
module parses the arguments and prints; ``sim.plan_command.plan_command`` does the rest.
Without a config, the one-command form (``--target --gpu --tp --drafter --traffic --slo``,
``sim.quick_plan``) builds the config, every other field defaulted and printed."""
from __future__ import annotations

import argparse

from psdlab.cli import UsageError
from psdlab.cli_options import (DEPLOYMENT_OPTIONS, add_deployment_args, add_file_workload_args,
                                 check_one_command, one_command_options)


def register(subparsers: argparse._SubParsersAction) -> None:
    from psdlab.sim.sweep_backends import BACKENDS
    from psdlab.sim.vllm_k_table import CRITERIA

    p = subparsers.add_parser(
        "plan", help="highest sustainable request rate under an SLO, per configuration",
        description="Sweep the [plan] table of a simulator config (modes, k, m, drafters, "
                    "replicas, slo = {ttft_p99 = ..., tpot_p50 = ...}, requests, iterations) "
                    "and bisect on the Poisson rate; see sim/capacity.py and "
                    "sim/configs/plan_example.toml.  Or in one command, no config: "
                    "psdlab plan --target llama-3.3-70b --gpu h100 --tp 4 --drafter "
                    "llama-3.2-1b --slo tpot_p50=50ms,ttft_p99=3s (the rest defaulted and "
                    "printed), ending in one answer.")
    p.add_argument("config", nargs="?",
                   help="simulator config (.toml) with a [plan] table (or the options below)")
    q = add_deployment_args(p, "a plan")
    q.add_argument("--traffic", metavar="FILE|sharegpt",
                   help="sharegpt (Poisson arrivals, ShareGPT-like lengths; default) or a "
                        "bench result / trace file (as --workload)")
    q.add_argument("--slo", metavar="NAME=TIME,...", default=None,
                   help="e.g. tpot_p50=50ms,ttft_p99=3s (the default); units us, ms, s")
    q.add_argument("--rate", type=float, metavar="REQ_S",
                   help="the traffic to serve: the answer says how many replicas it needs")
    p.add_argument("--jobs", type=int, help="worker processes (default: plan.jobs or 1)")
    p.add_argument("--csv", metavar="PATH", help="CSV of all rows (default: plan.csv)")
    p.add_argument("--requests", type=int, help="requests per trial (overrides plan.requests)")
    p.add_argument("--workload", metavar="FILE",
                   help="plan on the requests of FILE (a vLLM or SGLang bench result, an Azure, "
                        "BurstGPT or Mooncake trace, ...: psdlab.analysis.formats): their "
                        "lengths and arrival pattern, scaled in rate, instead of Poisson")
    add_file_workload_args(p)
    p.add_argument("--all", action="store_true", help="print every row, not only the Pareto set")
    p.add_argument("--json", action="store_true", help="one JSON object with all rows")
    p.add_argument("--backend", choices=tuple(BACKENDS), default="local",
                   help="where the configurations run: local processes (--jobs of them; "
                        "default) or Ray tasks (a local cluster of --jobs CPUs, or --address); "
                        "ray needs the extra: pip install 'psdlab[ray]'")
    p.add_argument("--address", metavar="ADDR",
                   help="with --backend ray: a running Ray cluster (its head's host:port, or "
                        "auto for one on this machine); one with token authentication also "
                        "needs RAY_AUTH_MODE=token in the environment")
    p.add_argument("--no-png", action="store_true",
                   help="no figure (default: a PNG beside the CSV, same stem)")
    p.add_argument("--vllm-k-table", metavar="PATH",
                   help="write vLLM's num_speculative_tokens_per_batch_size (and "
                        "num_speculative_tokens) for the sd configurations as JSON, to merge "
                        "into vLLM's speculative_config")
    p.add_argument("--k-table-drafter", metavar="NAME",
                   help="the drafter of the k table (default: that of the best sd row)")
    p.add_argument("--k-table-by", choices=tuple(CRITERIA), default="rate",
                   help="k table: highest sustainable rate under the SLO (default) or "
                        "highest saturated throughput")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.sim.plan_command import PlanOptions, plan_command
    from psdlab.sim.quick_plan import BUILTIN_TRAFFIC, DEFAULT_ENGINE, DEFAULT_SLO, QuickPlan
    from psdlab.sim.sweep_backends import SweepTaskError
    given = one_command_options(args, (*DEPLOYMENT_OPTIONS, "traffic", "slo", "rate"))
    try:
        one = check_one_command(args, given, "plan")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    quick = None
    if one:
        quick = QuickPlan(
            target=args.target, gpu=args.gpu, tp=1 if args.tp is None else args.tp,
            drafter=args.drafter, drafter_gpu=args.drafter_gpu,
            drafter_tp=1 if args.drafter_tp is None else args.drafter_tp,
            traffic=BUILTIN_TRAFFIC if args.traffic is None else args.traffic,
            slo=DEFAULT_SLO if args.slo is None else args.slo, alpha=args.alpha,
            engine=DEFAULT_ENGINE if args.engine is None else args.engine,
            dtype="bf16" if args.dtype is None else args.dtype, rate=args.rate)
    try:
        text = plan_command(PlanOptions(
            config=args.config, jobs=args.jobs, csv=args.csv, requests=args.requests,
            workload=args.workload, format=args.format, max_model_len=args.max_model_len,
            show_all=args.all, as_json=args.json, backend=args.backend, address=args.address,
            no_png=args.no_png, vllm_k_table=args.vllm_k_table,
            k_table_drafter=args.k_table_drafter, k_table_by=args.k_table_by, quick=quick))
    except SweepTaskError as exc:
        raise UsageError(str(exc)) from None
    print(text)
    return 0
