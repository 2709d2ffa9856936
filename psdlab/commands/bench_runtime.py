"""`psdlab bench-runtime`: measured PSD vs SD-separate gain, t, V and overlap on this machine.
This module parses the arguments and prints; ``runtime.run_command.bench_runtime_command`` does
the rest."""
from __future__ import annotations

import argparse

from psdlab.cli_options import add_worker_args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench-runtime", help="measure PSD against SD-separate with real models on two devices",
        description="Drafter on one CPU core, target on another: runs SD-separate (batch m), "
                    "PSD (2 x m, iso-batch) and PSD (2 x m/2, iso-concurrency) on the same "
                    "greedy requests with the real pair (or --target/--draft) and prints the "
                    "measured t, V, PSD/SD throughput ratios, the closed-form prediction "
                    "(t+V)/max(t,V) and the overlap.")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--batch", type=int, default=16,
                   help="m (default 16: on one CPU core the target's verification of 16 "
                        "sequences costs more than the drafter's k passes, t < V, the regime "
                        "PSD is for; at m = 4 the shipped drafter is the slower side)")
    p.add_argument("--num-prompts", type=int, default=32,
                   help="requests (the prompts are repeated when the file holds fewer)")
    p.add_argument("--rounds", type=int, default=2,
                   help="repeat the SD / PSD runs this many times, interleaved")
    p.add_argument("--prompts", default=None, help="prompts file (default: shipped held-out)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--target", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--device", default="cpu", help="cpu, or cuda:N (the target's GPU)")
    p.add_argument("--drafter-device", default=None,
                   help="CUDA: the drafter's GPU (default: a second stream on --device)")
    add_worker_args(p)
    p.add_argument("--steps-fraction", type=float, default=1.0,
                   help="measure over the first fraction of steps (the paper's tail cut)")
    p.add_argument("--trace-dir", default=None, help="write sd/psd traces here")
    p.add_argument("--json", action="store_true",
                   help="one JSON object (t_ms, v_ms, measured_gain, predicted_gain, overlap, ...)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.runtime.run_command import bench_runtime_command
    print(bench_runtime_command(args))
    return 0
