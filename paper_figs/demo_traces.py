"""Stand-in "measured" traces for trying the measured panels without real runs: simulated
SD and PSD traces of a small CPU-like pair (affine costs, step-time jitter, geometric
acceptance), written in the trace format ``psdlab run`` writes.  Their ``source`` is "sim";
the figures treat them like measured traces.  Used by the tests and by
``python -m psdlab.paper_figs.demo_traces DIR``."""
from __future__ import annotations

import os
import sys
from typing import Sequence

#: a CPU-like pair: target ~25 ms + 1.5 ms per token, drafter ~3 ms per one-token forward
TARGET_COST = {"name": "affine", "base": 0.025, "per_token": 0.0015, "per_context": 2e-6}
DRAFTER_COST = {"name": "affine", "base": 0.003, "per_token": 0.0004, "per_context": 3e-7}


def demo_config(mode: str, k: int, m: int = 4, requests: int = 16, seed: int = 0,
                alpha: float = 0.65):
    from psdlab.sim.sim_config import config_from_dict

    return config_from_dict({
        "seed": seed, "requests": requests, "server": {"mode": mode, "k": k, "m": m},
        "target": {"name": "demo-target", "cost": TARGET_COST},
        "drafter": {"name": "demo-drafter", "cost": DRAFTER_COST},
        "acceptance": {"name": "geometric", "alpha": alpha},
        "workload": {"name": "offline", "prompt": {"name": "uniform", "low": 16, "high": 96},
                     "output": {"name": "uniform", "low": 16, "high": 64}},
        "jitter": {"dist": "gamma", "cv": 0.1},
        "trace": {"level": "step"}})


def write_demo_traces(outdir: str, ks: Sequence[int] = (1, 2, 3, 4),
                      modes: Sequence[str] = ("sd", "psd"), m: int = 4,
                      requests: int = 16) -> list[str]:
    """Write one trace per (mode, k) into outdir; returns the paths."""
    from psdlab.sim.simulation import simulate

    os.makedirs(outdir, exist_ok=True)
    paths = []
    for mode in modes:
        for k in ks:
            path = os.path.join(outdir, f"{mode}_k{k}.jsonl")
            simulate(demo_config(mode, k, m, requests, seed=k), trace_path=path)
            paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_demo_traces(sys.argv[1] if len(sys.argv) > 1 else "demo_traces"):
        print(p)
