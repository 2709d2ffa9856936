#!/usr/bin/env python
"""The bench-runtime benchmark on one CUDA GPU: drafter and target on two CUDA streams.

One command, well under 10 minutes on a modern GPU:

    python scripts/gpu_bench.py --out gpu_traces            # cuda:0, ~1.3B target, ~0.15B drafter
    python scripts/gpu_bench.py --device cpu --out /tmp/x   # smoke mode: tiny models, CPU threads

Models are built from configs with seeded random weights (no downloads): a Llama-style target
of about 1.3B parameters and a drafter of about 0.15B with the same vocabulary.  Each worker is
a thread that owns its model, KV cache and CUDA stream, so drafting (one stream) and
verification (the other) overlap on the GPU.  Greedy requests with random prompts run as
SD-separate (batch m), PSD (2 x m) and PSD (2 x m/2); the script prints t, V, the measured
PSD/SD gains, the predicted (t + V) / max(t, V) and the overlap, and writes every trace plus
``summary.json`` into ``--out``.  Random weights accept almost no drafts; that changes
acceptance, not the overlap mechanics being measured (equal acceptance in SD and PSD).

``--device cpu`` is a smoke mode that proves the same code path (thread workers, one step loop)
with tiny models on the CPU; it measures nothing about GPUs.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
    from psdlab.runtime.config import ModelConfig
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
    p.add_argument("--out", default="gpu_bench_traces")
    args = p.parse_args(argv)

    import torch

    from psdlab.runtime.bench import bench_runtime, format_report
    from psdlab.runtime.engine import EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec

    smoke = args.device == "cpu"
    if not smoke and not torch.cuda.is_available():
        print("gpu_bench: error: no CUDA device; use --device cpu for the smoke mode",
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
                        backend="thread", device=args.device, dtype=dtype)
    t0 = time.time()
    fig = bench_runtime(target, drafter, requests, base, trace_dir=args.out, rounds=args.rounds)
    fig.update({"device": args.device if smoke else torch.cuda.get_device_name(args.device),
                "smoke_mode": smoke, "target": target.label, "drafter": drafter.label,
                "dtype": dtype, "wall_s": time.time() - t0})
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "summary.json").write_text(json.dumps(fig, indent=1))
    print(format_report(fig))
    print(f"traces and summary.json in {args.out} ({fig['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
