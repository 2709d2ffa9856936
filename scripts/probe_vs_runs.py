"""Does the untimed acceptance probe see what the timed runs saw, on the prompts they served?

    .venv/bin/python scripts/probe_vs_runs.py psdlab-demo [--side heldout]

The acceptance pool is measured by ``runtime.acceptance_probe`` (the target's AR output, then
one teacher-forced drafter pass), the timed runs by the engine's own drafts and verifications.
With greedy decoding both give a request's match pattern, so on the same prompt they should
agree at every position a run observed.  This probes, untimed, the prompts the side's timed
runs served (the demo's own target and drafter, from the cache) and prints:

- position agreement: of the positions the runs observed (``validation.match_patterns``),
  the share where the probe's pattern says the same, by style;
- the acceptance rate the runs measured (accepted / proposed over every verification) beside
  the probe's patterns walked greedily at each run's k and each request's output length
  (``validation.acceptance_pool.walk``), request by request: the same prompts, so a gap here
  is the probe's, not prompt sampling's.

A diagnostic of the reasons for a miss, not a fit: nothing is written.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from collections import defaultdict

SIDES = {"calibrate": "calibration", "repeat": "calibration", "validate": "heldout"}


def side_traces(folder: str, side: str) -> list:
    from psdlab.analysis.trace import read_trace
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "traces", "*.jsonl"))):
        tr = read_trace(path)
        if SIDES.get((tr.run.extra or {}).get("demo_role")) == side and tr.run.k:
            out.append(tr)
    return out


def agreement(traces: list, probed: dict[str, str]) -> dict[str, list[int]]:
    """style -> [positions observed, positions the probe agrees at]."""
    from psdlab.sim.acceptance_fitted import style_of
    from psdlab.validation.acceptance_transfer import prompt_of
    from psdlab.validation.match_patterns import observations
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for tr in traces:
        for rid, by_pos in observations(tr).items():
            pat = probed.get(prompt_of(rid))
            if pat is None:
                continue
            row = out[style_of(rid)]
            for p, vals in by_pos.items():
                for v in vals:
                    row[0] += 1
                    row[1] += int(p < len(pat) and pat[p] == str(v))
    return out


def rates(traces: list, probed: dict[str, str]) -> dict[str, list[float]]:
    """style -> [measured accepted, proposed, probe-walked accepted, proposed]."""
    from psdlab.sim.acceptance_fitted import style_of
    from psdlab.validation.acceptance_pool import walk
    from psdlab.validation.acceptance_transfer import prompt_of
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for tr in traces:
        k = int(tr.run.k)
        for step in tr.steps:
            for v in step.verified:
                row = out[style_of(v.req)]
                row[0] += v.accepted
                row[1] += v.proposed
        for r in tr.requests:
            pat = probed.get(prompt_of(r.id))
            if pat is None:
                continue
            row = out[style_of(r.id)]
            for _, proposed, accepted in walk(pat[:int(r.output_len)], k):
                row[2] += accepted
                row[3] += proposed
    return out


def probe_served(traces: list, side: str) -> dict[str, str] | None:
    """The probe's patterns of the shipped prompts the traces served, with the models the
    traces name (None when the target has no tokenizer)."""
    from psdlab.runtime.acceptance_probe import probe_patterns
    from psdlab.validation.acceptance_transfer import prompt_of
    from psdlab.validation.demo_prompts import side_prompts
    from psdlab.runtime.session import load_tokenizer, tokenizer_dir
    models = traces[0].run.models or {}
    target, drafter = models.get("target", ""), models.get("drafter", "")
    if tokenizer_dir(target) is None:
        return None
    served = {prompt_of(r.id) for tr in traces for r in tr.requests}
    items = [(rid, ids) for rid, ids in side_prompts(load_tokenizer(target), None, side)
             if rid in served]
    max_new = max(int(r.output_len) for tr in traces for r in tr.requests)
    return probe_patterns(target, drafter, items, max_new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("demo", help="a psdlab demo folder (with traces/)")
    ap.add_argument("--side", choices=("calibration", "heldout"), default="heldout")
    args = ap.parse_args(argv)
    traces = side_traces(args.demo, args.side)
    if not traces:
        print(f"demo: no {args.side} SD/PSD traces in {args.demo}/traces", file=sys.stderr)
        return 2
    probed = probe_served(traces, args.side)
    if probed is None:
        print(f"target: {traces[0].run.models.get('target')} has no tokenizer, so the shipped "
              f"prompts cannot be encoded for it", file=sys.stderr)
        return 2
    agree, rate = agreement(traces, probed), rates(traces, probed)
    print(f"{args.side}: {len(probed)} prompts probed, {len(traces)} timed SD/PSD runs")
    print(f"{'style':10s} {'observed':>9s} {'agree':>7s}  {'measured rate':>13s} "
          f"{'probe walked':>12s}")
    for style in sorted(set(agree) | set(rate)) + ["all"]:
        if style == "all":
            a = [sum(v[i] for v in agree.values()) for i in range(2)]
            r = [sum(v[i] for v in rate.values()) for i in range(4)]
        else:
            a, r = agree.get(style, [0, 0]), rate.get(style, [0, 0, 0, 0])
        share = a[1] / a[0] if a[0] else float("nan")
        m = r[0] / r[1] if r[1] else float("nan")
        w = r[2] / r[3] if r[3] else float("nan")
        print(f"{style:10s} {a[0]:9d} {share:7.1%}  {m:13.3f} {w:12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
