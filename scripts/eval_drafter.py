"""Measure the drafter: greedy-SD mean acceptance length on held-out prompts, and its cost.

    python scripts/eval_drafter.py [--k 4] [--max-new-tokens 128] [--split heldout] [--json]

Acceptance: for each prompt the target's greedy continuation is generated, then greedy SD is
simulated exactly (draft k tokens greedily, accept the longest prefix equal to the target's
greedy tokens, plus the bonus token; see ``runtime.distill.acceptance_walk``). The continuations
are generated in left-padded batches for speed; the reference at each position is the target's
own unpadded argmax, and ``greedy_consistency`` reports how often the two agree (1.0 = exact).
Mean acceptance length follows vLLM: 1 + accepted / drafting steps, over all steps of all
sequences.
Cost: per-token decode time (KV cache, batch 4, one torch thread) of drafter and target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4, help="draft tokens per step (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=128,
                    help="tokens per prompt (default 128)")
    ap.add_argument("--split", default="heldout", choices=["heldout", "train", "all"])
    ap.add_argument("--prompts", default=None, help="prompts JSONL (default: the shipped set)")
    ap.add_argument("--batch", type=int, default=9, help="prompts per generation batch")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0: all)")
    ap.add_argument("--target", default=None, help="target HF directory (default: the real pair)")
    ap.add_argument("--draft", default=None, help="drafter HF directory (default: the real pair)")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--drafter-dtype", default=None, choices=("float32", "float16", "bfloat16"),
                    help="dtype of the drafter (default: what the drafter asks for, as the "
                         "runtime)")
    ap.add_argument("--no-timing", action="store_true", help="skip the per-token cost measurement")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for the acceptance part (at most 2)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args(argv)


@torch.no_grad()
def decode_ms_per_token(model, batch: int = 4, prompt_len: int = 64, steps: int = 16) -> float:
    """Wall time of one decode step (KV cache, ``batch`` sequences) divided by the batch, in ms."""
    from transformers import DynamicCache

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 1000, (batch, prompt_len), generator=g)
    out = model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True)
    nxt = out.logits[:, -1:].argmax(-1)
    for _ in range(2):  # warm-up
        out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
    return 1000.0 * (time.perf_counter() - t0) / steps / batch


def cost_ratio(target, drafter, rounds: int = 5) -> tuple[float, float]:
    """Per-token ms of target and drafter: alternate them ``rounds`` times, keep each one's best
    (the machine is shared; the minimum is the least disturbed measurement)."""
    t_ms, d_ms = [], []
    for _ in range(rounds):
        t_ms.append(decode_ms_per_token(target))
        d_ms.append(decode_ms_per_token(drafter))
    return min(t_ms), min(d_ms)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from psdlab.runtime.distill import (acceptance_walk, generate, greedy_match,
                                        mean_acceptance_length)
    from psdlab.runtime.drafter_build import preferred_dtype
    from psdlab.runtime.model_pair import prepare_pair
    from psdlab.runtime.prompts import load_prompts

    torch.set_num_threads(max(1, min(args.threads, 2)))
    if bool(args.target) != bool(args.draft):
        print("eval_drafter: error: --target and --draft go together", file=sys.stderr)
        return 2
    if args.target and args.draft:
        target_dir, draft_dir = args.target, args.draft
    else:
        pair = prepare_pair(args.cache_dir, progress=not args.json)
        target_dir, draft_dir = pair.target_dir, pair.drafter_dir
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    drafter_dtype = args.drafter_dtype or preferred_dtype(draft_dir) or "float32"
    drafter = AutoModelForCausalLM.from_pretrained(draft_dir,
                                                   dtype=getattr(torch, drafter_dtype)).eval()
    prompts = load_prompts(args.prompts, split=args.split)
    if args.limit > 0:
        prompts = prompts[:args.limit]
    texts = [p.chat_text(tok) for p in prompts]
    seqs = generate(target, tok, texts, args.max_new_tokens, greedy=True, batch=args.batch)
    counts_all: list[int] = []
    by_style: dict[str, list[int]] = defaultdict(list)
    same = total = 0
    for i, (p, s) in enumerate(zip(prompts, seqs)):
        ids, start = s.ids, len(s.prompt) - 1
        with torch.no_grad():
            out = target(input_ids=torch.tensor([ids]), use_cache=False)
            ref = out.logits[0, start:-1].argmax(-1)
        same += int((ref == torch.tensor(s.gen)).sum())
        total += len(s.gen)
        counts = acceptance_walk(greedy_match(drafter, ref, ids, start), args.k)
        counts_all += counts
        by_style[p.style] += counts
        if not args.json:
            print(f"[{i + 1}/{len(prompts)}] {p.id}: {len(s.gen)} tokens, "
                  f"mean acceptance length {mean_acceptance_length(counts):.2f}", file=sys.stderr)
    result = {"k": args.k, "split": args.split, "prompts": len(prompts), "steps": len(counts_all),
              "mean_acceptance_length": round(mean_acceptance_length(counts_all), 4),
              "greedy_consistency": round(same / max(1, total), 4),
              "by_style": {s: round(mean_acceptance_length(c), 4)
                           for s, c in sorted(by_style.items())},
              "target_layers": target.config.num_hidden_layers,
              "drafter_layers": drafter.config.num_hidden_layers, "drafter_dtype": drafter_dtype,
              "target_params": sum(p.numel() for p in target.parameters()),
              "drafter_params": sum(p.numel() for p in drafter.parameters())}
    if not args.no_timing:
        torch.set_num_threads(1)
        t_ms, d_ms = cost_ratio(target, drafter)
        result.update(target_ms_per_token=round(t_ms, 3), drafter_ms_per_token=round(d_ms, 3),
                      cost_ratio=round(d_ms / t_ms, 4))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, FileNotFoundError) as exc:
        print(f"eval_drafter: error: {exc}", file=sys.stderr)
        sys.exit(2)
