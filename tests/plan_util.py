"""A small `psdlab plan` config shared by the plan tests (constant costs: fast and exact)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

SMALL_PLAN = textwrap.dedent("""
    [server]
    mode = "psd"
    [target]
    cost = {name = "constant", time = 0.02}
    [drafter]
    cost = {name = "constant", time = 0.004}
    [acceptance]
    name = "geometric"
    alpha = 0.8
    [workload]
    name = "offline"
    output = {name = "fixed", value = 40}
    [plan]
    modes = ["ar", "sd", "psd"]
    k = [1, 3]
    m = [2, 8]
    replicas = [1, 2]
    slo = {ttft_p99 = 1.0}
    requests = 30
    iterations = 3
    drafters = [
      { name = "fast", acceptance = { name = "geometric", alpha = 0.6 }, cost = { name = "constant", time = 0.002 } },
      { name = "good", acceptance = { name = "geometric", alpha = 0.85 }, cost = { name = "constant", time = 0.006 } },
    ]
""")  # noqa: E501

#: a configuration of SMALL_PLAN, as sim.capacity.combo_label names it
FAULTY = "sd k=3 m=8 drafter=good"


def small_plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(SMALL_PLAN)
    return path


def fault_env(directory: Path, fail: int, config: str = FAULTY) -> str:
    """The value of PSDLAB_PLAN_FAULT (sim.sweep_backends) failing ``config``'s first
    ``fail`` attempts."""
    return json.dumps({"config": config, "fail": fail, "dir": str(directory)})


def attempts(directory: Path) -> int:
    return len(list(directory.glob("attempt-*"))) if directory.exists() else 0
