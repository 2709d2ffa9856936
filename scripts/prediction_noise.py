"""How much Monte Carlo noise does the demo's prediction of one run carry?

    .venv/bin/python scripts/prediction_noise.py psdlab-demo sd_k4_m4_r1 [--seeds 400]

The demo predicts each run by replaying it in the calibrated simulator with the seeds of
``validation.demo.SEEDS`` (0-4 before that constant; ``--demo-seeds``) and averaging: the
acceptance model draws each request's own level and each verification's accepted tokens from
those seeds.  Every run of a demo has the same seeded output lengths and the same style order,
so the same seeds give every window of prompts the same draws: whatever those seeds' draws
miss, every demo and every window misses alike.  This replays one run with ``--seeds`` seeds, one at a time, with the demo's
calibrated model and replay parameters, and prints per metric (acceptance rate, mean TPOT,
throughput): the mean over the demo's seeds, the mean over all seeds, and the SD of one seed.

A diagnostic of the prediction's own noise, not a fit: nothing is written.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

METRICS = (("acceptance_rate", "acceptance rate (VSR)"), ("tpot.mean", "mean TPOT (s)"),
           ("throughput_tok_s", "throughput (tok/s)"))


def per_seed(folder: str, run: str, seeds: int) -> list[dict]:
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.compare import predict
    from psdlab.validation.replay_model import load_replay_params
    model_path = os.path.join(folder, "model.json")
    with open(model_path, encoding="utf-8") as fh:
        params = load_replay_params(json.load(fh))
    trace = read_trace(os.path.join(folder, "traces", f"{run}.jsonl"))
    return [predict(trace, model_path, seeds=(s,), params=params)[0] for s in range(seeds)]


def main(argv: list[str] | None = None) -> int:
    from psdlab.validation.demo import SEEDS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("demo", help="a psdlab demo folder (model.json, traces/)")
    ap.add_argument("run", help="a run of it, e.g. sd_k4_m4_r1")
    ap.add_argument("--seeds", type=int, default=400, help="seeds 0 .. N-1 (10..5000)")
    ap.add_argument("--demo-seeds", type=int, default=None,
                    help=f"how many seeds the demo averaged (default {len(SEEDS)}, or --seeds "
                         f"when fewer; 5 before validation.demo.SEEDS)")
    args = ap.parse_args(argv)
    if not 10 <= args.seeds <= 5000:
        print(f"--seeds: must be in 10..5000, got {args.seeds}", file=sys.stderr)
        return 2
    if args.demo_seeds is None:
        args.demo_seeds = min(len(SEEDS), args.seeds)
    if not 1 <= args.demo_seeds <= args.seeds:
        print(f"--demo-seeds: must be in 1..{args.seeds}, got {args.demo_seeds}",
              file=sys.stderr)
        return 2
    for need in ("model.json", os.path.join("traces", f"{args.run}.jsonl")):
        if not os.path.isfile(os.path.join(args.demo, need)):
            print(f"demo: {os.path.join(args.demo, need)} not found", file=sys.stderr)
            return 2
    rows = per_seed(args.demo, args.run, args.seeds)
    demo_seeds = rows[:args.demo_seeds]
    print(f"{args.run}: {args.seeds} seeds, one replay each; the demo averages seeds "
          f"0-{args.demo_seeds - 1}")
    head = f"demo ({args.demo_seeds} seeds)"
    print(f"{'metric':24s} {head:>16s} {'all seeds':>11s} {'demo / all - 1':>15s} "
          f"{'SD of one seed':>15s}")
    for key, label in METRICS:
        vals = [r[key] for r in rows if r.get(key) is not None]
        five = [r[key] for r in demo_seeds if r.get(key) is not None]
        if len(vals) < 2 or not five:
            continue
        mean, five_mean = statistics.fmean(vals), statistics.fmean(five)
        sd = statistics.stdev(vals)
        print(f"{label:24s} {five_mean:16.4f} {mean:11.4f} {five_mean / mean - 1:+15.1%} "
              f"{sd / mean:15.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
