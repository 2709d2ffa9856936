"""`psdlab bench-gpu`: the one GPU command (`validation.gpu_bench`)."""
from __future__ import annotations

import argparse
import json

from psdlab.validation.gpu_bench import SECTIONS, SIZES, GpuBenchConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    d = GpuBenchConfig()
    p = subparsers.add_parser(
        "bench-gpu", help="passes, AR / SD-sep / PSD runs, the simulator and the lossless "
                          "rule on a GPU",
        description="Per pass kind psdlab eager, psdlab CUDA graphs, Hugging Face eager and "
                    "the memory floor; AR, SD-separate and PSD at each m with the closed form "
                    "and the simulator calibrated on round 1, judged on round 2; the lossless "
                    "rule (docs/cuda.md). Writes summary.json and summary.md. --device cpu is "
                    "the dry run (tiny models).")
    p.add_argument("--device", default=d.device, help="cuda:N, or cpu for the dry run")
    p.add_argument("-o", "--out", default=d.out)
    p.add_argument("--target", default=None, help="HF safetensors directory (default: random)")
    p.add_argument("--drafter", default=None, help="HF safetensors directory (default: random)")
    p.add_argument("--target-size", default=None, choices=sorted(SIZES))
    p.add_argument("--drafter-size", default=None, choices=sorted(SIZES))
    p.add_argument("--vocab", type=int, default=None, help="random models' vocabulary")
    p.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"))
    p.add_argument("--k", type=int, default=d.k)
    p.add_argument("--batches", default=",".join(map(str, d.batches)), help="m values, e.g. 4,8")
    p.add_argument("--num-prompts", type=int, default=d.num_prompts)
    p.add_argument("--prompt-len", type=int, default=d.prompt_len)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--rounds", type=int, default=d.rounds)
    p.add_argument("--controlled-alpha", default=str(d.controlled_alpha),
                   help="acceptance per position for random models (none: the real drafter's)")
    p.add_argument("--passes", default=d.passes, choices=("auto", "dynamic", "static", "graphs"))
    p.add_argument("--no-batch-invariant", dest="batch_invariant", action="store_false",
                   help="run the target's passes at their own shapes (bf16 may then depart "
                        "from AR at near-ties; the rule judges each departure)")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed passes per kind")
    p.add_argument("--budget-s", type=float, default=d.budget_s)
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"which parts to run, in their order: {','.join(SECTIONS)}")
    p.add_argument("--json", action="store_true", help="print summary.json's path and verdict")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> GpuBenchConfig:
    from psdlab.analysis.checks import check_int, check_range
    cpu = args.device == "cpu"
    try:
        batches = tuple(int(x) for x in args.batches.split(","))
    except ValueError:
        raise ValueError(f"--batches: comma-separated integers >= 1, got {args.batches!r}"
                         ) from None
    for m in batches:
        check_int("--batches", m, minimum=1, maximum=512)
    alpha = None if args.controlled_alpha in ("none", "") else check_range(
        "--controlled-alpha", float(args.controlled_alpha), 0.0, 1.0)
    check_int("--k", args.k, minimum=1, maximum=16)
    for name in ("num_prompts", "prompt_len", "max_new_tokens", "rounds", "repeats"):
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), minimum=1)
    check_range("--budget-s", args.budget_s, 1.0, 86400.0)
    sections = tuple(x for x in args.sections.split(",") if x)
    bad = [x for x in sections if x not in SECTIONS]
    if bad or not sections:
        raise ValueError(f"--sections: a comma-separated subset of {','.join(SECTIONS)}, got "
                         f"{args.sections!r}")
    if (args.target is None) != (args.drafter is None):
        raise ValueError("--target/--drafter: give both model directories or neither")
    if not args.device.startswith(("cpu", "cuda")):
        raise ValueError(f"--device: cpu or cuda:N, got {args.device!r}")
    return GpuBenchConfig(
        device=args.device, out=args.out, target_dir=args.target, drafter_dir=args.drafter,
        target_size=args.target_size or ("tiny" if cpu else "1.3b"),
        drafter_size=args.drafter_size or ("tiny-draft" if cpu else "0.15b"),
        vocab=args.vocab or (256 if cpu else 32000),
        dtype=args.dtype or ("float32" if cpu else "bfloat16"), k=args.k, batches=batches,
        num_prompts=args.num_prompts, prompt_len=args.prompt_len,
        max_new_tokens=args.max_new_tokens, rounds=args.rounds,
        controlled_alpha=None if args.target is not None and args.controlled_alpha == "0.7"
        else alpha, passes=args.passes, batch_invariant=args.batch_invariant,
        repeats=args.repeats, budget_s=args.budget_s, sections=sections)


def run(args: argparse.Namespace) -> int:
    from psdlab.validation.gpu_bench import run_bench
    cfg = config_from_args(args)
    if cfg.device == "cpu":
        import torch
        torch.set_num_threads(1)
    summary = run_bench(cfg, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json.dumps({"summary": f"{cfg.out}/summary.json", "lossless": summary["lossless"],
                          "wall_s": summary["wall_s"]}))
    else:
        print((__import__("pathlib").Path(cfg.out) / "summary.md").read_text())
    return 0 if summary["lossless"] else 1
