"""`psdlab frontier`: the paper's theory against a measured drafting Pareto frontier (a family
of early exits of the target plus the committed drafter, SD-separate and PSD runs of each)."""
from __future__ import annotations

import argparse
import json


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


def parse_depths(text: str) -> tuple[int, ...]:
    out = []
    for item in str(text).split(","):
        try:
            out.append(int(item.strip()))
        except ValueError:
            raise ValueError(f"--depths: expected comma-separated integers >= 1, got {item!r}") \
                from None
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from psdlab.validation.frontier.run_frontier import FrontierPlan, quick_plan, run_frontier
    from psdlab.validation.frontier.outputs import finite
    from psdlab.validation.frontier.summary import terminal_summary
    if (args.target is None) != (args.draft is None):
        raise ValueError("--target/--draft: give both (model directories) or neither (the "
                         "real pair)")
    plan = quick_plan(args.k, args.batch) if args.quick else FrontierPlan(k=args.k, m=args.batch)
    changes = {key: value for key, value in (("num_prompts", args.prompts),
                                             ("max_new_tokens", args.max_new_tokens),
                                             ("rounds", args.rounds)) if value is not None}
    changes["backend"] = args.backend
    if args.depths is not None:
        changes["depths"] = parse_depths(args.depths)
    plan = replace(plan, **changes)
    result = run_frontier(args.output, plan, args.target, args.draft, quiet=args.json,
                          prompts_file=args.prompts_file)
    print(json.dumps(finite(result)) if args.json else terminal_summary(result))
    return 0
