"""How many repeats would the held-out bounds need?  A demo folder's noise, scaled to n runs.

    .venv/bin/python scripts/noise_budget.py psdlab-demo [psdlab-demo2 ...] [--seeds 1]

Rebuilds each demo's validation from its traces, model file and ``runs.csv`` (roles; the
runs' replay with ``--seeds`` simulator seeds: the noise does not depend on the prediction,
only the rows' presence does) and prints ``validation.noise_budget.budget`` for its held-out
configurations: per target the repeats its runs had, P(noise alone breaks) now, the repeats
of every configuration at which it would be at most 10%, and the run time of that many rounds
beside the demo's runs.  The demo's own report has the same table from a demo run at or after
the commit that added it.  A diagnostic: nothing is written.
"""
from __future__ import annotations

import argparse
import csv
import glob
import os
import sys


def held_and_groups(demo: str) -> tuple[set[str], dict[str, str], list[str]]:
    """(held-out configurations, run -> configuration, run names in order) from runs.csv."""
    from psdlab.validation.validate import config_name
    with open(os.path.join(demo, "runs.csv"), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    groups = {r["run"]: config_name(r["run"]) for r in rows}
    held = {config_name(r["run"]) for r in rows if r["role"] == "validate"}
    return held, groups, [r["run"] for r in rows]


def budget_of(demo: str, seeds: int) -> list[dict]:
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.noise_budget import budget
    from psdlab.validation.validate import validate
    held, groups, order = held_and_groups(demo)
    found = {os.path.splitext(os.path.basename(p))[0]: p
             for p in glob.glob(os.path.join(demo, "traces", "*.jsonl"))}
    named = [(n, read_trace(found[n])) for n in order if n in found]
    validation = validate(os.path.join(demo, "model.json"), named, seeds=tuple(range(seeds)),
                          groups={n: groups[n] for n, _ in named})
    return budget(validation, held)


def lines_of(demo: str, rows: list[dict]) -> list[str]:
    from psdlab.validation.noise_budget import MOST
    out = [f"## {demo}"]
    if rows:
        out.append(f"one round of every configuration {rows[0]['round_s']:.0f} s; "
                   f"the demo's runs {rows[0]['run_s_now']:.0f} s")
    for r in rows:
        unit = (lambda v: f"{v:g} pp") if r["kind"] == "pp" else (lambda v: f"{100 * v:g}%")
        now = "n/a" if r["chance_now"] is None else f"{100 * r['chance_now']:.0f}%"
        need = f">{MOST}" if r["repeats_needed"] is None else str(r["repeats_needed"])
        secs = "n/a" if r["run_s_needed"] is None else f"{r['run_s_needed']:.0f} s"
        out.append(f"  {r['target']:42s} bound {unit(r['bound']):6s} repeats now "
                   f"{r['repeats_now']!s:4s} P(noise) now {now:>4s}  repeats for <=10% "
                   f"{need:>3s}  run time {secs}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demos", nargs="+", help="psdlab-demo folders")
    ap.add_argument("--seeds", type=int, default=1, help="simulator seeds of the replay")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        print(f"--seeds: must be at least 1, got {args.seeds}", file=sys.stderr)
        return 2
    for demo in args.demos:
        missing = [f for f in ("runs.csv", "model.json")
                   if not os.path.isfile(os.path.join(demo, f))]
        if missing:
            print(f"demos: no {' or '.join(missing)} in {demo}", file=sys.stderr)
            return 2
        print("\n".join(lines_of(demo, budget_of(demo, args.seeds))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
