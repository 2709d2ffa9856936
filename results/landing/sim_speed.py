"""Simulator speed on the old bench-sim setup (roofline costs), for old and new trees alike."""
import json, sys, time
import os
if os.environ.get("TREE") == "old":
    from sim.engine import simulate
    from sim.lengths import sharegpt_like_lengths
    from sim.config import config_from_dict
    import sim.engine as _m
    tree = "old"
else:
    from psdlab.sim.engine import simulate
    from psdlab.sim.lengths import sharegpt_like_lengths
    from psdlab.sim.config import config_from_dict
    import psdlab.sim.engine as _m
    tree = "new"
import psdlab
prompt, output = sharegpt_like_lengths()
def cfg(n, wl, seed):
    c = bench_config(n, wl, seed)
    return c
def roofline(raw):
    return raw
# rebuild the old setup explicitly (roofline), so both trees simulate the same thing
def make(n, wl, seed):
    return config_from_dict({
        "seed": seed, "requests": n, "server": {"mode": "psd", "k": 4, "m": 16, "policy": sys.argv[2]},
        "target": {"name": "t", "cost": {"name": "roofline", "model": "qwen3-32b", "hardware": "l40", "tp": 4, "dtype": "bf16"}},
        "drafter": {"name": "d", "cost": {"name": "roofline", "model": "qwen3-1.7b", "hardware": "l40", "tp": 1, "dtype": "bf16"}},
        "acceptance": {"name": "geometric", "alpha": 0.8}, "workload": wl, "trace": {"level": "none"}})
pilot = simulate(make(2000, {"name": "offline", "prompt": prompt, "output": output}, 1))
rate = 2000 / pilot.makespan_s
n = int(sys.argv[1])
walls, cpus = [], []
for rep in range(3):
    res = simulate(make(n, {"name": "poisson", "rate": rate, "prompt": prompt, "output": output}, rep), path="fast")
    walls.append(res.wall_s); cpus.append(res.cpu_s)
print(json.dumps({"tree": tree, "sim_file": os.path.relpath(_m.__file__, os.path.dirname(os.path.dirname(_m.__file__))), "policy": sys.argv[2], "requests": n, "events": res.events,
                  "makespan_s": res.makespan_s, "wall_s": walls, "cpu_s": cpus,
                  "requests_per_cpu_s": [n / c for c in cpus]}))
