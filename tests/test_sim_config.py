"""Bad configs and malformed workload files give one-line errors naming the field or line,
from the API (ValueError) and from the CLI (exit 2, no traceback)."""
import subprocess
import sys
import textwrap

import pytest

from psdlab.sim.sim_config import config_from_dict, load_config
from psdlab.sim.simulation import simulate

GOOD = {
    "server": {"mode": "psd", "k": 4, "m": 4},
    "target": {"cost": {"name": "constant", "time": 0.02}},
    "drafter": {"cost": {"name": "constant", "time": 0.002}},
    "acceptance": {"name": "geometric", "alpha": 0.8},
    "workload": {"name": "offline"},
}


def _with(path, value):
    import copy
    raw = copy.deepcopy(GOOD)
    node = raw
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return raw


@pytest.mark.parametrize("path,value,needle", [
    ("server.k", 0, "server.k: must be in [1, 64], got 0"),
    ("server.m", 0, "server.m: must be in"),
    ("server.mode", "fast", "server.mode: must be one of"),
    ("server.policy", "greedy", "server.policy: must be one of"),
    ("server.kv_blocks", -1, "server.kv_blocks: must be >= 0"),
    ("server.bogus", 1, "server.bogus: unknown field"),
    ("requests", 0, "requests: must be in"),
    ("seed", -3, "seed: must be >= 0"),
    ("colour", "red", "colour: unknown field"),
    ("target.cost", "fast", "target.cost: expected a table"),
    ("target.flavour", 1, "target.flavour: unknown field"),
    ("trace.level", "all", "trace.level: must be one of"),
])
def test_bad_config_names_the_field(path, value, needle):
    with pytest.raises(ValueError) as err:
        config_from_dict(_with(path, value))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_tables():
    raw = dict(GOOD)
    del raw["workload"]
    with pytest.raises(ValueError, match="workload: missing"):
        config_from_dict(raw)
    raw = dict(GOOD)
    del raw["drafter"]
    with pytest.raises(ValueError, match="drafter: missing"):
        config_from_dict(raw)
    ar = dict(raw, server={"mode": "ar", "m": 4})
    assert config_from_dict(ar).drafter is None


def test_model_spec_errors_surface_with_their_field():
    # the tables are parsed when the config is loaded (sim.model_specs), not at each run
    with pytest.raises(ValueError, match=r"^target\.cost\.tme"):
        config_from_dict(_with("target.cost", {"name": "constant", "tme": 0.1}))


def test_request_too_large_for_kv_is_rejected():
    raw = _with("server.kv_blocks", 2)
    with pytest.raises(ValueError, match="server.kv_blocks: request 0 needs"):
        simulate(config_from_dict(raw))


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "psdlab", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_cli_bad_toml_and_bad_field_are_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\nk = 1\n")
    out = _cli("simulate", str(bad), cwd=tmp_path)
    assert out.returncode == 2 and "invalid TOML" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    cfg = tmp_path / "k0.toml"
    cfg.write_text(textwrap.dedent("""
        [server]
        k = 0
        [target]
        cost = {name = "constant", time = 0.01}
        [drafter]
        cost = {name = "constant", time = 0.001}
        [acceptance]
        name = "geometric"
        alpha = 0.5
        [workload]
        name = "offline"
    """))
    out = _cli("simulate", str(cfg), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "psdlab simulate: error: server.k: must be in [1, 64], got 0"


def test_malformed_workload_file_names_the_line(tmp_path):
    wl = tmp_path / "w.csv"
    wl.write_text("arrival,prompt_len,output_len\n0.0,10,20\n0.5,ten,20\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(textwrap.dedent("""
        requests = 2
        [server]
        mode = "sd"
        [target]
        cost = {name = "constant", time = 0.01}
        [drafter]
        cost = {name = "constant", time = 0.001}
        [acceptance]
        name = "geometric"
        alpha = 0.5
        [workload]
        name = "replay"
        path = "w.csv"
    """))
    with pytest.raises(ValueError) as err:
        simulate(load_config(cfg))         # the path is relative to the config file
    assert "w.csv:3" in str(err.value) and "prompt_len" in str(err.value)
    out = _cli("simulate", str(cfg), cwd="/")
    assert out.returncode == 2 and "w.csv:3" in out.stderr and "Traceback" not in out.stderr
    wl.write_text("arrival,prompt_len,output_len\n0.0,10,20\n0.5,12,7\n")
    res = simulate(load_config(cfg))
    assert sorted(r.output_len for r in res.trace.requests) == [7, 20]


def test_one_drafter_device_rule():
    """sim.sim_config.drafter_device / drafter_placement: the build's device and the planner's
    device count come from one rule."""
    from psdlab.sim.capacity import devices_per_replica
    from psdlab.sim.sim_config import SimModel, drafter_device, drafter_placement
    assert [drafter_placement(m) for m in ("ar", "sd", "sd-sep", "psd", "adaptive")] == [
        "none", "shared", "own", "own", "own"]
    assert drafter_device("sd", "gpu0", "gpu1") == "gpu0"
    assert drafter_device("psd", "gpu0", "gpu0") == "sim:drafter"
    assert drafter_device("adaptive", "gpu0", "gpu1") == "gpu1"
    assert drafter_device("sd-sep", "gpu0", None) == "sim:drafter"
    cfg = config_from_dict({**GOOD, "target": {"cost": {   # a valid table: parsed at load
        "name": "gpu", "model": "qwen3-8b", "hardware": "a100-80gb", "tp": 4, "dtype": "bf16",
        "engine": "ideal"}}})
    d = SimModel(name="d", device="sim:drafter", cost={"name": "constant", "tp": 2})
    assert [devices_per_replica(cfg, m, d) for m in ("ar", "sd", "sd-sep", "psd", "adaptive")] \
        == [4, 4, 6, 6, 6]


def test_one_file_rate_rule():
    import math

    from psdlab.sim.workloads import mean_rate
    assert mean_rate([0.0, 1.0, 2.0, 4.0]) == 0.75
    assert mean_rate([3.0, 0.0, 1.0]) == 2 / 3                   # order does not matter
    assert mean_rate([0.0, 0.0]) == math.inf == mean_rate([5.0]) == mean_rate([])
