"""`psdlab systems`: whole serving systems through the simulator with the engine step model.

- ``psdlab systems check [-o FILE]``: every system-level public point
  (sim/costs/public_systems.toml) priced through the simulator, predicted vs published,
  fitted or held out (``sim.system_check``);
- ``psdlab systems gain [-o FILE] [--quick]``: the paper's Settings 1-3 and 5, predicted
  best-k PSD/SD gains with the engine step model and their decomposition
  (``paper_figs.settings_gain``).

This module parses the arguments and prints; ``paper_figs.systems_command`` does the rest.
"""
from __future__ import annotations

import argparse
import sys

from psdlab.cli import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "systems", help="whole systems through the simulator with the engine step model: "
                        "check public system points, or the paper settings' PSD/SD gains",
        description="check: every point of sim/costs/public_systems.toml (throughput, TPOT, "
                    "ITL, SD speedups, per-step CPU overheads of real engines) simulated with "
                    "its engine's GPU preset and engine step preset (sim/costs/engine_steps."
                    "toml), predicted vs published, marked fitted or held out.  gain: the "
                    "MineDraft Settings 1-3 and 5 (vllm-eager passes, vllm-v0 engine step), "
                    "best-k PSD/SD throughput gain and latency reduction beside the paper's "
                    "claims, and the terms between the per-step and the system ratio.  -o FILE "
                    "writes JSON and a markdown table beside it (FILE with .md).")
    p.add_argument("what", choices=("check", "gain"), help="check | gain")
    p.add_argument("-o", "--out", metavar="FILE", help="write the results (JSON; and .md)")
    p.add_argument("--quick", action="store_true",
                   help="gain: 4m requests per run instead of the paper's 1000 (a smoke run)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--points", metavar="FILE",
                   help="check: the public points file (default sim/costs/public_systems.toml)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.seed < 0:
        raise UsageError(f"--seed: must be >= 0, got {args.seed}")
    from psdlab.analysis.checks import check_output_path
    from psdlab.paper_figs.systems_command import systems_command
    if args.out:
        check_output_path("--out", args.out)                    # before the simulations run
    text, wrote = systems_command(args.what, out=args.out, quick=args.quick, seed=args.seed,
                                  points=args.points, as_json=args.json)
    for line in wrote:
        print(line, file=sys.stderr)
    print(text)
    return 0
