"""Hugging Face assisted generation: host time per step by k, measured here (issue 45).

Runs greedy ``generate`` without an assistant (AR) and with one (k = 1..8 drafted tokens per
step) on small random Llama models (hidden 128, vocabulary 256; the drafter is the target's
first layers plus small noise, so drafts are partly accepted), one torch thread, batch 1 (the
only batch assisted generation serves), and writes per (mode, k, target layers) the host time
per step and its parts (runtime/hf_assisted_host.py says what each part holds), with the
repeat-to-repeat noise, and lines fitted through the cells:

- per target layer count, ``target_host_ms = fixed + per_token x (k + 1) + sd x [assisted]``,
- and ``draft_host_ms = fixed + per_pass x k`` (assisted; the drafter's layers are fixed).

    .venv/bin/python benchmarks/hf_assisted_host.py --out results/engine/hf_assisted_step_host.json

(a few minutes on 2 shared cores; the file records the load average, and each cell's repeat
medians show the noise).  `sim/costs/engine_steps.toml` preset ``hf-assisted`` reads its fits.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Sequence

from psdlab.analysis.atomic_write import write_json_and_markdown
from psdlab.validation.engine.host_steps import fit_line, parse_ints, summarize_cell

KEYS = ("host", "host_cpu", "draft_host", "target_host", "draft_host_cpu", "target_host_cpu",
        "crop", "strategy", "verify_host", "forward", "wall")
PARTS = ("draft_host", "crop", "strategy", "verify_host")


def build_pair(layers: int, draft_layers: int, seed: int) -> tuple[Any, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    base: dict[str, Any] = dict(vocab_size=256, hidden_size=128, intermediate_size=256,
                                num_attention_heads=2, num_key_value_heads=2,
                                max_position_embeddings=1024, bos_token_id=1, eos_token_id=2,
                                pad_token_id=0)
    torch.manual_seed(seed)
    target = LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, **base)).eval()
    drafter = LlamaForCausalLM(LlamaConfig(num_hidden_layers=draft_layers, **base)).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    state = {k: v + 0.005 * torch.randn(v.shape, generator=gen)
             for k, v in target.state_dict().items() if k in drafter.state_dict()}
    drafter.load_state_dict(state, strict=False)
    return target, drafter


def run_cells(args: argparse.Namespace, layers: int) -> list[dict[str, Any]]:
    import torch
    from psdlab.runtime.hf_assisted_host import generate_steps
    target, drafter = build_pair(layers, args.draft_layers, args.seed)
    g = torch.Generator().manual_seed(args.seed)
    prompts = [torch.randint(3, 256, (1, args.prompt_len), generator=g)
               for _ in range(args.prompts)]
    grid = [0] + list(args.ks)
    generate_steps(target, drafter, prompts[0], 2, 8)          # warm-up
    generate_steps(target, None, prompts[0], 0, 8)
    per: dict[int, list[list[dict[str, float]]]] = {k: [] for k in grid}
    for rep in range(args.repeats):
        for k in (grid if rep % 2 == 0 else list(reversed(grid))):
            run = []
            for p in prompts:
                run += generate_steps(target, drafter if k else None, p, k, args.new_tokens)
            per[k].append(run)
    cells = []
    for k in grid:
        cell = summarize_cell(per[k], keys=KEYS, parts=PARTS, mode="sd" if k else "ar", k=k,
                              label=f"sd-k{k}" if k else "ar", batch=1, layers=layers,
                              draft_layers=args.draft_layers if k else 0,
                              scheduled_tokens=k + 1)
        cells.append(cell)
        print(f"layers {layers:2d} {cell['label']:6s}: host {cell['host']['median']:6.3f} ms "
              f"(draft {cell['draft_host']['median']:.3f}, target "
              f"{cell['target_host']['median']:.3f}; repeat medians "
              + ", ".join(f"{x:.2f}" for x in cell["host"]["repeat_medians"])
              + f"; {cell['steps']} steps)", file=sys.stderr)
    return cells


def fitted(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per target layer count, in wall and in thread CPU time: the target side's line in
    scheduled tokens with an assisted-only constant (AR and assisted), and the drafter side's
    line in k (assisted)."""
    out: dict[str, Any] = {}
    for layers in sorted({c["layers"] for c in cells}):
        cs = [dict(c, sd=1.0 if c["k"] else 0.0) for c in cells if c["layers"] == layers]
        for suffix in ("", "_cpu"):
            out[f"target_host{suffix}@{layers}"] = fit_line(
                cs, f"target_host{suffix}", ("one", "scheduled_tokens", "sd"))
            out[f"draft_host{suffix}@{layers}"] = fit_line(
                [c for c in cs if c["k"]], f"draft_host{suffix}", ("one", "k"))
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# Hugging Face assisted generation: host time per step (transformers "
             f"{res['transformers_version']}, {res['date_utc']}, commit {res['git']['short']})",
             "", f"Machine: {res['machine']['cpu_model']}, {res['machine']['cpus']} CPUs, load "
             f"before {res['machine']['load_before']}.  Command: `{res['command']}`.", "",
             "Batch 1, greedy.  host = step wall - target and assistant passes; draft_host: "
             "get_candidates less the assistant's passes; target_host = host - draft_host.  "
             "ms, medians over all steady steps; 'repeats' = each repeat's median host.", "",
             "| layers | mode | k | host | host CPU | draft_host | crop | strategy | "
             "verify_host | forward | repeats | steps |", "|---" * 12 + "|"]
    for c in res["cells"]:
        p = c["parts_ms_median"]
        lines.append(f"| {c['layers']} | {c['mode']} | {c['k']} | {c['host']['median']:.3f} | "
                     f"{c['host_cpu']['median']:.3f} | {p['draft_host']:.3f} | "
                     f"{p['crop']:.3f} | {p['strategy']:.3f} | {p['verify_host']:.3f} | "
                     f"{c['forward']['median']:.3f} | "
                     + ", ".join(f"{x:.2f}" for x in c["host"]["repeat_medians"])
                     + f" | {c['steps']} |")
    lines += ["", "| fit | model | coefficients (ms) | R^2 |", "|---|---|---|---|"]
    for name, f in res["fits"].items():
        coef = ", ".join(f"{k} {v:.4f}" for k, v in f["coef_ms"].items())
        lines.append(f"| {name} | {f['model']} | {coef} | {f['r2']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/engine/hf_assisted_step_host.json")
    ap.add_argument("--ks", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--layers", default="2,16", help="target layer counts")
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        args.ks = parse_ints(args.ks, "--ks", 1, 8)
        layer_grid = parse_ints(args.layers, "--layers", 1, 64)
    except ValueError as e:
        ap.error(str(e))
    if args.repeats < 1 or args.prompts < 1 or args.new_tokens < 16 or args.draft_layers < 1:
        ap.error("--repeats >= 1, --prompts >= 1, --new-tokens >= 16, --draft-layers >= 1")
    import torch
    import transformers
    from psdlab.validation.results_file import git_info, machine_info
    torch.set_num_threads(1)
    load0 = list(os.getloadavg())
    t0 = time.time()
    cells = [c for layers in layer_grid for c in run_cells(args, layers)]
    res = {"what": "Hugging Face assisted generation host time per step (batch 1, greedy)",
           "command": "python benchmarks/hf_assisted_host.py "
                      + " ".join(sys.argv[1:] if argv is None else argv),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": git_info(),
           "transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "machine": {**machine_info(load0), "load_after": list(os.getloadavg())},
           "setup": {"models": "random Llama, hidden 128, vocab 256, fp32; drafter = the "
                               "target's first layers + 0.005 noise",
                     "ks": args.ks, "layers": layer_grid, "draft_layers": args.draft_layers,
                     "repeats": args.repeats, "prompts": args.prompts,
                     "new_tokens": args.new_tokens, "prompt_len": args.prompt_len,
                     "torch_threads": 1, "num_assistant_tokens_schedule": "constant",
                     "assistant_confidence_threshold": 0.0},
           "run_s": time.time() - t0, "cells": cells,
           "fits": fitted(cells)}
    write_json_and_markdown(res, args.out, markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
