"""`psdlab theory`: the exact PSD/SD ratio for the exponential frontier over alpha*V, the paper's
bound next to it, and a plain-words verdict on the "at least 37%" claim and Theorem 1.  This
module parses the arguments and prints; ``analysis.theory.report.theory_command`` does the rest."""
from __future__ import annotations

import argparse

DEFAULT_GRID = "0.001,0.01,0.1,0.2,0.5,1,1.2564,1.6783,2,3,5,5.5,10,30,100,1000"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "theory", help="exact T_SD/T_PSD vs the paper's Theorem 1 (exponential frontier)",
        description="Exact ratio T_SD/T_PSD and saving 1 - T_PSD/T_SD for the frontier "
                    "1 - exp(-alpha t), as a function of x = alpha*V, next to the paper's bound "
                    "(Lemma 1 lower bound / Lemma 2); says where the saving reaches the threshold "
                    "and whether Theorem 1 holds as stated.",
        epilog="--json keys: rows (alpha_v, ratio, saving, t_sd_opt [alpha*t], paper_bound "
               "[ratio bound], paper_saving_bound, theorem1_claim), peak (alpha_v, saving, "
               "ratio), region and paper_region ([lo, hi] intervals of alpha*V where the "
               "exact / the paper-bound saving >= threshold), theorem1_holds_as_stated, "
               "theorem1 (details), threshold, scan_range, units.")
    p.add_argument("--alpha-v", default=DEFAULT_GRID, metavar="X[,X...]",
                   help=f"comma-separated alpha*V values > 0 (default {DEFAULT_GRID})")
    p.add_argument("--threshold", type=float, default=0.37, metavar="S",
                   help="saving threshold in (0, 0.5] for the regions (default 0.37)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.theory.report import theory_command
    print(theory_command(args.alpha_v, args.threshold, as_json=args.json))
    return 0
