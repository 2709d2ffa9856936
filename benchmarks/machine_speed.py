"""Is this machine running at the speed a reference run measured?  The ratio of two
``benchmarks/bench_cpu_linear.py`` results files, timing by timing.

    .venv/bin/python benchmarks/bench_cpu_linear.py --out /tmp/now.json
    .venv/bin/python benchmarks/machine_speed.py REFERENCE.json /tmp/now.json

Prints every median timing both files hold (the matrix products and the runner's draft and
verify calls, one core), the ratio new / reference, and their median and range: above 1 the
new machine state is slower.  The demo's judgement assumes the machine it calibrated on is the
machine its held-out runs ran on, and its bounds were sized for a quiet one; this says
whether a machine is in the state an earlier demo saw (e.g. before running a demo pair).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any, Iterator


def medians(doc: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(path, value) of every ``median_ms`` in a results file (its machine block skipped)."""
    if isinstance(doc, dict):
        for key, val in doc.items():
            if key == "machine":
                continue
            if key == "median_ms" and isinstance(val, (int, float)):
                yield path, float(val)
            else:
                yield from medians(val, f"{path}/{key}" if path else key)


def ratios(ref: Any, new: Any) -> list[tuple[str, float, float]]:
    """(path, reference ms, new ms) of the timings both files hold."""
    old = dict(medians(ref))
    return [(p, old[p], v) for p, v in medians(new) if p in old and old[p] > 0]


def _load(path: str) -> Any:
    """The parsed file, or None after a one-line error."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as e:
        print(f"results file: cannot read {path} ({e})", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference", help="a bench_cpu_linear results file")
    ap.add_argument("new", help="another, measured now")
    args = ap.parse_args(argv)
    ref, new = _load(args.reference), _load(args.new)
    if ref is None or new is None:
        return 2
    rows = ratios(ref, new)
    if not rows:
        print("results files: no timing in common (are both bench_cpu_linear files?)",
              file=sys.stderr)
        return 2
    when = [d.get("machine", {}).get("date", "?") for d in (ref, new)]
    print(f"reference {when[0]}, new {when[1]}")
    for path, a, b in rows:
        print(f"  {path:50s} {a:8.1f} ms {b:8.1f} ms  x{b / a:.2f}")
    r = [b / a for _, a, b in rows]
    print(f"new / reference: median x{statistics.median(r):.2f} (range x{min(r):.2f}-"
          f"x{max(r):.2f}, {len(r)} timings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
