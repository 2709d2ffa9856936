"""`psdlab demo`: the README's main job.  Runs the real model pair on this CPU in AR, SD and
PSD over the shipped prompts, calibrates the simulator on runs over one set of prompts,
predicts the held-out runs (a set written after every earlier demo, another k, Poisson
arrivals),
writes a report folder (markdown, CSVs, PNG figures, results.json with the machine, date and
commit) and ends with the measured gain, predicted gain and error, and what each gain
compares.  This module parses the arguments and prints; ``validation.demo.command`` does the
rest."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="the main job: measure AR/SD/PSD, calibrate, validate held-out runs, report",
        description="Prepare the real SmolLM2-135M pair (once), run it in AR, SD and PSD on "
                    "this CPU (drafter and target on their own cores) over the shipped "
                    "prompts at several k, batch sizes and arrival patterns, calibrate the "
                    "simulator on some runs, predict the held-out others and write a report "
                    "folder. PSD is predicted before it runs: the calibration reads AR and "
                    "SD-sep runs only, plus a co-run probe of the two models' passes at once; "
                    "every PSD run is held out. The default plan (an untimed probe of about "
                    "600 more calibration-side prompts' acceptance, the co-run probe, then 39 "
                    "runs: 3 calibration configurations (AR, SD-sep at k 2 and 4) three times "
                    "on split fresh3, 4 held-out ones seven times on 240 "
                    "fresh prompts (split fresh11) and 2 references once, 32 requests x up to "
                    "16 tokens each, in seeded random order) takes at most about 12 minutes "
                    "on a 2-core machine, analysis included "
                    "(--time-budget, 700 s, skips late repeats past it); --prompts and "
                    "--max-new-tokens scale it, --quick runs a short plan.")
    p.add_argument("-o", "--output", default="psdlab-demo", metavar="REPORT_DIR",
                   help="report folder (default ./psdlab-demo)")
    p.add_argument("--quick", action="store_true",
                   help="a short plan (few prompts and tokens): a smoke test, not a measurement")
    p.add_argument("--prompts", type=int, default=None, metavar="N",
                   help="requests per run (1..256; each repeat serves the next window of its "
                        "side's prompts; default 32)")
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                   help="tokens generated per prompt at most (2..512; default 16)")
    p.add_argument("--controlled-alpha", type=float, default=None, metavar="A",
                   help="controlled acceptance: send the target's greedy continuation as the "
                        "draft with probability A per position (for a drafter with useless "
                        "proposals; its compute, hence its time, stays real)")
    p.add_argument("--target", default=None, metavar="DIR",
                   help="target model directory (HF format) instead of the real pair")
    p.add_argument("--draft", default=None, metavar="DIR",
                   help="drafter model directory (with --target)")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="runs per configuration, in seeded random rounds; the comparison "
                        "uses their median (1..20; default 7 for the judged held-out "
                        "configurations, 3 for calibration and 1 for reference ones; 1 with "
                        "--quick)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="seed of the run order (default 0)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="seconds for the whole demo; repeats that would not finish in time "
                        "are skipped (default 700: 15 minutes less the set-up and a minute "
                        "to spare; 0 = no limit)")
    p.add_argument("--traces", default=None, metavar="TRACE_DIR",
                   help="do not run anything: calibrate, validate and report again on the "
                        "traces an earlier demo wrote (REPORT_DIR/traces)")
    p.add_argument("--diagnostics", action="store_true",
                   help="add the report's diagnostic sections (acceptance candidates, replays "
                        "under diagnostic acceptance models, the noise budget, the closed "
                        "form's inputs, the calibration's fits); the analysis takes longer")
    p.add_argument("--json", action="store_true",
                   help="print the result (summary, runs, files) as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.validation.demo.command import DemoOptions, demo_command
    lines = demo_command(DemoOptions(
        output=args.output, quick=args.quick, prompts=args.prompts,
        max_new_tokens=args.max_new_tokens, controlled_alpha=args.controlled_alpha,
        target=args.target, draft=args.draft, repeats=args.repeats, seed=args.seed,
        time_budget=args.time_budget, traces=args.traces, diagnostics=args.diagnostics,
        as_json=args.json))
    print("\n".join(lines))
    return 0
