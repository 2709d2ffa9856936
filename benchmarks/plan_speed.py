"""How fast a 1000-configuration `psdlab plan` sweep runs with and without what a
configuration's bisection trials reuse (the trajectory cache, `sim.trajectories`, and the
shared cost tables, `sim.costtable.TableShare`; ``PSDLAB_PLAN_REUSE=0`` turns both off),
beside `psdlab bench-sim`'s simulator speed, in one run; the two sweeps' rows must be identical.

    .venv/bin/python benchmarks/plan_speed.py [--jobs 2] [--out results/plan/speed.json]

The sweep is `benchmarks/plan_backends.py`'s (modes sd and psd, k 1..10, ten m, five
drafters; 16 requests a trial, 2 bisection steps) on the local backend.  Without reuse first,
then with it, then the simulator alone (`sim.speed_bench.run_speed_bench`, 100k requests).
Other jobs may share the cores: the file records the load averages.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_backends import ROOT, sweep_config  # noqa: E402


def sweep(cfg, spec, jobs: int, reuse: bool) -> dict:
    import psdlab.sim.trajectories as trajectories
    from psdlab.sim.capacity import run_capacity_plan
    os.environ["PSDLAB_PLAN_REUSE"] = "1" if reuse else "0"     # the spawned workers read it
    trajectories.CACHE_SIZE = 32 if reuse else 0                 # and this process
    trajectories._CACHE.clear()
    load = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    rows = [r.to_csv_row() for r in run_capacity_plan(cfg, spec, jobs, backend="local")]
    wall = time.perf_counter() - t0
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    return {"reuse": reuse, "wall_s": round(wall, 2), "rows_sha256": digest,
            "load_before": load, "load_after": [round(x, 2) for x in os.getloadavg()]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "plan" / "speed.json"))
    args = ap.parse_args(argv)
    from psdlab.sim.capacity import combos, parse_plan
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.speed_bench import run_speed_bench
    from psdlab.validation.results_file import git_info, machine_info
    raw = sweep_config(16, 2)
    cfg = config_from_dict(raw, str(ROOT / "sim" / "configs"))
    spec = parse_plan(raw["plan"], cfg)
    runs = [sweep(cfg, spec, args.jobs, False), sweep(cfg, spec, args.jobs, True)]
    sim = run_speed_bench(100_000)
    same = runs[0]["rows_sha256"] == runs[1]["rows_sha256"]
    git = git_info(str(ROOT))
    doc = {"command": "benchmarks/plan_speed.py " + " ".join(argv or sys.argv[1:]),
           "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "commit": (git["short"] or "?") + ("-dirty" if git["tree"] != "clean" else ""),
           "machine": machine_info(None), "configurations": len(combos(spec)),
           "jobs": args.jobs, "runs": runs, "identical_rows": same,
           "speedup": round(runs[0]["wall_s"] / runs[1]["wall_s"], 2),
           "bench_sim": {k: sim[k] for k in ("requests", "wall_s", "requests_per_s",
                                              "events_per_s")}}
    for r in runs:
        print(f"reuse {'on' if r['reuse'] else 'off'}: {r['wall_s']} s, load "
              f"{r['load_before']} -> {r['load_after']}")
    print(f"identical rows: {same}; speed-up {doc['speedup']}x; bench-sim "
          f"{sim['requests_per_s']:,.0f} requests/s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
