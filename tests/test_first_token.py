"""`server.first_token`: "prefill" emits a request's first token at the end of the target's
prefill pass, "step" at the end of the step that ran it (vLLM's and SGLang's behaviour, used
when replaying their benchmark results)."""
from __future__ import annotations

import filecmp
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.cli import main
from psdlab.sim.simulation import simulate
from psdlab.sim.sim_config import config_from_dict
from sim_helpers import make_config

POISSON = {"name": "poisson", "rate": 20.0, "prompt": {"name": "fixed", "value": 32},
           "output": {"name": "uniform", "low": 8, "high": 40}}


def _with_first_token(cfg, value):
    return cfg.replace(server=cfg.server.__class__(**{**cfg.server.__dict__,
                                                      "first_token": value}))


def _requests(cfg):
    run = simulate(cfg, path="fast")
    return {r.id: r for r in run.trace.requests}


@settings(max_examples=12, deadline=None)
@given(mode=st.sampled_from(["ar", "sd", "sd-sep", "psd"]), seed=st.integers(0, 50),
       k=st.integers(1, 5))
def test_step_emission_delays_only_the_first_token(mode, seed, k):
    cfg = make_config(mode=mode, k=k if mode != "ar" else 0, m=4, requests=12,
                      workload=POISSON, seed=seed)
    early = _requests(cfg)
    late = _requests(_with_first_token(cfg, "step"))
    assert early.keys() == late.keys()
    later = 0
    for rid, e in early.items():
        lt = late[rid]
        assert lt.finish == e.finish and lt.admitted == e.admitted   # the schedule is unchanged
        assert lt.first_token >= e.first_token - 1e-12
        assert lt.first_token <= lt.finish + 1e-12 or math.isclose(lt.first_token, lt.finish)
        later += lt.first_token > e.first_token + 1e-12
    assert later > 0        # the prefill pass never lasts the whole step: some token moved


@pytest.mark.parametrize("mode", ["sd", "psd"])
def test_fast_and_simpy_paths_agree_with_step_emission(tmp_path, mode):
    cfg = _with_first_token(make_config(mode=mode, k=3, m=4, requests=20, workload=POISSON),
                            "step")
    simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    simulate(cfg, path="simpy", trace_path=str(tmp_path / "simpy.jsonl"))
    assert filecmp.cmp(tmp_path / "fast.jsonl", tmp_path / "simpy.jsonl", shallow=False)


def test_bad_first_token_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"server.first_token: .*prefill.*step"):
        config_from_dict({"server": {"mode": "ar", "k": 0, "first_token": "decode"},
                          "target": {"name": "t", "cost": {"name": "constant", "time": 0.01}},
                          "workload": {"name": "offline"}})
    cfg = tmp_path / "c.toml"
    cfg.write_text('requests = 4\n[server]\nmode = "ar"\nk = 0\nfirst_token = "never"\n'
                   '[target]\nname = "t"\ncost = {name = "constant", time = 0.01}\n'
                   '[workload]\nname = "offline"\n')
    assert main(["simulate", str(cfg), "--trace-level", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "server.first_token" in err[0]
