"""The overlap contention, controller overhead and step jitter that groups of a demo's runs
show, measured with the demo's own calibrated cost fits (``validation.replay_model.
replay_params``), so that a configuration the simulator misses can be compared with what the
calibration assumed for it.

    .venv/bin/python scripts/overlap_by_config.py psdlab-demo [CONFIG ...]

Prints one line per group: the calibration runs (what the model file holds), then each CONFIG
given (default: the held-out k = 3 SD/PSD pair) with its repeats together.  A diagnostic of
the reasons for a miss, not a fit: nothing is written.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys


def _traces(folder: str, configs: list[str]) -> list:
    from psdlab.analysis.trace import read_trace
    out = []
    for path in sorted(glob.glob(os.path.join(folder, "traces", "*.jsonl"))):
        tr = read_trace(path)
        extra = tr.run.extra or {}
        if extra.get("demo_config") in configs:
            out.append(tr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="a demo folder (holds model.json and traces/)")
    ap.add_argument("configs", nargs="*", default=["sd_k3_m4_ho", "psd_k3_m4_ho"],
                    help="configurations to group (default: the held-out k = 3 pair)")
    args = ap.parse_args(argv)
    model = os.path.join(args.demo, "model.json")
    if not os.path.isfile(model):
        print(f"demo: no model.json in {args.demo}", file=sys.stderr)
        return 2
    from psdlab.validation.model_file import read_model
    from psdlab.validation.replay_model import replay_params
    cal = ((read_model(model).get("meta") or {}).get("calibration") or {}).get("traces") or []
    cal_configs = sorted({os.path.basename(c).removesuffix(".jsonl").rsplit("_r", 1)[0]
                          for c in cal})
    groups = [("calibration", cal_configs)] + [(c, [c]) for c in args.configs]
    for name, configs in groups:
        traces = _traces(args.demo, configs)
        if not traces:
            print(f"configs: no traces of {', '.join(configs)} in {args.demo}", file=sys.stderr)
            return 2
        p = replay_params(traces, model)
        print(f"{name:>16}: contention target {p.contention_target:+.3f} drafter "
              f"{p.contention_drafter:+.3f}; overlap factor target {p.overlap_target:.3f} "
              f"drafter {p.overlap_drafter:.3f}; overhead serial {1e3 * p.overhead_serial:.2f} "
              f"ms, overlapped {1e3 * p.overhead_overlapped:.2f} ms; jitter CV "
              f"{p.jitter_cv:.3f} ({len(traces)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
