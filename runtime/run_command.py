"""What `psdlab run` and `psdlab bench-runtime` do once their arguments are parsed: the engine
config from the options (the adaptive policy's settings from --policy / --policy-costs), the
models, tokenizer and requests, the run (its trace written as it goes; the per-request outputs
file when asked) and the lines they print.  ``args`` is the command's parsed options (an
``argparse.Namespace``, or any object with those attributes).  The command modules only parse
and print."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from psdlab.analysis.json_out import finite_json
from psdlab.analysis.modes import STEP_MODES


@dataclass
class RunPrintout:
    """What `psdlab run` prints: ``out`` lines (stdout), ``err`` lines (stderr), exit code."""
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    code: int = 0


def adaptive_settings(args: Any):
    """(PolicyConfig | None, AffineCosts | None) from --policy / --policy-costs."""
    from psdlab.analysis.adaptive_policy import AffineCosts, policy_config
    raw_policy, raw_costs = getattr(args, "policy", None), getattr(args, "policy_costs", None)
    if args.mode != "adaptive":
        if raw_policy or raw_costs:
            raise ValueError("--policy: only with --mode adaptive")
        return None, None
    policy = prior = None
    for name, raw in (("--policy", raw_policy), ("--policy-costs", raw_costs)):
        if raw is None:
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(f"{name}: not a JSON object: {raw!r}") from None
        if not isinstance(value, dict):
            raise ValueError(f"{name}: expected a JSON object, got {raw!r}")
        if name == "--policy":
            policy = policy_config(value)
        else:
            fields = AffineCosts.__dataclass_fields__
            bad = [key for key in value if key not in fields]
            if bad:
                raise ValueError(f"--policy-costs: unknown key {bad[0]!r} (allowed: "
                                 f"{', '.join(fields)})")
            prior = AffineCosts(**value)
    if policy is None:
        policy = policy_config({"k_choices": list(range(1, args.k + 1))})
    return policy, prior


def run_engine_config(args: Any, eos: int | None):
    """`psdlab run`'s options as an `EngineConfig` (``eos``: the tokenizer's end token)."""
    from psdlab.runtime.controller import EngineConfig
    from psdlab.runtime.devices import default_backend
    backend = args.backend or default_backend(args.device, args.drafter_device)
    policy, prior = adaptive_settings(args)
    return EngineConfig(
        mode=args.mode, k=args.k, batch=args.batch, max_num_seqs=args.max_num_seqs,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        seed=args.seed, ignore_eos=args.ignore_eos, eos_token_id=eos, max_len=args.max_len,
        backend=backend, device=args.device, drafter_device=args.drafter_device,
        drafter_core=args.drafter_core,
        target_core=args.target_core, dtype=args.dtype, drafter_dtype=args.drafter_dtype,
        controlled_alpha=args.controlled_alpha, idle_spin_s=args.idle_spin_s,
        compile=getattr(args, "compile", "off"), passes=getattr(args, "passes", "auto"),
        batch_invariant=getattr(args, "batch_invariant", False), adaptive_policy=policy,
        adaptive_prior=prior)


def serve_command(args: Any) -> RunPrintout:
    """`psdlab run`: serve the prompts, write the trace (and outputs file); what to print.
    ``--engine vllm`` hands over to `runtime.vllm_ext.cli.run_command` (which prints)."""
    from psdlab.analysis.checks import check_int
    if getattr(args, "engine", "psdlab") == "vllm":
        from psdlab.runtime.vllm_ext.cli import run_command
        return RunPrintout(code=run_command(args))
    if args.num_prompts is not None:
        check_int("num_prompts", args.num_prompts, minimum=1)
    if args.format is not None and args.prompts is None:
        raise ValueError("--format: only with --prompts")
    from psdlab.analysis.checks import check_output_path
    from psdlab.runtime.requests import arrival_times
    check_output_path("--trace", args.trace)        # outputs and arrivals checked before the
    if args.outputs:                                # models load (nothing is written yet)
        check_output_path("--outputs", args.outputs)
    arrival_times(args.arrivals, 0)
    run_engine_config(args, None)                   # validate arguments before loading models
    from psdlab.runtime import run_setup as session
    models = session.resolve_models(args.target, args.draft, args.mode != "ar",
                                    progress=not args.json)
    tokenizer = session.load_tokenizer(models.tokenizer)
    cfg = run_engine_config(args, session.eos_of(tokenizer, models.target))
    requests = session.load_requests(args.prompts, tokenizer, args.arrivals, args.num_prompts,
                                     args.seed, format=args.format)
    bar = _progress_bar(len(requests), disable=args.json)
    from psdlab.runtime.workers import WorkerDied, WorkerError
    try:
        result = session.run_requests(cfg, models, requests, args.trace, tokenizer,
                                      progress=bar.update_to if bar else None)
    except (WorkerDied, WorkerError) as exc:
        return RunPrintout(err=[f"psdlab run: error: {str(exc).splitlines()[0]}"], code=1)
    finally:
        if bar:
            bar.close()
    if args.outputs:
        with open(args.outputs, "w", encoding="utf-8") as fh:
            for o in result.outputs:
                fh.write(json.dumps(o.to_json()) + "\n")
    printout = RunPrintout(out=_report(args, result))
    if result.error:
        printout.err.append(f"psdlab run: error: {result.error}")
        printout.code = 1
    elif result.interrupted:
        printout.err.append("psdlab run: interrupted; the trace holds every step written so far")
        printout.code = 130
    return printout


def _report(args: Any, result) -> list[str]:
    from psdlab.analysis.metrics import summarize
    summary = summarize(result.trace)
    errors = [o for o in result.outputs if o.error]
    summary.update({"interrupted": result.interrupted, "drafter_failure": result.drafter_failure,
                    "request_errors": len(errors)})
    adaptive = result.trace.run.extra.get("adaptive")
    if adaptive is not None:
        summary["adaptive"] = adaptive
    if args.json:
        return [finite_json(summary, default=str)]
    keys = ("requests", "output_tokens", "decode_throughput_tok_s", "throughput_tok_s",
            "mean_acceptance_length", "acceptance_rate", "mean_draft_time_s",
            "mean_verify_time_s", "draft_hidden_fraction")
    lines = [f"mode {args.mode}  k {args.k}  m {args.batch}  trace {args.trace}"]
    for key in keys:
        if key in summary:
            value = summary[key]
            lines.append(f"  {key:26s} {value:.4g}" if isinstance(value, float) else
                         f"  {key:26s} {value}")
    if adaptive is not None:
        steps = ", ".join(f"{m} {adaptive[f'steps_{m}']}" for m in STEP_MODES)
        lines.append(f"  {'adaptive steps':26s} {steps}; switches {adaptive['switches']}")
    for o in errors:
        lines.append(f"  request {o.id}: error: {o.error}")
    return lines


class _Bar:
    def __init__(self, total: int):
        from tqdm import tqdm
        self._bar = tqdm(total=total, unit="req", file=sys.stderr, desc="psdlab run")

    def update_to(self, done: int, total: int) -> None:
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def _progress_bar(total: int, disable: bool) -> _Bar | None:
    if disable or not sys.stderr.isatty():
        return None
    return _Bar(total)


def bench_runtime_command(args: Any) -> str:
    """`psdlab bench-runtime`: SD-separate against PSD on the same requests; the text to
    print (one JSON object with ``args.json``)."""
    from psdlab.analysis.checks import check_int
    from psdlab.runtime import run_setup as session
    from psdlab.runtime.controller import EngineConfig
    from psdlab.runtime.devices import default_backend
    from psdlab.runtime.overlap_bench import (bench_runtime, cycle_requests,
                                              format_overlap_report)
    from psdlab.runtime.runner import ModelSpec
    from psdlab.analysis.checks import check_output_path, check_range
    check_int("num_prompts", args.num_prompts, minimum=1)
    check_int("rounds", args.rounds, minimum=1)
    check_range("--steps-fraction", args.steps_fraction, 0.0, 1.0, lo_open=True)
    if args.trace_dir:
        check_output_path("--trace-dir", args.trace_dir, folder=True)
    drafter_device = args.drafter_device
    base = EngineConfig(mode="psd", k=args.k, batch=args.batch, max_new_tokens=args.max_new_tokens,
                        ignore_eos=True, max_len=args.max_len,
                        backend=default_backend(args.device, drafter_device),
                        device=args.device, drafter_device=drafter_device,
                        drafter_core=args.drafter_core,
                        target_core=args.target_core, dtype=args.dtype,
                        drafter_dtype=args.drafter_dtype, idle_spin_s=args.idle_spin_s,
                        compile=args.compile, passes=args.passes,
                        batch_invariant=args.batch_invariant)
    models = session.resolve_models(args.target, args.draft, True, progress=not args.json)
    tokenizer = session.load_tokenizer(models.tokenizer)
    requests = cycle_requests(session.load_requests(args.prompts, tokenizer, "offline"),
                              args.num_prompts)
    fig = bench_runtime(ModelSpec(models.target), ModelSpec(models.drafter), requests, base,
                        args.trace_dir, tokenizer, quiet=args.json, rounds=args.rounds,
                        steps_fraction=args.steps_fraction)
    return finite_json(fig) if args.json else format_overlap_report(fig)
