"""Command-line arguments and entry point shared by ``psdlab figs`` and
``python -m psdlab.paper_figs`` (argparse only at import time; matplotlib and the simulator are
imported when it runs)."""
from __future__ import annotations

import argparse
import json
import sys
import time

EPILOG = ("Figures (--only names): theory (fig1), throughput_k (fig2), batch_ablation (fig3), "
          "lifespan (fig4), step_times (fig5), validation (fig6). Each writes OUTDIR/figN_*.png "
          "and the CSV(s) of the numbers behind it. Measured panels need --traces (psdlab run "
          "traces) and fig6 needs --validation FILE or two or more traces; without them those "
          "panels are skipped with a note. Acceptance rates of the Qwen3 drafters are "
          "assumptions (0.60/0.70/0.78), labelled as such. --json keys: outdir, quick, "
          "seconds, figures (name, pngs, csvs, notes, skipped).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("outdir", metavar="OUTDIR", help="directory for the PNG and CSV files "
                                                    "(created if missing)")
    p.add_argument("--only", default=None, metavar="NAME[,NAME...]",
                   help="make only these figures (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="reduced grid (fewer simulated requests): seconds instead of minutes")
    p.add_argument("--traces", action="append", default=[], metavar="DIR|FILE",
                   help="measured traces (a directory of *.jsonl or a file; repeatable)")
    p.add_argument("--validation", default=None, metavar="FILE",
                   help="JSON of predicted vs measured pairs (psdlab validate) for fig6")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object (no progress bar)")


def run_args(args: argparse.Namespace) -> int:
    import os

    from psdlab.analysis.checks import check_int
    from psdlab.paper_figs.common import FigOptions, trace_files
    from psdlab.paper_figs.registry import make_figures, parse_only

    names = parse_only(args.only)
    check_int("--seed", args.seed, 0)
    if args.validation and not os.path.isfile(args.validation):
        raise FileNotFoundError(2, "No such file", args.validation)
    if args.validation and "validation" in names:
        from psdlab.paper_figs.fig_validation import read_validation
        read_validation(args.validation)        # bad input fails before any figure is made
    opts = FigOptions(outdir=args.outdir, quick=args.quick, traces=trace_files(args.traces),
                      validation=args.validation, seed=args.seed)
    t0 = time.perf_counter()
    outputs = make_figures(opts, names, progress=not args.json)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"outdir": opts.outdir, "quick": opts.quick,
                          "seconds": round(seconds, 2),
                          "figures": [o.to_dict() for o in outputs]}))
        return 0
    for o in outputs:
        status = "skipped" if o.skipped else ", ".join(o.pngs + o.csvs)
        print(f"{o.name}: {status}")
        for note in o.notes:
            print(f"  note: {note}")
    print(f"{len(outputs)} figure(s) in {seconds:.1f} s -> {opts.outdir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m psdlab.paper_figs",
                                     description="Regenerate psdlab's figures (PNG + CSV).",
                                     epilog=EPILOG)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_args(args)
    except (ValueError, FileNotFoundError) as exc:
        msg = (f"{exc.strerror}: {exc.filename}" if isinstance(exc, FileNotFoundError)
               and exc.filename else str(exc).splitlines()[0])
        print(f"{parser.prog}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
