"""Distil the SmolLM2 drafter from the target (self-distillation), and save what it adds.

    python scripts/train_drafter.py [--keep 8] [--new-layers 2] [--epochs 4] [--seed 0]

Steps: convert the target once (``runtime.pair.prepare_target``); generate the target's own
continuations of the training prompts (one greedy and ``--samples`` sampled per prompt), add
``--corpus-chunks`` chunks of text every Python install has (``runtime.distill.corpus_texts``); run the
target once over them to record the kept layers' output and the target's final hidden state;
train the new layers (initialised as copies of the target's next layers) and the final norm to minimise
KL(target || drafter); save those tensors in fp16 to ``runtime/data/drafter.safetensors`` and
the spec to ``runtime/data/drafter.json``. Seeded; at most two torch threads.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=int, default=8, help="target layers kept (the first N)")
    ap.add_argument("--new-layers", type=int, default=2, help="trained layers on top")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--samples", type=int, default=0, help="extra sampled continuations per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--corpus-chunks", type=int, default=200,
                    help="extra text chunks (Python docs and stdlib code) scored by the target")
    ap.add_argument("--accum", type=int, default=2, help="sequences per optimiser step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (at most 2; 1 is faster when other jobs share the cores)")
    ap.add_argument("--out-dir", default=None, help="where to write (default: runtime/data)")
    ap.add_argument("--cache-dir", default=None)
    return ap.parse_args(argv)


def log(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from analysis.checks import check_int, check_positive
    from runtime import distill
    from runtime.drafter import DATA_DIR, DrafterSpec, file_sha256, save_drafter_spec
    from runtime.pair import prepare_target
    from runtime.prompts import load_prompts

    check_int("--keep", args.keep, 1, 29)
    check_int("--new-layers", args.new_layers, 0, 4)
    check_int("--epochs", args.epochs, 1, 100)
    check_int("--samples", args.samples, 0, 16)
    check_int("--corpus-chunks", args.corpus_chunks, 0, 100000)
    check_int("--accum", args.accum, 1, 64)
    check_positive("--lr", args.lr)
    torch.set_num_threads(max(1, min(args.threads, 2)))
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    target_dir = prepare_target(args.cache_dir)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    n_layers = target.config.num_hidden_layers
    check_int("--keep + --new-layers", args.keep + args.new_layers, 1, n_layers)
    init_from = tuple(range(args.keep, args.keep + args.new_layers))  # start as the next layers
    spec = DrafterSpec(kept_layers=tuple(range(args.keep)), new_layers=args.new_layers,
                       init_from=init_from)
    texts = [p.chat_text(tok) for p in load_prompts(split="train")]
    seqs = distill.generate(target, tok, texts, args.max_new_tokens, greedy=True, seed=args.seed)
    log(f"greedy continuations: {len(seqs)}", t0)
    for s in range(args.samples):
        seqs += distill.generate(target, tok, texts, args.max_new_tokens, greedy=False,
                                 temperature=0.8, seed=args.seed + 1000 * (s + 1))
        log(f"sampled continuations, round {s + 1}: {len(seqs)} sequences", t0)
    seqs += distill.corpus_sequences(tok, args.corpus_chunks, seed=args.seed)
    feats = distill.collect_features(target, seqs, args.keep)
    log(f"features of {sum(len(s.gen) for s in seqs)} generated tokens", t0)
    drafter = distill.build_drafter_model(target, spec)
    del target
    stats = distill.train_new_layers(drafter, feats, args.keep, epochs=args.epochs, lr=args.lr,
                                     accum=args.accum, seed=args.seed)
    n_own = len(texts) * (1 + args.samples)  # the target's own continuations come first
    own = distill.Features(feats.hidden[:n_own], feats.final[:n_own], feats.start[:n_own])
    after = distill.feature_acceptance(drafter, own, args.keep, 4)
    log(f"mean acceptance length (k=4) on the training continuations: {after[0]:.3f}", t0)
    out_dir = Path(args.out_dir) if args.out_dir else DATA_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = out_dir / spec.weights_file
    tensors = distill.trainable_state(drafter, args.keep, train_norm=True)
    save_file({k: v.to(torch.float16).contiguous() for k, v in tensors.items()}, str(weights),
              metadata={"format": "pt"})
    info = {"seed": args.seed, "epochs": args.epochs, "lr": args.lr, "samples": args.samples,
            "corpus_chunks": args.corpus_chunks, "accum": args.accum, "keep": args.keep,
            "max_new_tokens": args.max_new_tokens, "train_sequences": len(seqs),
            "train_kl": round(stats["kl"], 4), "train_agree": round(after[1], 4),
            "train_mal_k4": round(after[0], 4), "seconds": round(time.perf_counter() - t0, 1)}
    spec = DrafterSpec(kept_layers=spec.kept_layers, new_layers=spec.new_layers,
                       init_from=spec.init_from, sha256=file_sha256(weights), info=info)
    save_drafter_spec(spec, out_dir / "drafter.json")
    log(f"wrote {weights} ({weights.stat().st_size / 1e6:.1f} MB) and {out_dir / 'drafter.json'}", t0)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, FileNotFoundError) as exc:
        print(f"train_drafter: error: {exc}", file=sys.stderr)
        sys.exit(2)
