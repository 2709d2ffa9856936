"""Engine-step terms from the host measurements (validation/engine_terms.py): the derivations
recover known lines, the committed presets are what the committed measurements give, and
each SD-only term moves the simulated system the physical way."""
from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.sim.costs.engine_step import engine_step_presets
from psdlab.sim.simulation import simulate
from psdlab.validation import engine_terms as et
from sim_helpers import make_config

ROOT = os.path.join(os.path.dirname(__file__), "..")
V0_FILE = os.path.join(ROOT, "results", "engine", "vllm_v0_step_host.json")
HF_FILE = os.path.join(ROOT, "results", "engine", "hf_assisted_step_host.json")


def _cell(mode, k, batch, **vals):
    return {"mode": mode, "k": k, "batch": batch,
            **{key: {"repeat_median": v, "median": v + 5.0} for key, v in vals.items()}}


def _v0(per_seq_here, c, d, g):
    cells = [_cell("ar", 0, b, sched_out_cpu=0.1 + per_seq_here * b) for b in (1, 2, 4, 8, 16)]
    cells += [_cell("sd", k, b, sd_only_cpu=c + d * b + g * b * k)
              for k in (1, 2, 4) for b in (1, 4, 16)]
    return {"cells": cells}


@settings(max_examples=25, deadline=None)
@given(here=st.floats(0.005, 0.2), c=st.floats(0.0, 3.0), d=st.floats(0.0, 0.3),
       g=st.floats(0.0, 0.5))
def test_v0_terms_recover_the_line_and_scale_it_to_the_gpu_host(here, c, d, g):
    got = et.v0_sd_terms(_v0(here, c, d, g))
    f = et.VIDUR_A100_PER_SEQ_MS / here
    assert got["scale"]["factor"] == pytest.approx(f, rel=1e-6)
    assert got["draft_fixed_s"] == pytest.approx(c * f * 1e-3, abs=1e-9)
    assert got["draft_per_seq_s"] == pytest.approx(d * f * 1e-3, abs=1e-9)
    assert got["draft_per_token_s"] == pytest.approx(g * f * 1e-3, abs=1e-9)
    assert got["draft_per_pass_s"] == 0.0        # V0's proposer passes are priced whole


def test_a_host_slower_here_scales_the_terms_down():
    slow, fast = et.v0_sd_terms(_v0(0.06, 1.0, 0.1, 0.2)), et.v0_sd_terms(_v0(0.03, 1.0, 0.1, 0.2))
    assert slow["draft_fixed_s"] == pytest.approx(fast["draft_fixed_s"] / 2)


def test_the_derivations_refuse_what_they_cannot_fit():
    flat = _v0(0.0, 1.0, 0.1, 0.2)
    with pytest.raises(ValueError, match="must be > 0"):
        et.v0_sd_terms(flat)
    one_k = {"cells": [c for c in _v0(0.03, 1, 0.1, 0.2)["cells"] if c["k"] in (0, 4)]}
    with pytest.raises(ValueError, match="two or more k"):
        et.v0_sd_terms(one_k)


@settings(max_examples=25, deadline=None)
@given(h_ar=st.floats(0.05, 0.5), fixed=st.floats(0.0, 2.0), per_pass=st.floats(0.0, 0.3))
def test_hf_terms_are_what_a_step_adds_beyond_its_passes_host_work(h_ar, fixed, per_pass):
    cells = [dict(_cell("ar", 0, 1, host_cpu=h_ar), layers=2)]
    cells += [dict(_cell("sd", k, 1, host_cpu=(k + 1) * h_ar + fixed + per_pass * k), layers=2)
              for k in range(1, 9)]
    cells += [dict(c, layers=16, host_cpu={"repeat_median": 99.0}) for c in cells]
    got = et.hf_assisted_terms({"cells": cells}, _v0(0.0301, 1, 0, 0))
    assert got["layers"] == 2                       # the shallow target's cells are used
    assert got["draft_fixed_s"] == pytest.approx(fixed * 1e-3, abs=1e-9)
    assert got["draft_per_pass_s"] == pytest.approx(per_pass * 1e-3, abs=1e-9)


@pytest.mark.skipif(not (os.path.exists(V0_FILE) and os.path.exists(HF_FILE)),
                    reason="measurement files not committed")
def test_presets_hold_what_the_committed_measurements_give():
    with open(V0_FILE, encoding="utf-8") as fh:
        v0 = json.load(fh)
    with open(HF_FILE, encoding="utf-8") as fh:
        hf = json.load(fh)
    presets = engine_step_presets()
    want = {"vllm-v0": et.v0_sd_terms(v0), "hf-assisted": et.hf_assisted_terms(hf, v0)}
    for name, terms in want.items():
        for key in ("draft_fixed_s", "draft_per_seq_s", "draft_per_pass_s", "draft_per_token_s"):
            if key in terms:
                assert getattr(presets[name], key) == pytest.approx(terms[key], rel=5e-3,
                                                                    abs=1e-9), (name, key)


def _run(mode, k, **terms):
    step = {"base": "torch", "cv_verify": 0.0, "cv_draft": 0.0, "cv_prefill": 0.0, **terms}
    cfg = make_config(mode=mode, k=k, m=8, requests=32, c_t=0.02, c_d=0.004, seed=0)
    return float(simulate(cfg.replace(server_engine_step=step)).metrics[
        "decode_throughput_tok_s"])


@pytest.mark.parametrize("term", ["draft_fixed_s", "draft_per_seq_s", "draft_per_pass_s",
                                  "draft_per_token_s"])
def test_sd_only_work_slows_sd_and_leaves_ar_alone(term):
    assert _run("sd", 3, **{term: 1e-3}) < _run("sd", 3)
    assert _run("ar", 0, **{term: 1e-3}) == _run("ar", 0)


@pytest.mark.parametrize("term", ["draft_per_pass_s", "draft_per_token_s"])
def test_per_pass_and_per_draft_token_work_cost_more_at_larger_k(term):
    loss = {k: 1 - _run("sd", k, **{term: 1e-3}) / _run("sd", k) for k in (1, 4)}
    assert loss[4] > loss[1]


def test_sd_only_work_lowers_the_psd_gain_of_a_single_driver():
    def gain(**terms):
        return _run("psd", 4, **terms) / _run("sd", 4, **terms)
    assert gain(draft_fixed_s=2e-3, draft_per_token_s=1e-4) < gain()
