"""How long `psdlab calibrate` takes with the acceptance selection (the cross-validated choice
of the acceptance model for new prompts, ``validation.acceptance.cross_validation``) against
``--no-acceptance-selection`` on the same traces (issue 52 item 4; goal: at most 10x).

    .venv/bin/python benchmarks/calibrate_speed.py [--requests 40,400] [--repeats 3]
                                                    [--workdir DIR] [--json]

For each request count n it makes two simulated PSD traces of ``sim/configs/psd_offline.toml``
(k 2 and 4, m 4, n requests each, seed 1: `psdlab simulate`), then times `psdlab calibrate` on
both, with and without the selection, alternating, ``--repeats`` times (each a fresh
process, imports included, as a user runs it), and prints per n the median time of each and
the ratio (median, min and max over the repeats, each repeat's pair a ratio).  Other jobs
may share the cores: the load averages before and after are printed beside the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "sim" / "configs" / "psd_offline.toml"
PSDLAB = [sys.executable, "-m", "psdlab"]


def make_traces(folder: Path, requests: int) -> list[Path]:
    """The two traces (k 2 and 4) of ``requests`` requests each, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in (2, 4):
        path = folder / f"k{k}.jsonl"
        subprocess.run(PSDLAB + ["simulate", str(CONFIG), "--mode", "psd", "--k", str(k),
                                 "--m", "4", "--requests", str(requests), "--seed", "1",
                                 "--trace", str(path)],
                       check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        paths.append(path)
    return paths


def time_calibrate(traces: list[Path], out: Path, select: bool) -> float:
    """Wall seconds of one `psdlab calibrate` process."""
    cmd = PSDLAB + ["calibrate", *map(str, traces), "-o", str(out)]
    if not select:
        cmd.append("--no-acceptance-selection")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - t0


def measure(folder: Path, requests: int, repeats: int) -> dict:
    """The timings and ratios at one request count."""
    traces = make_traces(folder / f"n{requests}", requests)
    out = folder / f"n{requests}" / "model.json"
    with_sel, without = [], []
    for _ in range(repeats):
        without.append(time_calibrate(traces, out, select=False))
        with_sel.append(time_calibrate(traces, out, select=True))
    ratios = [a / b for a, b in zip(with_sel, without)]
    return {"requests_per_trace": requests, "repeats": repeats,
            "selection_s": [round(x, 2) for x in with_sel],
            "no_selection_s": [round(x, 2) for x in without],
            "ratio_median": round(statistics.median(ratios), 2),
            "ratio_min": round(min(ratios), 2), "ratio_max": round(max(ratios), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", default="40,400",
                    help="request counts per trace, comma-separated (default 40,400)")
    ap.add_argument("--repeats", type=int, default=3, help="timed pairs per count (default 3)")
    ap.add_argument("--workdir", default=None,
                    help="where the traces go (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.requests.split(",")]
    except ValueError:
        ap.error(f"--requests: comma-separated integers, got {args.requests!r}")
    if not counts or min(counts) < 1:
        ap.error(f"--requests: each at least 1, got {args.requests!r}")
    if args.repeats < 1:
        ap.error(f"--repeats: at least 1, got {args.repeats}")
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.workdir or tmp)
        rows = [measure(folder, n, args.repeats) for n in counts]
    result = {"rows": rows, "load_before": load_before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"load average before {load_before}, after {result['load_after']} "
          f"({result['cpus']} cpus)")
    print(f"{'requests/trace':>14}  {'selection s':>12}  {'no selection s':>14}  "
          f"ratio median [min, max]")
    for r in rows:
        print(f"{r['requests_per_trace']:>14}  {statistics.median(r['selection_s']):>12.2f}  "
              f"{statistics.median(r['no_selection_s']):>14.2f}  "
              f"{r['ratio_median']:.2f}x [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
