"""`psdlab frontier`: the paper's theory against a measured drafting Pareto frontier (a family
of early exits of the target plus the committed drafter, SD-separate and PSD runs of each).
This module parses the arguments and prints; ``validation.frontier.command`` does the rest."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "frontier", help="measure a drafter family's frontier and test the theory's optima on it",
        description="Builds early exits of the target (its first L layers, no trained weights) "
                    "and takes the committed drafter; runs each on this machine's two cores "
                    "(SD-separate at m, PSD at 2 x m and 2 x m/2, AR at m and 2m) on the "
                    "held-out prompts; measures t, V, VSR, mean acceptance length and time per "
                    "token; fits f(t) = 1 - exp(-alpha t) to the upper envelope; predicts the "
                    "best SD and PSD drafters (paper's model and psdlab's batch-aware model) "
                    "and compares them with the measured ones. Writes results.json, "
                    "frontier.csv, frontier.png and summary.md to the output folder.",
        epilog="--json prints the results object (plan, machine, family, points, measured, "
               "prediction, judgement, runs, files).")
    p.add_argument("-o", "--output", default="psdlab-frontier", metavar="DIR",
                   help="output folder (default ./psdlab-frontier)")
    p.add_argument("--k", type=int, default=4, help="draft tokens per step (1..64, default 4)")
    p.add_argument("--batch", type=int, default=4,
                   help="m: sequences verified per step (1..64, default 4)")
    p.add_argument("--depths", default=None, metavar="L[,L...]",
                   help="early-exit depths (default 2,8,28,29,30; --quick 2,30)")
    p.add_argument("--prompts", type=int, default=None, metavar="N",
                   help="requests per run (held-out prompts, repeated; default 24)")
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                   help="tokens per request (2..512, default 16)")
    p.add_argument("--rounds", type=int, default=None, metavar="R",
                   help="repeats of each drafter's SD / PSD runs (1..20, default 2)")
    p.add_argument("--prompts-file", default=None, metavar="FILE",
                   help="prompts (text or prompt_ids lines; default: the shipped held-out split)")
    p.add_argument("--backend", choices=("process", "inline"), default="process",
                   help="process: drafter and target on their own cores (default); inline: "
                        "one process, nothing overlaps (for smoke tests only)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run (two exits + the committed drafter, one short round)")
    p.add_argument("--target", default=None, metavar="DIR", help="target model directory")
    p.add_argument("--draft", default=None, metavar="DIR",
                   help="the family's trained drafter (with --target)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_output_path
    from psdlab.validation.frontier.command import frontier_command
    check_output_path("--output", args.output, folder=True)     # before any model loads
    print(frontier_command(
        args.output, k=args.k, batch=args.batch, depths=args.depths, prompts=args.prompts,
        max_new_tokens=args.max_new_tokens, rounds=args.rounds, prompts_file=args.prompts_file,
        backend=args.backend, quick=args.quick, target=args.target, draft=args.draft,
        as_json=args.json))
    return 0
