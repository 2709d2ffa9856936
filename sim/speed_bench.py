"""The simulator speed benchmark behind ``psdlab bench-sim``.

Setup (fixed, stated in the output): PSD with two batches of m = 16, k = 4, the paper's batch
manager, no KV limit; target Qwen3-32B on 4x L40 (TP 4), drafter Qwen3-1.7B on its own L40
(the paper's setting 2), costs of the ``vllm-eager`` GPU preset in bf16 (the paper's engine);
per-token geometric acceptance alpha = 0.8;
ShareGPT-like lengths (``sim.lengths.sharegpt_like_lengths``: prompt lognormal mean 300 /
median 200, output lognormal mean 250 / median 180, each clipped to [1, 1024]); Poisson
arrivals at ``load`` x the server's saturated throughput, measured by a pilot offline run of
2,000 requests (requests / makespan, so slightly below the true steady-state capacity).
Timed: the whole ``simulate`` call of the main run (request generation, trajectory sampling,
simulation, request records in memory; trace level "none", so no file is written).
Events = simulated steps + arrivals + completions + preemptions.  ``requests_per_s`` divides by
the wall time; ``requests_per_cpu_s`` by this process's CPU time, which is what one dedicated
core would give on a machine shared with other jobs.
"""
from __future__ import annotations

from typing import Any

from psdlab.sim.sim_config import SimConfig, config_from_dict


def bench_config(requests: int, workload: dict[str, Any], seed: int, k: int = 4,
                 m: int = 16) -> SimConfig:
    return config_from_dict({
        "seed": seed, "requests": requests,
        "server": {"mode": "psd", "k": k, "m": m, "policy": "paper"},
        "target": {"name": "qwen3-32b", "cost": {"name": "gpu", "model": "qwen3-32b",
                                                 "hardware": "l40", "tp": 4, "dtype": "bf16",
                                                 "engine": "vllm-eager"}},
        "drafter": {"name": "qwen3-1.7b", "cost": {"name": "gpu", "model": "qwen3-1.7b",
                                                   "hardware": "l40", "tp": 1, "dtype": "bf16",
                                                   "engine": "vllm-eager"}},
        "acceptance": {"name": "geometric", "alpha": 0.8},
        "workload": workload,
        "trace": {"level": "none"},
    })


def run_speed_bench(requests: int = 100_000, load: float = 1.0, seed: int = 0,
              path: str = "fast", progress: bool = False) -> dict[str, Any]:
    from psdlab.analysis.checks import check_int, check_range
    from psdlab.sim.simulation import simulate
    from psdlab.sim.lengths import sharegpt_like_lengths

    check_int("--requests", requests, 1, 10_000_000)
    check_range("--load", load, 0.0, 10.0, lo_open=True)
    prompt, output = sharegpt_like_lengths()
    pilot = simulate(bench_config(2000, {"name": "offline", "prompt": prompt, "output": output},
                                  seed + 1))
    capacity = 2000 / pilot.makespan_s
    rate = load * capacity
    cfg = bench_config(requests, {"name": "poisson", "rate": rate, "prompt": prompt,
                                  "output": output}, seed)
    res = simulate(cfg, path=path, progress=progress)
    return {
        "requests": requests, "wall_s": res.wall_s,
        "requests_per_s": requests / res.wall_s, "events_per_s": res.events / res.wall_s,
        "cpu_s": res.cpu_s, "requests_per_cpu_s": requests / res.cpu_s,
        "events_per_cpu_s": res.events / res.cpu_s,
        "events": res.events, "steps": res.counters["steps"],
        "intervals": res.counters["intervals"], "path": path,
        "capacity_req_s": capacity, "load": load, "arrival_rate_req_s": rate,
        "simulated_makespan_s": res.makespan_s,
        "setup": "psd m=16/batch k=4 paper policy; qwen3-32b 4xL40 TP4 / qwen3-1.7b 1xL40; "
                 "gpu cost preset vllm-eager bf16; geometric alpha=0.8; "
                 "sharegpt-like lognormal lengths "
                 "(prompt mean 300 median 200, output mean 250 median 180, max 1024); "
                 "poisson arrivals; no KV limit",
    }


def speed_text(out: dict[str, Any]) -> str:
    """`run_bench`'s result as the lines `psdlab bench-sim` prints."""
    return "\n".join([
        f"setup: {out['setup']}",
        f"arrivals {out['arrival_rate_req_s']:.3f} req/s = load {out['load']:g} x capacity "
        f"{out['capacity_req_s']:.3f} req/s; path {out['path']}",
        f"{out['requests']} requests, {out['events']} events ({out['steps']} steps) in "
        f"{out['wall_s']:.2f} s wall",
        f"requests/s {out['requests_per_s']:,.0f}   events/s {out['events_per_s']:,.0f}   "
        f"(per CPU second: {out['requests_per_cpu_s']:,.0f} and "
        f"{out['events_per_cpu_s']:,.0f})"])
