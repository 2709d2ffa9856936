"""Config builders shared by the simulator tests (tests/test_sim_*.py)."""
from __future__ import annotations

from typing import Any

from psdlab.sim.sim_config import SimConfig, config_from_dict


def make_config(*, mode: str = "psd", k: int = 4, m: int = 4, requests: int = 16,
                policy: str = "paper", kv_blocks: int = 0, block_size: int = 16,
                workload: dict[str, Any] | None = None, alpha: float = 0.8,
                c_t: float = 0.03, c_d: float = 0.004, seed: int = 0,
                jitter: dict[str, Any] | None = None, level: str = "step",
                acceptance: dict[str, Any] | None = None,
                max_interval_steps: int = 512, k_choices: tuple[int, ...] = ()) -> SimConfig:
    raw: dict[str, Any] = {
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": k, "m": m, "policy": policy, "kv_blocks": kv_blocks,
                   "block_size": block_size, "max_interval_steps": max_interval_steps,
                   "k_choices": list(k_choices)},
        "target": {"name": "t", "cost": {"name": "constant", "time": c_t}},
        "drafter": {"name": "d", "cost": {"name": "constant", "time": c_d}},
        "acceptance": acceptance or {"name": "geometric", "alpha": alpha},
        "workload": workload or {"name": "offline", "prompt": {"name": "fixed", "value": 32},
                                 "output": {"name": "fixed", "value": 64}},
        "trace": {"level": level},
    }
    if jitter:
        raw["jitter"] = jitter
    return config_from_dict(raw)
