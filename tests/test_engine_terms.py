"""Engine-step terms from the host measurements (validation/engine/step_terms.py): the derivations
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
from psdlab.validation.engine import step_terms as et
from sim_helpers import make_config

ROOT = os.path.join(os.path.dirname(__file__), "..")
V0_FILE = os.path.join(ROOT, "results", "engine", "vllm_v0_step_host.json")
API_FILE = os.path.join(ROOT, "results", "engine", "vllm_served_share.json")
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


def _load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_presets_hold_what_the_committed_measurements_give():
    v0 = _load(V0_FILE)
    api = et.api_terms(_load(API_FILE), v0)
    presets = engine_step_presets()
    want = [("vllm-v0", et.v0_sd_terms(v0)), ("hf-assisted", et.hf_assisted_terms(
        _load(HF_FILE), v0))] + [(name, api) for name in ("vllm-v0", "vllm-v1", "vllm-v1-async")]
    keys = ("draft_fixed_s", "draft_per_seq_s", "draft_per_pass_s", "draft_per_token_s",
            "api_per_request_s", "api_per_token_s")
    for name, terms in want:
        for key in keys:
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


@settings(max_examples=25, deadline=None)
@given(per_req=st.floats(0.0, 10.0), per_tok=st.floats(0.0, 0.3))
def test_api_terms_separate_per_request_from_per_token_work(per_req, per_tok):
    runs = [{"way": "served", "requests": n, "output_len": length,
             "cpu_s": {"api": 1e-3 * (per_req * n + per_tok * n * length)}}
            for n in (16, 48) for length in (16, 64)]
    runs.append({"way": "offline", "requests": 16, "output_len": 16, "cpu_s": {"api": 99.0}})
    got = et.api_terms({"runs": runs}, _v0(et.VIDUR_A100_PER_SEQ_MS, 1, 0, 0))
    assert got["api_per_request_s"] == pytest.approx(per_req * 1e-3, abs=1e-9)
    assert got["api_per_token_s"] == pytest.approx(per_tok * 1e-3, abs=1e-9)


def test_api_work_in_the_engine_process_slows_every_step():
    api = {"served": True, "api_per_token_s": 1e-3}
    assert _run("ar", 0, api_overlap=0.0, **api) < _run("ar", 0)
    assert _run("sd", 3, api_overlap=0.0, **api) < _run("sd", 3)
    # in its own process it leaves the engine's steps alone (it caps the rate instead)
    assert _run("ar", 0, api_overlap=1.0, **api) == _run("ar", 0)
    # and a run that is not served pays nothing
    assert _run("ar", 0, api_overlap=0.0, api_per_token_s=1e-3) == _run("ar", 0)


@settings(max_examples=30, deadline=None)
@given(per_tok=st.floats(1e-6, 1e-3), per_req=st.floats(0.0, 1e-2),
       length=st.integers(1, 2000), f=st.floats(0.01, 1.0))
def test_the_api_servers_rate_bound(per_tok, per_req, length, f):
    from psdlab.sim.costs.engine_step import api_bound_tok_s, get_engine_step
    step = get_engine_step({"base": "vllm-v1", "served": True, "api_overlap": f,
                            "api_per_token_s": per_tok, "api_per_request_s": per_req})
    bound = api_bound_tok_s(step, length)
    assert bound == pytest.approx(1.0 / (f * (per_tok + per_req / length)))
    assert api_bound_tok_s(step, 2 * length) >= bound       # longer answers amortise a request
    slower = get_engine_step({"base": "vllm-v1", **{k: getattr(step, k) for k in (
        "served", "api_overlap", "api_per_request_s")}, "api_per_token_s": 2 * per_tok})
    assert api_bound_tok_s(slower, length) < bound
    assert api_bound_tok_s(get_engine_step({"base": "vllm-v1"}), length) == float("inf")
    in_engine = get_engine_step({"base": "vllm-v1", "served": True, "api_overlap": 0.0})
    assert api_bound_tok_s(in_engine, length) == float("inf")


def test_a_served_points_throughput_is_capped_by_its_api_server():
    from psdlab.sim.costs.engine_step import api_bound_tok_s, get_engine_step
    from psdlab.sim import system_check as sc
    raw = {"id": "x", "source": "test", "engine_step": "vllm-v1", "gpu_preset": "vllm-cudagraph",
           "model": "llama-3.1-8b", "hardware": "h100-sxm", "tp": 1, "mode": "ar", "batch": 64,
           "input_len": 64, "output_len": 32, "quantity": "output_tokens_per_s",
           "published": 1000.0, "role": "held_out", "requests": 64}
    offline = sc.predict_point(sc._point(raw, "p"))
    served = sc._point({**raw, "api_server": "own-process"}, "p")
    bound = api_bound_tok_s(get_engine_step(sc.engine_step_of(served)), 32)
    assert sc.predict_point(served) == pytest.approx(min(offline, bound))
    in_engine = sc.predict_point(sc._point({**raw, "api_server": "engine-process"}, "p"))
    assert in_engine < offline
    with pytest.raises(ValueError, match=r"^p\.api_server: "):
        sc._point({**raw, "api_server": "thread"}, "p")


@pytest.mark.parametrize("field, value, needle", [
    ("api_overlap", 1.5, r"server\.engine_step\.api_overlap: "),
    ("served", "yes", r"server\.engine_step\.served: expected true or false, got 'yes'"),
    ("draft_per_token_s", -1e-3, r"server\.engine_step\.draft_per_token_s: "),
    ("api_per_token_s", -1.0, r"server\.engine_step\.api_per_token_s: "),
])
def test_bad_new_terms_are_one_line_errors(field, value, needle):
    from psdlab.sim.costs.engine_step import get_engine_step
    with pytest.raises(ValueError, match="^" + needle) as err:
        get_engine_step({"base": "vllm-v0", field: value})
    assert "\n" not in str(err.value)
