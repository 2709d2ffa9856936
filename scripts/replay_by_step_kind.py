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
import glob
import os
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
    model = os.path.join(args.demo, "model.json")
    if not os.path.isfile(model):
        print(f"demo: no model.json in {args.demo}", file=sys.stderr)
        return 2
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.demo_diagnostics import own_outcomes
    from psdlab.validation.model_file import read_model
    from psdlab.validation.validate import validate
    named = []
    for path in sorted(glob.glob(os.path.join(args.demo, "traces", "*.jsonl"))):
        tr = read_trace(path)
        named.append((str((tr.run.extra or {}).get("demo_run", path)), tr))
    groups = {n: str((t.run.extra or {}).get("demo_config", n)) for n, t in named}
    wanted = set(args.configs) or set(groups.values())
    missing = sorted(wanted - set(groups.values()))
    if missing:
        print(f"configs: no traces of {', '.join(missing)} in {args.demo}", file=sys.stderr)
        return 2
    acc = (read_model(model).get("meta") or {}).get("acceptance") or {}
    own = own_outcomes(named, acc.get("positional"))
    if own is None:
        print("demo: the runs are not greedy, so they have no match patterns", file=sys.stderr)
        return 2
    chosen = [(n, t) for n, t in named if groups[n] in wanted]
    v = validate(model, chosen, seeds=(0,), acceptance=own, groups=groups)
    for c in sorted(v.comparisons, key=lambda c: c.name):
        meas = np.mean([split(t) for t in (c.repeats or [c.trace])], axis=0)
        sim = np.mean([split(t) for t in (c.sim_repeats or [c.sim_trace])], axis=0)
        cells = [f"{label} {m:6.2f} s vs {s:6.2f} s ({100 * (s / m - 1):+.1f}%)"
                 for label, m, s in zip(("makespan", "decode", "other"), meas, sim) if m > 0]
        print(f"{c.name:>22}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
