"""`psdlab figs OUTDIR`: regenerate the figures (PNG plus the CSV behind each) from code."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from psdlab.paper_figs.cli import EPILOG, add_arguments

    p = subparsers.add_parser(
        "figs", help="regenerate the figures (PNG + CSV) from theory, simulator and traces",
        description="Write figures 1-6 (theory, throughput vs k, batch ablation, request "
                    "lifespan, step times, validation) as PNG plus the CSV of the numbers "
                    "behind each, with a progress bar.", epilog=EPILOG)
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.paper_figs.cli import run_args
    return run_args(args)
