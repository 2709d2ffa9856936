"""`psdlab plan CONFIG.toml`: capacity planning with the simulator -- for each mode x k x m x
drafter (x replicas) the highest request rate that meets a latency SLO and the tokens/s per
device, with the Pareto set (devices vs sustainable rate) as a table, a CSV and a PNG beside it,
the best fixed configuration per load (batch size) and vLLM's k-per-batch-size table.  The
configurations run as tasks of a backend (``--backend local``: processes; ``ray``: Ray tasks;
``psdlab.sim.sweep_backends``); nothing is written unless every configuration ran."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from psdlab.cli import UsageError
from psdlab.commands.simulate import add_file_workload_args, file_workload


def register(subparsers: argparse._SubParsersAction) -> None:
    from psdlab.sim.sweep_backends import BACKENDS
    from psdlab.sim.vllm_k_table import CRITERIA

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
    import dataclasses
    import os

    from psdlab.analysis.checks import check_int
    from psdlab.sim.sim_config import config_from_dict, read_toml
    from psdlab.sim.capacity import parse_plan, run_capacity_plan, trial_requests, write_csv
    from psdlab.sim.plan_figure import make_figure, save, workload_label
    from psdlab.sim.plan_report import (PlanContext, build_report, format_report, slo_text,
                                        write_outputs)
    from psdlab.sim.sweep_backends import SweepTaskError
    from psdlab.sim.vllm_k_table import k_table

    raw = read_toml(args.config)
    cfg = config_from_dict(raw, os.path.dirname(os.path.abspath(args.config)))
    spec_file = file_workload(args)
    if spec_file is not None:
        cfg = cfg.replace(workload=spec_file)
    spec = parse_plan(raw.get("plan"), cfg)
    if args.requests is not None:
        spec = dataclasses.replace(spec, requests=check_int("--requests", args.requests, 10))
    jobs = check_int("--jobs", args.jobs, 1, 256) if args.jobs is not None else spec.jobs
    if args.address is not None and args.backend != "ray":
        raise ValueError("--address: only with --backend ray")
    if args.k_table_drafter is not None and args.vllm_k_table is None:
        raise ValueError("--k-table-drafter: only with --vllm-k-table")
    try:
        rows = run_capacity_plan(cfg, spec, jobs,
                                 progress=sys.stderr.isatty() and not args.json,
                                 backend=args.backend, address=args.address)
    except SweepTaskError as exc:
        raise UsageError(str(exc)) from None
    per_trial = trial_requests(cfg, spec)
    ctx = PlanContext(cfg, spec, rows, show_all=args.all, k_table_drafter=args.k_table_drafter,
                      k_table_by=args.k_table_by)
    sections = build_report(ctx)
    csv_path = args.csv or spec.csv
    png_path = (os.path.splitext(csv_path)[0] + ".png") if csv_path and not args.no_png else None
    writers: dict[str, Callable[[str], None]] = {}
    if csv_path:
        writers[csv_path] = lambda tmp: write_csv(rows, tmp)
    if png_path:
        fig = make_figure(rows, slo_text(spec), workload_label(cfg.workload, per_trial))
        writers[png_path] = lambda tmp: save(fig, tmp)
    k_conf = None
    if args.vllm_k_table:
        k_conf = k_table(rows, args.k_table_drafter, args.k_table_by).speculative_config()
        text = json.dumps(k_conf) + "\n"
        writers[args.vllm_k_table] = lambda tmp: _write_text(tmp, text)
    from psdlab.sim.policy_search import format_report as policy_text, plan_thresholds
    # the adaptive policy's thresholds; computed before anything is written, so that a failure
    # here leaves no file behind
    policy = plan_thresholds(cfg.replace(server_m=max(spec.ms)))
    write_outputs(writers)
    if args.json:
        print(json.dumps({"rows": [r.to_csv_row() for r in rows], "csv": csv_path, "png": png_path,
                          "adaptive_policy": policy,
                          "vllm_k_table": args.vllm_k_table,
                          "sections": [{"name": s.name, "title": s.title, "data": s.data}
                                       for s in sections]}, sort_keys=True))
        return 0
    print(f"SLO: {slo_text(spec)}; {per_trial} requests per trial, {spec.iterations} "
          f"bisection steps; backend {args.backend}")
    print(format_report(sections))
    if policy is not None:
        print(policy_text(policy))
    for label, path in (("csv", csv_path), ("png", png_path), ("vllm k table", args.vllm_k_table)):
        if path:
            print(f"{label}: {path}")
    return 0


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
