"""Time a 1000-configuration `psdlab plan` sweep on the local backend (processes) and on Ray.

    .venv/bin/python benchmarks/plan_backends.py [--jobs 2] [--repeats 2] \\
        [--out results/plan/backends.json]

The sweep: sim/configs/plan_example.toml's model (Qwen3-32B, TP 4 on L40, vllm-eager costs)
with modes sd and psd, k = 1..10, ten batch sizes m and five drafters (two sizes, assumed
acceptance rates): 2 x 10 x 10 x 5 = 1000 configurations, each a short search (``--requests``
requests per trial, ``--iterations`` bisection steps), so the timing is of the backends more
than of the simulator.  Each repeat runs the backends in turn (local with ``--jobs``
processes, then Ray on a local cluster of ``--jobs`` CPUs, started and shut down inside the
timed sweep, as ``psdlab plan --backend ray`` does; its start and stop are also timed
alone).  The CSVs of every run must be identical (their SHA-256 is recorded).  The results
file holds the machine, the load averages before and after each run, the date (UTC) and the
commit; on a shared machine (other jobs on the same cores) the times are upper bounds and the
repeats show the noise.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from psdlab.analysis.toml_reader import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DRAFTERS = (("qwen3-0.6b", 0.6), ("qwen3-0.6b", 0.7), ("qwen3-1.7b", 0.75),
            ("qwen3-1.7b", 0.8), ("qwen3-1.7b", 0.85))
M = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def sweep_config(requests: int, iterations: int) -> dict[str, Any]:
    raw = tomllib.loads((ROOT / "sim" / "configs" / "plan_example.toml").read_text())
    cost = dict(raw["drafter"]["cost"])
    raw["plan"].update(
        modes=["sd", "psd"], k=list(range(1, 11)), m=list(M), replicas=[1, 2],
        requests=requests, iterations=iterations, seeds=1,
        drafters=[{"name": f"{model}-a{alpha:g}", "cost": {**cost, "model": model},
                   "acceptance": {"name": "geometric", "alpha": alpha}}
                  for model, alpha in DRAFTERS])
    raw["plan"].pop("csv", None)
    return raw


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _uptime() -> str:
    try:
        import subprocess
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def time_sweep(cfg, spec, backend: str, jobs: int) -> dict[str, Any]:
    from psdlab.sim.capacity import run_capacity_plan, write_plan_csv

    before, up = _load(), _uptime()
    t0 = time.perf_counter()
    rows = run_capacity_plan(cfg, spec, jobs, backend=backend)
    wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.csv")
        write_plan_csv(rows, path)
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return {"backend": backend, "jobs": jobs, "wall_s": round(wall, 2),
            "configs_per_s": round(len(rows) / len(spec.replicas) / wall, 2),
            "csv_sha256": digest, "load_before": before, "load_after": _load(),
            "uptime_before": up}


def ray_start_stop(jobs: int) -> float:
    import ray  # pyright: ignore[reportMissingImports]
    t0 = time.perf_counter()
    ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    ray.shutdown()
    return round(time.perf_counter() - t0, 2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "plan" / "backends.json"))
    args = ap.parse_args(argv)

    from psdlab.sim.capacity import combos, parse_plan
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.validation.results_file import git_info, machine_info

    raw = sweep_config(args.requests, args.iterations)
    cfg = config_from_dict(raw, str(ROOT / "sim" / "configs"))
    spec = parse_plan(raw["plan"], cfg)
    n = len(combos(spec))
    load0 = os.getloadavg()
    runs, starts = [], []
    for rep in range(args.repeats):
        for backend in ("local", "ray"):
            r = time_sweep(cfg, spec, backend, args.jobs)
            r["repeat"] = rep
            runs.append(r)
            print(f"repeat {rep} {backend:<5} jobs {args.jobs}: {r['wall_s']:.1f} s "
                  f"({r['configs_per_s']:.1f} configs/s), load {r['load_before']} -> "
                  f"{r['load_after']}", flush=True)
        starts.append(ray_start_stop(args.jobs))
    same = len({r["csv_sha256"] for r in runs}) == 1
    print(f"{n} configurations; ray start+stop alone {starts} s; identical CSV: {same}")
    git = git_info(str(ROOT))
    doc = {"command": "benchmarks/plan_backends.py " + " ".join(argv or sys.argv[1:]),
           "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "commit": (git["short"] or "?") + ("-dirty" if git["tree"] != "clean" else ""),
           "machine": machine_info(load0), "uptime_end": _uptime(),
           "note": "shared machine: other jobs ran on the same cores during these runs; "
                   "times are upper bounds, the repeats show the noise",
           "configurations": n, "requests_per_trial": args.requests,
           "bisection_steps": args.iterations, "jobs": args.jobs,
           "ray_version": __import__("ray").__version__,
           "ray_start_stop_s": starts, "identical_csv": same, "runs": runs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(tmp, args.out)
    print(f"results: {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
