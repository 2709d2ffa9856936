"""Where a replay's time goes wrong: a demo's runs replayed with every run's own match patterns
(acceptance known exactly, as the report's diagnostic does), their makespan split into decode
steps (a verification) and the other steps (prefills), measured against replayed.

    .venv/bin/python scripts/replay_by_step_kind.py psdlab-demo [CONFIG ...]

One line per configuration (default: every one), means over its repeats (each replayed with
the first seed): makespan, decode-step time and other-step time, measured and replayed, and
the replay's error on each.  A diagnostic of the reasons for a miss, not a fit: nothing is
written.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def split(trace) -> tuple[float, float, float]:
    """(makespan, time in decode steps, time in the other steps) of a trace."""
    decode = other = 0.0
    for s in trace.steps:
        if s.verified and any(p.kind == "verify" for p in s.phases):
            decode += s.end - s.start
        else:
            other += s.end - s.start
    span = (max(r.finish for r in trace.requests) - min(r.arrival for r in trace.requests)
            if trace.requests else 0.0)
    return span, decode, other


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="a demo folder (holds model.json and traces/)")
    ap.add_argument("configs", nargs="*", help="configurations (default: all)")
    args = ap.parse_args(argv)
    from psdlab.validation.demo_diagnostics import replay_demo_folder
    v, error = replay_demo_folder(args.demo, args.configs)
    if error:
        print(error, file=sys.stderr)
        return 2
    for c in sorted(v.comparisons, key=lambda c: c.name):
        meas = np.mean([split(t) for t in (c.repeats or [c.trace])], axis=0)
        sim = np.mean([split(t) for t in (c.sim_repeats or [c.sim_trace])], axis=0)
        cells = [f"{label} {m:6.2f} s vs {s:6.2f} s ({100 * (s / m - 1):+.1f}%)"
                 for label, m, s in zip(("makespan", "decode", "other"), meas, sim) if m > 0]
        print(f"{c.name:>22}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
