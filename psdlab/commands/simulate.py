"""`psdlab simulate CONFIG.toml`: run the SimPy simulator, write the trace, print the metrics
(from analysis.metrics, the same code that summarises real runs)."""
from __future__ import annotations

import argparse
import json
import sys

from psdlab.analysis.modes import TRACE_MODES


def add_override_args(p: argparse.ArgumentParser) -> None:
    """Options that override fields of the config file (shared with bench-sim and plan)."""
    p.add_argument("--mode", choices=TRACE_MODES, help="server.mode")
    p.add_argument("--k", type=int, help="server.k: draft tokens per step")
    p.add_argument("--m", type=int, help="server.m: max sequences (per batch for psd)")
    p.add_argument("--policy", choices=("paper", "rebalance"), help="server.policy (psd)")
    p.add_argument("--requests", type=int, help="number of requests")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--workload", metavar="FILE",
                   help="replace the config's workload by the requests of FILE (a vLLM or SGLang "
                        "bench result, an Azure, BurstGPT or Mooncake trace, ShareGPT, "
                        "Spec-Bench, ...: psdlab.analysis.formats); all of them unless "
                        "--requests caps it")
    add_file_workload_args(p)
    p.add_argument("--engine-step", metavar="NAME",
                   help="server.engine_step: host work around the passes, a preset of "
                        "sim/costs/engine_steps.toml (vllm-v0, vllm-v1, torch), 'preset' (the "
                        "target GPU cost preset's) or 'none'")


def add_file_workload_args(p: argparse.ArgumentParser) -> None:
    """--format and --max-model-len beside a command's own --workload FILE."""
    p.add_argument("--format", metavar="F", help="FILE's format (default: told by content)")
    p.add_argument("--max-model-len", type=int, default=None, metavar="N",
                   help="with --workload: refuse requests whose prompt + output exceed N "
                        "tokens, as vLLM does (counted in one warning line)")


def file_workload(args: argparse.Namespace) -> dict | None:
    """The workload spec of ``--workload FILE`` (with its --format / --max-model-len), or None;
    either option without --workload is a one-line error."""
    if getattr(args, "workload", None) is None:
        for flag in ("format", "max_model_len"):
            if getattr(args, flag, None) is not None:
                raise ValueError(f"--{flag.replace('_', '-')}: only with --workload")
        return None
    return {"name": "file", "path": args.workload,
            **({"format": args.format} if getattr(args, "format", None) else {}),
            **({"max_model_len": args.max_model_len}
               if getattr(args, "max_model_len", None) is not None else {})}


def apply_overrides(cfg, args: argparse.Namespace):
    changes = {}
    for name in ("mode", "k", "m", "policy"):
        if getattr(args, name, None) is not None:
            changes[f"server_{name}"] = getattr(args, name)
    if getattr(args, "engine_step", None) is not None:
        changes["server_engine_step"] = args.engine_step
    for name in ("requests", "seed"):
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    spec = file_workload(args)
    if spec is not None:
        from psdlab.sim.workloads import requests_from_file
        changes["workload"] = spec
        if "requests" not in changes:
            changes["requests"] = len(requests_from_file(spec, "--workload"))
    if changes.get("server_mode") not in (None, "ar") and cfg.drafter is None:
        raise ValueError("drafter: missing (required for --mode " + changes["server_mode"] + ")")
    return cfg.replace(**changes) if changes else cfg


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


RESULT_FORMATS = ("psdlab", "vllm-bench")


def _workload_rate(cfg) -> float | None:
    """The request rate a vLLM bench result records for the config's workload (inf: all at
    once; None: a file's own arrivals, recorded as their mean rate)."""
    spec = dict(cfg.workload)
    if spec.get("name") in ("poisson", "gamma"):
        return float(spec["rate"])
    if spec.get("name") == "offline":
        return float("inf")
    return None


def _write_vllm_bench(args: argparse.Namespace, cfg, result) -> str:
    import os

    from psdlab.analysis.formats.vllm_bench_write import (bench_result_from_trace,
                                                          write_bench_result)
    from psdlab.sim.workloads import mean_rate
    rate = _workload_rate(cfg)
    if rate is None and result.trace.requests:
        rate = mean_rate([r.arrival for r in result.trace.requests])
    doc = bench_result_from_trace(result.trace, request_rate=rate)
    path = args.result_file or (os.path.splitext(os.path.basename(args.config))[0]
                                + ".vllm-bench.json")
    write_bench_result(path, doc)
    return path


def run(args: argparse.Namespace) -> int:
    from psdlab.sim.sim_config import load_config
    from psdlab.sim.simulation import simulate

    cfg = apply_overrides(load_config(args.config), args)
    if args.trace_level:
        cfg = cfg.replace(trace_level=args.trace_level)
    if args.perfetto and cfg.trace.level != "step":
        raise ValueError("--perfetto: needs --trace-level step")
    if args.results_format == "vllm-bench" and cfg.trace.level != "step":
        raise ValueError("--results-format vllm-bench: needs --trace-level step (the "
                         "inter-token latencies come from the step records)")
    if args.result_file and args.results_format != "vllm-bench":
        raise ValueError("--result-file: only with --results-format vllm-bench")
    trace_path = args.trace or cfg.trace.path
    if trace_path is None and cfg.trace.level != "none":
        import os
        trace_path = os.path.splitext(os.path.basename(args.config))[0] + ".trace.jsonl"
    progress = sys.stderr.isatty() and not args.json
    result = simulate(cfg, path=args.path, trace_path=trace_path, progress=progress)
    summary = dict(result.metrics)
    summary["trace"] = result.trace_path
    summary["sim"] = {"wall_s": result.wall_s, "events": result.events, **result.counters}
    if args.perfetto:
        from psdlab.analysis.perfetto import write_chrome_trace
        write_chrome_trace(result.trace, args.perfetto)
    if args.results_format == "vllm-bench":
        summary["result_file"] = _write_vllm_bench(args, cfg, result)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        from psdlab.commands.metrics import format_summary
        print(format_summary(summary))
        print(f"trace: {result.trace_path or '(not written)'}   simulated {result.events} events "
              f"in {result.wall_s:.2f} s")
        if summary.get("result_file"):
            print(f"vLLM bench result: {summary['result_file']}")
    return 0
