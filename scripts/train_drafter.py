"""Distil the SmolLM2 drafter from the target (self-distillation), and save what it adds.

    python scripts/train_drafter.py [--keep 16] [--new-layers 2] [--synth-prompts 2000] [--epochs 2]

Steps: convert the target once (``runtime.model_pair.prepare_target``); let the target write
``--synth-prompts`` user requests of its own in the shipped styles (``runtime.distill_data``;
the held-out prompts are never used) and answer them and the shipped training prompts greedily
(bf16, batched; ``--data FILE`` caches these token sequences for reruns); optionally add
``--corpus-chunks`` chunks of text every Python install has; run the target once over all of it to
record the kept layers' output and the target's final hidden state; train the new layers
(initialised as copies of the target's next layers) and the final norm to minimise
KL(target || drafter); save those tensors in fp16 to ``runtime/data/drafter.safetensors`` and the
spec (including the dtype the runtime runs the drafter in, ``--dtype``) to
``runtime/data/drafter.json``. Seeded; at most two torch threads.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=int, default=16, help="target layers kept (the first N)")
    ap.add_argument("--new-layers", type=int, default=2, help="trained layers on top")
    ap.add_argument("--mlp-width", type=int, default=0,
                    help="MLP neurons of each new layer (0: the target's); narrower layers are "
                         "stored slim and zero-padded when the drafter is built")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--init-from", choices=("last", "next"), default="next",
                    help="new layers start as copies of the target's last layers or of the "
                         "layers after the kept ones")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--synth-prompts", type=int, default=2000,
                    help="user requests the target writes itself (distillation data)")
    ap.add_argument("--samples", type=int, default=0,
                    help="extra sampled continuations per shipped training prompt")
    ap.add_argument("--data", default=None,
                    help="cache file of the generated token sequences (reused when it exists)")
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "float16", "bfloat16"),
                    help="the dtype the runtime runs the drafter in (written to the spec)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--corpus-chunks", type=int, default=0,
                    help="extra text chunks (Python docs and stdlib code) scored by the target")
    ap.add_argument("--ce-weight", type=float, default=1.0,
                    help="weight of the cross-entropy of the target's top-1 token (added to KL)")
    ap.add_argument("--feat-weight", type=float, default=0.0,
                    help="weight of the smooth-L1 loss on the final hidden state (added to KL)")
    ap.add_argument("--accum", type=int, default=2, help="sequences per optimiser step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2,
                    help="processes (one per core) that generate the data")
    ap.add_argument("--threads", type=int, default=2,
                    help="torch threads (at most 2; 1 is faster when other jobs share the cores)")
    ap.add_argument("--out-dir", default=None, help="where to write (default: runtime/data)")
    ap.add_argument("--cache-dir", default=None)
    return ap.parse_args(argv)


def log(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def load_or_generate(args: argparse.Namespace, target_dir: Path, tok, t0: float) -> list:
    """Token sequences to distil on: cached in ``--data`` when given and present."""
    import json

    from transformers import AutoModelForCausalLM

    from psdlab.runtime import distill, distill_data
    from psdlab.runtime.prompts import load_prompts

    key = {"synth_prompts": args.synth_prompts, "samples": args.samples, "seed": args.seed,
           "max_new_tokens": args.max_new_tokens, "workers": args.workers}
    cache = Path(args.data) if args.data else None
    if cache is not None and cache.is_file():
        obj = json.loads(cache.read_text())
        if obj.get("key") == key:
            log(f"reusing {len(obj['seqs'])} sequences from {cache}", t0)
            return [distill.TokenSeq(tuple(p), tuple(g)) for p, g in obj["seqs"]]
    held = [p.text for p in load_prompts(split="heldout")]
    shipped = [p.text for p in load_prompts(split="train")]
    seqs = distill_data.generate_data(str(target_dir), args.synth_prompts, args.max_new_tokens,
                                      seed=args.seed, shipped=shipped, held=held,
                                      workers=args.workers)
    if args.samples:
        gen_model = AutoModelForCausalLM.from_pretrained(str(target_dir),
                                                         dtype=torch.bfloat16).eval()
        for s in range(args.samples):
            seqs += distill_data.answer(gen_model, tok, shipped, args.max_new_tokens,
                                        sample=True, seed=args.seed + 1000 * (s + 1))
    log(f"{len(seqs)} answers, {sum(len(s.gen) for s in seqs)} tokens", t0)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"key": key, "seqs": [[list(s.prompt), list(s.gen)]
                                                          for s in seqs]}))
    return seqs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from psdlab.analysis.checks import check_int, check_positive
    from psdlab.runtime import distill, distill_data
    from psdlab.runtime.drafter_build import (DATA_DIR, DrafterSpec, file_sha256, save_drafter_spec,
                                 slim_mlp_state)
    from psdlab.runtime.model_pair import prepare_target

    check_int("--keep", args.keep, 1, 29)
    check_int("--new-layers", args.new_layers, 0, 4)
    check_int("--epochs", args.epochs, 1, 100)
    check_int("--mlp-width", args.mlp_width, 0, 1 << 20)
    check_int("--synth-prompts", args.synth_prompts, 0, 100000)
    check_int("--samples", args.samples, 0, 16)
    check_int("--corpus-chunks", args.corpus_chunks, 0, 100000)
    check_int("--accum", args.accum, 1, 64)
    check_int("--workers", args.workers, 1, 64)
    check_positive("--lr", args.lr)
    torch.set_num_threads(max(1, min(args.threads, 2)))
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    target_dir = prepare_target(args.cache_dir)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    n_layers = target.config.num_hidden_layers
    check_int("--keep + --new-layers", args.keep + args.new_layers, 1, n_layers)
    if args.init_from == "last":  # start as the target's last layers (they feed the head)
        init_from = tuple(range(n_layers - args.new_layers, n_layers))
    else:  # start as the target's next layers
        init_from = tuple(range(args.keep, args.keep + args.new_layers))
    spec = DrafterSpec(kept_layers=tuple(range(args.keep)), new_layers=args.new_layers,
                       init_from=init_from, dtype=args.dtype)
    seqs = load_or_generate(args, target_dir, tok, t0)
    n_valid = max(1, len(seqs) // 20)  # the last 5% of the synthetic answers: a validation slice
    valid, seqs = seqs[-n_valid:], seqs[:-n_valid]
    seqs += distill.corpus_sequences(tok, args.corpus_chunks, seed=args.seed)
    feat_model = AutoModelForCausalLM.from_pretrained(
        str(target_dir), dtype=getattr(torch, args.dtype)).eval()
    feats = distill_data.features(feat_model, seqs, args.keep)
    valid_feats = distill_data.features(feat_model, valid, args.keep)
    del feat_model
    log(f"features of {sum(len(s.gen) for s in seqs)} tokens ({len(seqs)} sequences)", t0)
    drafter = distill.build_drafter_model(target, spec, args.mlp_width or None)
    del target
    before = distill.feature_acceptance(drafter, valid_feats, args.keep, 4)
    log(f"validation mean acceptance length (k=4) before training: {before[0]:.3f}", t0)
    stats = distill.train_new_layers(drafter, feats, args.keep, epochs=args.epochs, lr=args.lr,
                                     accum=args.accum, seed=args.seed,
                                     ce_weight=args.ce_weight, feat_weight=args.feat_weight)
    after = distill.feature_acceptance(drafter, valid_feats, args.keep, 4)
    log(f"validation mean acceptance length (k=4) after training: {after[0]:.3f} "
        f"(top-1 agreement {after[1]:.3f})", t0)
    out_dir = Path(args.out_dir) if args.out_dir else DATA_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = out_dir / spec.weights_file
    tensors = distill.trainable_state(drafter, args.keep, train_norm=True)
    if args.mlp_width:
        tensors = slim_mlp_state(tensors, args.mlp_width)
    save_file({k: v.to(torch.float16).contiguous() for k, v in tensors.items()}, str(weights),
              metadata={"format": "pt"})
    info = {"seed": args.seed, "epochs": args.epochs, "lr": args.lr, "init_from": args.init_from,
            "ce_weight": args.ce_weight, "feat_weight": args.feat_weight,
            "synth_prompts": args.synth_prompts, "samples": args.samples,
            "corpus_chunks": args.corpus_chunks, "accum": args.accum, "keep": args.keep,
            "mlp_width": args.mlp_width or None,
            "max_new_tokens": args.max_new_tokens, "train_sequences": len(seqs),
            "train_tokens": sum(len(s.gen) for s in seqs), "train_kl": round(stats["kl"], 4),
            "valid_sequences": len(valid), "valid_agree": round(after[1], 4),
            "valid_mal_k4": round(after[0], 4), "valid_mal_k4_untrained": round(before[0], 4),
            "seconds": round(time.perf_counter() - t0, 1)}
    spec = DrafterSpec(kept_layers=spec.kept_layers, new_layers=spec.new_layers,
                       init_from=spec.init_from, sha256=file_sha256(weights), dtype=args.dtype,
                       info=info)
    save_drafter_spec(spec, out_dir / "drafter.json")
    log(f"wrote {weights} ({weights.stat().st_size / 1e6:.1f} MB) and "
        f"{out_dir / 'drafter.json'}", t0)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, FileNotFoundError) as exc:
        print(f"train_drafter: error: {exc}", file=sys.stderr)
        sys.exit(2)
