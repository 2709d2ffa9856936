"""`psdlab bench-gpu`: the one GPU command (`validation.gpu.bench_gpu`).  Options left out take
`GpuBenchConfig`'s defaults (read when the command runs: building the parser imports nothing
of psdlab.validation)."""
from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-gpu", help="passes, AR / SD-sep / PSD runs, the simulator and the lossless "
                          "rule on a GPU",
        description="Per pass kind psdlab eager, psdlab CUDA graphs, Hugging Face eager and "
                    "the memory floor; AR, SD-separate and PSD at each m with the closed form "
                    "and the simulator calibrated on round 1, judged on round 2; the lossless "
                    "rule (docs/cuda.md). Writes summary.json and summary.md. --device cpu is "
                    "the dry run (tiny models). Defaults: psdlab.validation.gpu.bench_gpu.")
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for the dry run")
    p.add_argument("-o", "--out", default=None, help="output folder (default bench_gpu_out)")
    p.add_argument("--target", default=None, help="HF safetensors directory (default: random)")
    p.add_argument("--drafter", default=None, help="HF safetensors directory (default: random)")
    p.add_argument("--target-size", default=None, help="random target: 1.3b (GPU), tiny (CPU)")
    p.add_argument("--drafter-size", default=None, help="random drafter: 0.15b, tiny-draft")
    p.add_argument("--vocab", type=int, default=None, help="random models' vocabulary")
    p.add_argument("--dtype", default=None, choices=("float32", "float16", "bfloat16"))
    p.add_argument("--k", type=int, default=None, help="draft length (default 4)")
    p.add_argument("--batches", default=None, help="m values, e.g. 4,8 (the default)")
    p.add_argument("--num-prompts", type=int, default=None)
    p.add_argument("--prompt-len", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--controlled-alpha", default=None,
                   help="acceptance per position (default 0.7 for random models; none: the "
                        "drafter's own)")
    p.add_argument("--passes", default=None, choices=("auto", "dynamic", "static", "graphs"))
    p.add_argument("--no-batch-invariant", dest="batch_invariant", action="store_false",
                   default=None,
                   help="run the target's passes at their own shapes (bf16 may then depart "
                        "from AR at near-ties; the rule judges each departure)")
    p.add_argument("--repeats", type=int, default=None, help="timed passes per kind")
    p.add_argument("--budget-s", type=float, default=None, help="default 420")
    p.add_argument("--sections", default=None,
                   help="which parts to run, in their order (default: "
                        "passes,invariant,runs,compiled)")
    p.add_argument("--json", action="store_true", help="print summary.json's path and verdict")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> Any:
    from psdlab.analysis.checks import check_choice, check_int, check_range
    from psdlab.validation.gpu.bench_gpu import SECTIONS, SIZES, GpuBenchConfig
    if not args.device.startswith(("cpu", "cuda")):
        raise ValueError(f"--device: cpu or cuda:N, got {args.device!r}")
    cpu = args.device == "cpu"
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if v is not None and k in
                             GpuBenchConfig.__dataclass_fields__}
    if args.batches is not None:
        try:
            given["batches"] = tuple(int(x) for x in args.batches.split(","))
        except ValueError:
            raise ValueError(f"--batches: comma-separated integers >= 1, got "
                             f"{args.batches!r}") from None
        for m in given["batches"]:
            check_int("--batches", m, minimum=1, maximum=512)
    if args.sections is not None:
        given["sections"] = tuple(x for x in args.sections.split(",") if x)
        if not given["sections"] or any(x not in SECTIONS for x in given["sections"]):
            raise ValueError(f"--sections: a comma-separated subset of {','.join(SECTIONS)}, "
                             f"got {args.sections!r}")
    if args.controlled_alpha is not None:
        given["controlled_alpha"] = (None if args.controlled_alpha in ("none", "") else
                                     check_range("--controlled-alpha",
                                                 float(args.controlled_alpha), 0.0, 1.0))
    elif args.target is not None:
        given["controlled_alpha"] = None        # a real pair: its own acceptance
    for size in ("target_size", "drafter_size"):
        if size in given:
            check_choice(f"--{size.replace('_', '-')}", given[size], tuple(sorted(SIZES)))
    if (args.target is None) != (args.drafter is None):
        raise ValueError("--target/--drafter: give both model directories or neither")
    given["target_dir"], given["drafter_dir"] = args.target, args.drafter
    if cpu:                                      # the dry run: tiny models in float32
        given = {"target_size": "tiny", "drafter_size": "tiny-draft", "vocab": 256,
                 "dtype": "float32", **given}
    cfg = GpuBenchConfig(**given)
    check_int("--k", cfg.k, minimum=1, maximum=16)
    for name in ("num_prompts", "prompt_len", "max_new_tokens", "rounds", "repeats"):
        check_int(f"--{name.replace('_', '-')}", getattr(cfg, name), minimum=1)
    check_range("--budget-s", cfg.budget_s, 1.0, 86400.0)
    return cfg


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from psdlab.validation.gpu.bench_gpu import run_gpu_bench
    cfg = config_from_args(args)
    if cfg.device == "cpu":
        import torch
        torch.set_num_threads(1)
    summary = run_gpu_bench(cfg, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json.dumps({"summary": f"{cfg.out}/summary.json", "lossless": summary["lossless"],
                          "wall_s": summary["wall_s"]}))
    else:
        print((Path(cfg.out) / "summary.md").read_text())
    return 0 if summary["lossless"] else 1
