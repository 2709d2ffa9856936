"""What `psdlab simulate CONFIG.toml` does once its arguments are parsed: the config with the
command line's overrides (or, with no config, the deployment the command line names:
``sim.quick_plan.deployment_config``), the simulation, the trace (and the Perfetto timeline
and vLLM bench result it asks for) and the text it prints.  The command module only parses and
prints."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from psdlab.analysis.json_out import finite_json
from psdlab.sim.quick_plan import Deployment

RESULT_FORMATS = ("psdlab", "vllm-bench")


@dataclass(frozen=True)
class SimulateOptions:
    """The command's options (None: the config's value); ``config`` None: the deployment
    ``quick`` names, on the requests of ``workload`` or the built-in traffic at ``rate``."""
    config: str | None
    mode: str | None = None
    k: int | None = None
    m: int | None = None
    policy: str | None = None
    requests: int | None = None
    seed: int | None = None
    workload: str | None = None
    format: str | None = None
    max_model_len: int | None = None
    engine_step: str | None = None
    trace: str | None = None
    trace_level: str | None = None
    path: str = "fast"
    perfetto: str | None = None
    as_json: bool = False
    results_format: str = "psdlab"
    result_file: str | None = None
    quick: Deployment | None = None
    rate: float | None = None


#: the one-command simulation's defaults: vLLM V1's max_num_seqs (its default for a GPU
#: server), the built-in traffic's request count
QUICK_M, QUICK_REQUESTS = 256, 200


def quick_sim_config(opts: SimulateOptions) -> tuple[Any, list[str]]:
    """The config of a one-command simulation and the defaults it took, in words."""
    from psdlab.analysis.checks import check_positive
    from psdlab.sim.quick_plan import builtin_workload, deployment_config, option_error
    from psdlab.sim.sim_config import config_from_dict

    assert opts.quick is not None
    from psdlab.analysis.modes import mode_spec
    mode = opts.mode or ("psd" if opts.quick.drafter is not None else "ar")
    if opts.quick.drafter is None and mode_spec(mode).drafting:
        raise ValueError(f"--mode {mode}: drafts, so it needs --drafter NAME|config.json")
    raw, defaults = deployment_config(opts.quick, mode, opts.k or 4, opts.m or QUICK_M)
    if opts.mode is None:
        defaults.insert(0, f"mode {mode} (--mode)")
    if opts.m is None:
        defaults.append(f"m {QUICK_M} sequences a batch, vLLM V1's max_num_seqs (--m)")
    if opts.k is None and mode != "ar":
        defaults.append("k 4 (--k)")
    if opts.rate is not None:
        check_positive("--rate", opts.rate)
        if opts.workload is not None:
            raise ValueError("--rate: only without --workload (a file's arrivals are its own)")
    raw["workload"] = builtin_workload(opts.rate)
    if opts.workload is None:
        raw["requests"] = QUICK_REQUESTS
        n = QUICK_REQUESTS if opts.requests is None else opts.requests
        defaults.append(
            f"traffic: {n} requests (--requests), ShareGPT-like lengths, "
            + ("all at once (--rate R: Poisson at R req/s)" if opts.rate is None
               else f"Poisson at {opts.rate:g} req/s"))
    try:
        cfg = config_from_dict(raw, os.getcwd())
    except ValueError as exc:
        raise ValueError(option_error(str(exc))) from None
    return cfg, defaults


def _stem(opts: SimulateOptions, cfg) -> str:
    """The default name of the files a run writes: the config's, else target-mode."""
    if opts.config is not None:
        return os.path.splitext(os.path.basename(opts.config))[0]
    return f"{cfg.target.name}-{cfg.server.mode}"


def file_workload(workload: str | None, format: str | None = None,
                  max_model_len: int | None = None) -> dict | None:
    """The workload spec of ``--workload FILE`` (with its --format / --max-model-len), or None;
    either option without --workload is a one-line error."""
    if workload is None:
        for flag, value in (("format", format), ("max_model_len", max_model_len)):
            if value is not None:
                raise ValueError(f"--{flag.replace('_', '-')}: only with --workload")
        return None
    return {"name": "file", "path": workload,
            **({"format": format} if format else {}),
            **({"max_model_len": max_model_len} if max_model_len is not None else {})}


def apply_overrides(cfg, opts: SimulateOptions):
    """``cfg`` with the options' server fields, request count, seed and workload file."""
    changes: dict[str, Any] = {}
    for name in ("mode", "k", "m", "policy"):
        if getattr(opts, name) is not None:
            changes[f"server_{name}"] = getattr(opts, name)
    if opts.engine_step is not None:
        changes["server_engine_step"] = opts.engine_step
    for name in ("requests", "seed"):
        if getattr(opts, name) is not None:
            changes[name] = getattr(opts, name)
    spec = file_workload(opts.workload, opts.format, opts.max_model_len)
    if spec is not None:
        from psdlab.sim.workloads import requests_from_file
        changes["workload"] = spec
        if "requests" not in changes:       # those the target's catalog length keeps, too
            from psdlab.sim.model_specs import with_max_model_len
            counted = with_max_model_len(spec, cfg.target.cost_spec.max_model_len)
            changes["requests"] = len(requests_from_file(counted, "--workload"))
    if changes.get("server_mode") not in (None, "ar") and cfg.drafter is None:
        raise ValueError("drafter: missing (required for --mode " + changes["server_mode"] + ")")
    return cfg.replace(**changes) if changes else cfg


def _workload_rate(cfg) -> float | None:
    """The request rate a vLLM bench result records for the config's workload (inf: all at
    once; None: a file's own arrivals, recorded as their mean rate)."""
    spec = dict(cfg.workload)
    if spec.get("name") in ("poisson", "gamma"):
        return float(spec["rate"])
    if spec.get("name") == "offline":
        return float("inf")
    return None


def _write_vllm_bench(opts: SimulateOptions, cfg, result) -> str:
    from psdlab.analysis.formats.vllm_bench_write import (bench_result_from_trace,
                                                          write_bench_result)
    from psdlab.sim.workloads import mean_rate
    rate = _workload_rate(cfg)
    if rate is None and result.trace.requests:
        rate = mean_rate([r.arrival for r in result.trace.requests])
    doc = bench_result_from_trace(result.trace, request_rate=rate)
    path = opts.result_file or _stem(opts, cfg) + ".vllm-bench.json"
    write_bench_result(path, doc)
    return path


def simulate_command(opts: SimulateOptions) -> str:
    """Run the simulation the options describe, write its files; the text to print."""
    from psdlab.analysis.metrics import summary_text
    from psdlab.sim.sim_config import load_config
    from psdlab.sim.simulation import simulate

    defaults: list[str] = []
    if opts.config is not None:
        base = load_config(opts.config)
    elif opts.quick is not None:
        base, defaults = quick_sim_config(opts)
    else:
        raise ValueError("simulate: a config file, or --target and --gpu")
    cfg = apply_overrides(base, opts)
    if opts.trace_level:
        cfg = cfg.replace(trace_level=opts.trace_level)
    if opts.perfetto and cfg.trace.level != "step":
        raise ValueError("--perfetto: needs --trace-level step")
    if opts.results_format == "vllm-bench" and cfg.trace.level != "step":
        raise ValueError("--results-format vllm-bench: needs --trace-level step (the "
                         "inter-token latencies come from the step records)")
    if opts.result_file and opts.results_format != "vllm-bench":
        raise ValueError("--result-file: only with --results-format vllm-bench")
    trace_path = opts.trace or cfg.trace.path
    if trace_path is None and cfg.trace.level != "none":
        trace_path = _stem(opts, cfg) + ".trace.jsonl"
    progress = sys.stderr.isatty() and not opts.as_json
    result = simulate(cfg, path=opts.path, trace_path=trace_path, progress=progress)
    summary = dict(result.metrics)
    summary["trace"] = result.trace_path
    summary["sim"] = {"wall_s": result.wall_s, "events": result.events, **result.counters}
    if opts.perfetto:
        from psdlab.analysis.perfetto import write_chrome_trace
        write_chrome_trace(result.trace, opts.perfetto)
    if opts.results_format == "vllm-bench":
        summary["result_file"] = _write_vllm_bench(opts, cfg, result)
    if defaults:
        summary["defaults"] = defaults
    if opts.as_json:
        return finite_json(summary, sort_keys=True)
    lines = [*(f"default: {d}" for d in defaults), summary_text(summary),
             f"trace: {result.trace_path or '(not written)'}   simulated {result.events} events "
             f"in {result.wall_s:.2f} s"]
    if summary.get("result_file"):
        lines.append(f"vLLM bench result: {summary['result_file']}")
    return "\n".join(lines)
