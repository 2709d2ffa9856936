"""`psdlab cost`: the seconds of one forward pass under a GPU cost preset, and
`psdlab cost --check`: predicted vs published for every public measurement psdlab knows.
This module parses the arguments and prints; ``sim.costs.check_report`` does the rest."""
from __future__ import annotations

import argparse

from psdlab.analysis.json_out import finite_json
from psdlab.cli import UsageError

_PASS_ARGS = ("model", "hardware", "seqs", "tokens", "context")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cost", help="seconds of one GPU forward pass under an engine preset; --check: "
                     "predicted vs published public measurements",
        description="One pass: --model NAME --hardware NAME --tp N --dtype bf16 --engine PRESET "
                    "--seqs S --tokens T --context C prints its seconds (JSON key 'seconds' with "
                    "--json) and the terms behind them.  Presets (sim/costs/engines.toml): "
                    "vllm-eager, vllm-cudagraph, torch-eager, torch-compile; 'ideal' is the "
                    "ideal roofline (a lower bound).  --check prints every public point of "
                    "sim/costs/public_measurements.toml with the prediction of its engine's "
                    "preset, the error and whether the preset was fitted on it, and the "
                    "MineDraft per-step PSD/SD gains; --out FILE also writes that as markdown.")
    p.add_argument("--model", help="catalog model (sim/costs/models.toml), e.g. qwen3-32b, or "
                                   "a model's config.json (or a folder holding one)")
    p.add_argument("--hardware", help="catalog GPU (sim/costs/hardware.toml), e.g. l40")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--dtype", help="weights: bf16, fp16, fp8, int8, w4a16, w8a16 (default: "
                                   "the model's own, e.g. a quantised config.json's, else bf16)")
    p.add_argument("--engine", default="vllm-cudagraph",
                   help="engine preset or 'ideal' (default vllm-cudagraph)")
    p.add_argument("--link", help="interconnect for TP collectives: pcie or nvlink "
                                  "(default: the hardware's)")
    p.add_argument("--seqs", type=int, help="sequences in the pass")
    p.add_argument("--tokens", type=int, help="new tokens in the pass, all sequences together")
    p.add_argument("--context", type=int, help="KV-cache tokens before the pass, all sequences")
    p.add_argument("--check", action="store_true",
                   help="predicted vs published for every public measurement")
    p.add_argument("--out", metavar="FILE", help="with --check: also write the tables (markdown)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.sim.costs.check_report import check_command, one_pass, one_pass_text
    if args.check:
        print(check_command(args.out, as_json=args.json))
        return 0
    if args.out:
        raise UsageError("--out: only with --check")
    missing = [f"--{k}" for k in _PASS_ARGS if getattr(args, k) is None]
    if missing:
        raise UsageError(f"{missing[0]}: required for one pass (or use --check)")
    out = one_pass(model=args.model, hardware=args.hardware, tp=args.tp, dtype=args.dtype,
                   engine=args.engine, link=args.link, seqs=args.seqs, tokens=args.tokens,
                   context=args.context)
    print(finite_json(out.to_dict(), sort_keys=True) if args.json else one_pass_text(out))
    return 0
