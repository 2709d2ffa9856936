"""How fast the machine ran each run of a demo, in the order they ran: the serial decode
phases of every run (batches of 2 or more) against the demo's calibrated cost model.

    .venv/bin/python scripts/speed_by_run.py psdlab-demo

One line per run, by start time: seconds since the first run, the 1-minute load average at
its start, and the mean of measured / predicted time over its serial draft phases and its
verify phases (with their counts).  The cost model is fitted on the calibration runs, so its
ratios average about 1 over them; a run whose ratios stand apart ran on a slower or faster
machine than the calibration saw (drift, another process), which no replay predicts.  A
diagnostic, nothing is written.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np


def ratios(trace, drafter, target) -> tuple[list[float], list[float]]:
    """Measured / predicted time of a trace's serial draft and verify phases (2+ sequences)."""
    draft, verify = [], []
    for st in trace.steps:
        if st.overlapped or any(p.kind == "prefill" for p in st.phases):
            continue
        width = max([v.proposed for v in st.verified] or [0]) + 1
        for p in st.phases:
            k = int(getattr(p, "forwards", 0) or 0)
            if p.seqs < 2:
                continue
            if p.kind == "draft" and k > 0:
                pred = sum(drafter.forward_time(p.seqs, p.seqs, p.context + j * p.seqs)
                           for j in range(k)) + drafter.phase_overhead
                draft.append((p.end - p.start) / pred)
            elif p.kind == "verify":
                pred = target.forward_time(p.seqs, p.seqs * width, p.context)
                verify.append((p.end - p.start) / pred)
    return draft, verify


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="a demo folder (holds model.json and traces/)")
    args = ap.parse_args(argv)
    model = os.path.join(args.demo, "model.json")
    if not os.path.isfile(model):
        print(f"demo: no model.json in {args.demo}", file=sys.stderr)
        return 2
    from psdlab.analysis.trace import read_trace
    from psdlab.sim.costs.calibrated import calibrated_cost
    from psdlab.validation.calibrate import with_draft_forwards
    drafter, target = calibrated_cost(model, "drafter"), calibrated_cost(model, "target")
    rows = []
    for path in glob.glob(os.path.join(args.demo, "traces", "*.jsonl")):
        tr = with_draft_forwards(read_trace(path))
        extra = tr.run.extra or {}
        d, v = ratios(tr, drafter, target)
        rows.append((float(extra.get("run_started", 0.0)), str(extra.get("demo_run", path)),
                     extra.get("load_1min"), d, v))
    if not rows:
        print(f"demo: no traces in {os.path.join(args.demo, 'traces')}", file=sys.stderr)
        return 2
    t0 = min(r[0] for r in rows)
    for start, name, load, d, v in sorted(rows):
        cells = [f"{label} {np.mean(x):.3f} ({len(x)})" if x else f"{label} -"
                 for label, x in (("draft", d), ("verify", v))]
        load_s = f"{load:.2f}" if load is not None else "-"
        print(f"{start - t0:6.0f} s  {name:>26}  load {load_s}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
