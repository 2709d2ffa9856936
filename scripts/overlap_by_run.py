"""How much slower (or faster) each PSD run's overlapped phases ran than the same shapes in
the serial run of its workload that ran nearest in time (``validation.solo_times.neighbour``),
in the order the runs ran: the run-to-run spread of the overlap contention a demo calibrates
on.

    .venv/bin/python scripts/overlap_by_run.py psdlab-demo [psdlab-demo ...]

Per PSD run: its neighbour and how many seconds apart they started; per role the mean of
measured / neighbour's same-shape serial median over the overlapped phases of 4 sequences
(count); and the run's own contention estimate (``fit_contention`` on that run with its
neighbour, the demo's calibrated fits for shapes the neighbour lacks).  A diagnostic:
nothing is written.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys


def _lines(folder: str) -> list[str]:
    import numpy as np
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.calibrate import with_draft_forwards
    from psdlab.validation.model_file import read_model
    from psdlab.validation.replay_model import calibration_view, fit_contention
    from psdlab.validation.solo_times import neighbour, overlapped_pairs, serial_reference, shape
    paths = sorted(glob.glob(os.path.join(folder, "traces", "*.jsonl")))
    traces = [with_draft_forwards(read_trace(p)) for p in paths]
    cal = calibration_view(read_model(os.path.join(folder, "model.json")))
    pooled = serial_reference(traces)

    def started(t) -> float:
        return float(t.run.extra.get("run_started", 0.0))

    t0 = min(map(started, traces))
    out = []
    for tr in sorted(traces, key=started):
        if not any(s.overlapped for s in tr.steps):
            continue
        name, start = tr.run.extra.get("demo_run", "?"), started(tr)
        near = neighbour(tr, traces)
        if near is None:
            out.append(f"{start - t0:6.0f} s  {name:26s} no serial run of its workload")
            continue
        ref = serial_reference([near])
        ratios: dict[str, list[float]] = {"draft": [], "verify": []}
        for d, v in overlapped_pairs(tr):
            for ph in (d, v):
                if ph.seqs == 4 and shape(ph) in ref:
                    ratios[ph.kind].append((ph.end - ph.start) / ref[shape(ph)])
        c_t, c_d = fit_contention(cal, [near, tr], pooled)
        parts = " ".join(f"{k} {np.mean(r):.3f} ({len(r)})" if r else f"{k} -"
                         for k, r in ratios.items())
        out.append(f"{start - t0:6.0f} s  {name:26s} vs {near.run.extra.get('demo_run', '?'):24s}"
                   f" {started(near) - start:+4.0f} s  {parts}"
                   f"  own contention target {c_t:+.3f}, drafter {c_d:+.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demos", nargs="+", help="demo folders (each holds model.json and traces/)")
    args = ap.parse_args(argv)
    for folder in args.demos:
        if not os.path.isfile(os.path.join(folder, "model.json")) or not glob.glob(
                os.path.join(folder, "traces", "*.jsonl")):
            print(f"overlap_by_run: {folder} has no model.json or no traces/*.jsonl",
                  file=sys.stderr)
            return 2
    for folder in args.demos:
        print(f"## {folder}")
        print("\n".join(_lines(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
