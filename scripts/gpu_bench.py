#!/usr/bin/env python
"""AR, SD and PSD on this machine's CUDA GPUs, the simulator calibrated and validated on the
traces, one summary file: the one GPU command.

    python scripts/gpu_bench.py --out gpu_bench_out           # 1 or 2 CUDA GPUs, ~1.3B target
    python scripts/gpu_bench.py --device cpu --out /tmp/x     # dry run: tiny models on CPU

Layouts (`validation.device_bench`): ``two-devices`` (the drafter on the second GPU, one
process per GPU) when there are two GPUs, and ``two-streams`` (both models on the first GPU,
one process, a CUDA stream each).  Each runs AR (the reference output), SD-separate at m, PSD
at 2 x m and PSD at 2 x m/2, ``--rounds`` times interleaved; then ``psdlab calibrate`` fits
the simulator to AR + round 1 and ``psdlab validate`` replays round 2.  Everything goes to
``--out``: the traces, each layout's model file and ``summary.json`` (machine, date, commit,
per layout t, V, the measured and predicted PSD/SD gains, the overlap, the simulator's errors).

Models are built from configs with seeded random weights (no downloads): a Llama-style target
of about 1.3B parameters and a drafter of about 0.15B with the same vocabulary.  Random weights
accept almost no drafts; that changes acceptance (equal in SD and PSD), not the overlap
mechanics being measured.  Sized to finish in well under 8 minutes on one modern GPU (two
layouts x 7 runs of 16 requests x 64 tokens); ``--budget-s`` stops before a layout that would
not fit.

``--device cpu`` is the dry run that CI runs: the same code path with tiny models (process and
thread workers on CPU cores); it measures nothing about GPUs.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

from psdlab.runtime.devices import COMPILE_MODES

SIZES = {
    # ~1.3B parameters (Llama-style, GQA)
    "1.3b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                 num_attention_heads=16, num_key_value_heads=8),
    # ~0.15B parameters
    "0.15b": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                  num_attention_heads=12, num_key_value_heads=4),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
    "tiny-draft": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1),
}


def hf_config(size: str, vocab: int, max_len: int) -> dict:
    return {"model_type": "llama", "vocab_size": vocab, "max_position_embeddings": max_len,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "hidden_act": "silu", **SIZES[size]}


def build_random(config: dict, seed: int, device, dtype):
    """ModelSpec factory: a random-weight Transformer built from an HF-style config."""
    from psdlab.runtime.model_config import ModelConfig
    from psdlab.runtime.weights import random_model
    cfg = ModelConfig.from_hf(config)
    return random_model(cfg, seed=seed, device=device, dtype=dtype), cfg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for the smoke mode")
    p.add_argument("--target-size", default=None, choices=sorted(SIZES))
    p.add_argument("--drafter-size", default=None, choices=sorted(SIZES))
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="m")
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"))
    p.add_argument("--out", default="gpu_bench_out")
    p.add_argument("--compile", choices=COMPILE_MODES,
                   default="off", help="torch.compile the passes (reduce-overhead: CUDA graphs)")
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="skip a layout that would end past this many seconds")
    args = p.parse_args(argv)

    import torch

    from psdlab.runtime.overlap_bench import format_report
    from psdlab.runtime.controller import EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    from psdlab.validation.device_bench import layouts, machine, run_layout

    smoke = args.device == "cpu"
    if not smoke and not torch.cuda.is_available():
        print("gpu_bench: error: device: no CUDA device; use --device cpu for the dry run",
              file=sys.stderr)
        return 2
    target_size = args.target_size or ("tiny" if smoke else "1.3b")
    drafter_size = args.drafter_size or ("tiny-draft" if smoke else "0.15b")
    vocab = 256 if smoke and args.vocab == 32000 else args.vocab
    dtype = args.dtype or ("float32" if smoke else "bfloat16")
    max_len = args.prompt_len + args.max_new_tokens + args.k + 8
    if smoke:
        torch.set_num_threads(1)
    target = ModelSpec(factory=functools.partial(build_random, hf_config(target_size, vocab,
                                                                        max_len), 1),
                       label=f"random-llama-{target_size}")
    drafter = ModelSpec(factory=functools.partial(build_random, hf_config(drafter_size, vocab,
                                                                         max_len), 2),
                        label=f"random-llama-{drafter_size}")
    gen = torch.Generator().manual_seed(0)
    requests = [Request(f"r{i}", tuple(torch.randint(0, vocab, (args.prompt_len,),
                                                     generator=gen).tolist()))
                for i in range(args.num_prompts)]
    base = EngineConfig(mode="psd", k=args.k, batch=args.batch,
                        max_new_tokens=args.max_new_tokens, ignore_eos=True, max_len=max_len,
                        device=args.device, dtype=dtype, compile=args.compile)
    gpus = 0 if smoke else torch.cuda.device_count()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": machine(args.device), "smoke_mode": smoke, "target": target.label,
               "drafter": drafter.label, "dtype": dtype, "k": args.k, "m": args.batch,
               "requests": len(requests), "max_new_tokens": args.max_new_tokens,
               "compile": args.compile, "layouts": {}, "skipped": []}
    t0 = time.perf_counter()
    for lay in layouts(args.device, gpus):
        spent = time.perf_counter() - t0
        done = summary["layouts"]
        if done and spent / len(done) > args.budget_s - spent:
            summary["skipped"].append(f"{lay.name}: the {spent:.0f} s spent leave too little "
                                      f"of --budget-s {args.budget_s:.0f}")
            continue
        fig = run_layout(lay, target, drafter, requests, base, out, args.rounds)
        summary["layouts"][lay.name] = fig
        print(f"== {lay.name}")
        print(format_report(fig))
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    summary["wall_s"] = time.perf_counter() - t0
    summary["lossless"] = all(f["lossless"] for f in summary["layouts"].values())
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"traces, model files and summary.json in {out} ({summary['wall_s']:.0f} s)")
    return 0 if summary["lossless"] else 1


if __name__ == "__main__":
    sys.exit(main())
