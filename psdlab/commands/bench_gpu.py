"""`psdlab bench-gpu`: the one GPU command (`validation.gpu.bench_gpu`).  Options left out take
`GpuBenchConfig`'s defaults (read when the command runs: building the parser imports nothing
of psdlab.validation)."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from psdlab.runtime.pass_modes import PASSES
    p = subparsers.add_parser(
        "bench-gpu", help="passes, AR / SD-sep / PSD runs, the simulator and the lossless "
                          "rule on a GPU",
        description="Per pass kind psdlab eager, psdlab CUDA graphs, Hugging Face eager and "
                    "the memory floor; AR, SD-separate and PSD at each m with the closed form "
                    "and the simulator calibrated on AR, SD-sep and a co-run probe, judged on "
                    "every PSD run (PSD predicted before it ran); the lossless "
                    "rule (docs/cuda.md). Writes summary.json and summary.md. --device cpu is "
                    "the dry run (tiny models). Defaults: "
                    "psdlab.validation.gpu.gpu_results.GpuBenchConfig.")
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
    p.add_argument("--passes", default=None, choices=PASSES,
                   help="psdlab's passes in every section (default auto: fused-k on a GPU)")
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


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_output_path
    from psdlab.validation.gpu.bench_gpu import bench_gpu_command
    if args.out:
        check_output_path("--out", args.out, folder=True)       # before any pass runs
    text, lossless = bench_gpu_command(vars(args), as_json=args.json)
    print(text)
    return 0 if lossless else 1
