"""Where a replay's request latencies go wrong: a demo's runs replayed with every run's own
match patterns (acceptance known exactly), each request's latency split into its parts and
each step kind's time, measured against replayed.

    .venv/bin/python scripts/replay_latency_parts.py psdlab-demo [CONFIG ...] [--recalibrate]
                                                     [--by-repeat]

Per configuration (default: every one; means over its repeats, each replayed with the first
seed): the mean queueing time (arrival to admission), prefill wait (admission to first token),
TPOT, end-to-end latency and its p99, measured and replayed; then per batch size the mean
decode step, draft phase and verify phase, measured and replayed, with their counts;
``--by-repeat`` adds each repeat's TPOT and p99 errors (one slow repeat among few moves a
configuration's median).
``--recalibrate`` fits the cost model again with this checkout's calibration, from the
demo's own calibration traces (those its model file names), and replays with that instead of
the demo's model file (the acceptance model stays the demo's): how a change to the
calibration moves the same runs' replay.  A diagnostic of the reasons for a miss, not a fit:
nothing is written but a temporary model file.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict

import numpy as np


def request_parts(trace) -> np.ndarray:
    """Mean queue, prefill wait, TPOT, end-to-end; p99 end-to-end."""
    rs = trace.requests
    e2e = [r.finish - r.arrival for r in rs]
    tpot = [(r.finish - r.first_token) / (r.output_len - 1) for r in rs if r.output_len > 1]
    return np.array([np.mean([r.admitted - r.arrival for r in rs]),
                     np.mean([r.first_token - r.admitted for r in rs]), np.mean(tpot),
                     np.mean(e2e), np.percentile(e2e, 99)])


def step_parts(traces) -> dict[tuple[str, int], list[float]]:
    """Durations of decode steps and of their draft and verify phases, by batch size."""
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    for tr in traces:
        for s in tr.steps:
            if not s.verified:
                continue
            out[("decode step", len(s.verified))].append(s.end - s.start)
            for p in s.phases:
                if p.kind in ("draft", "verify"):
                    out[(p.kind, p.seqs)].append(p.end - p.start)
    return out


def recalibrated(demo: str, model: str) -> str:
    """A model file fitted with this checkout's calibration on the demo's calibration traces,
    the demo model's acceptance meta kept."""
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.calibrate import calibrate
    from psdlab.validation.model_file import write_model
    old = json.load(open(model))
    names = old["meta"]["calibration"]["traces"]
    from psdlab.validation.context_probe import read_probe
    cal = calibrate([read_trace(os.path.join(demo, "traces", n)) for n in names],
                    context_probe=read_probe(os.path.join(demo, "traces")))
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    new = write_model(path, cal, traces=names)
    for key in ("fits", "replay", "tables", "calibration", "prefill_chunking", "context_probe"):
        if key in new["meta"]:
            old["meta"][key] = new["meta"][key]
    old["roles"] = new["roles"]
    with open(path, "w") as f:
        json.dump(old, f)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="a demo folder (holds model.json and traces/)")
    ap.add_argument("configs", nargs="*", help="configurations (default: all)")
    ap.add_argument("--recalibrate", action="store_true",
                    help="refit the cost model with this checkout's calibration")
    ap.add_argument("--by-repeat", action="store_true", help="each repeat's TPOT and p99 error")
    args = ap.parse_args(argv)
    from psdlab.validation.demo_diagnostics import replay_demo_folder
    model = os.path.join(args.demo, "model.json")
    used = None
    if args.recalibrate and os.path.isfile(model):
        try:
            used = recalibrated(args.demo, model)
        except (OSError, ValueError, KeyError) as exc:
            print(f"--recalibrate: cannot refit from the traces {model} names: {exc}",
                  file=sys.stderr)
            return 2
    try:
        v, error = replay_demo_folder(args.demo, args.configs, used)
    finally:
        if used:
            os.unlink(used)
    if error:
        print(error, file=sys.stderr)
        return 2
    labels = ("queue", "prefill wait", "TPOT", "end-to-end", "p99 end-to-end")
    for c in sorted(v.comparisons, key=lambda c: c.name):
        meas_tr, sim_tr = c.repeats or [c.trace], c.sim_repeats or [c.sim_trace]
        meas = np.mean([request_parts(t) for t in meas_tr], axis=0)
        sim = np.mean([request_parts(t) for t in sim_tr], axis=0)
        print(f"{c.name}: " + "; ".join(
            f"{lab} {m:.3f} s vs {s:.3f} s ({100 * (s / m - 1):+.1f}%)"
            for lab, m, s in zip(labels, meas, sim) if m > 0))
        if args.by_repeat:
            for m, s in zip(meas_tr, sim_tr):
                a, b = request_parts(m), request_parts(s)
                name = (m.run.extra or {}).get("demo_run", "")
                print(f"    repeat {name}: TPOT {100 * (b[2] / a[2] - 1):+.1f}%, "
                      f"p99 end-to-end {100 * (b[4] / a[4] - 1):+.1f}%")
        dm, ds = step_parts(meas_tr), step_parts(sim_tr)
        for key in sorted(set(dm) & set(ds)):
            a, b = np.mean(dm[key]), np.mean(ds[key])
            print(f"    {key[0]:>11} of {key[1]}: {a:.4f} s vs {b:.4f} s "
                  f"({100 * (b / a - 1):+.1f}%; {len(dm[key])} / {len(ds[key])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
