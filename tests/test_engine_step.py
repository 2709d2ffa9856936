"""The engine step model (sim.costs.engine_step): each physical direction, 'none' changes
nothing, fast path == SimPy path, presets and bad specs."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.sim.costs.engine_step import (EngineStep, StepHost, engine_step_presets,
                                          get_engine_step)
from psdlab.sim.simulation import simulate
from sim_helpers import make_config

ZERO = {"host_fixed_s": 0.0, "host_per_seq_s": 0.0, "host_per_token_s": 0.0,
        "draft_fixed_s": 0.0, "draft_per_seq_s": 0.0, "transfer_s": 0.0,
        "transfer_prob_bytes": 0.0, "cv_verify": 0.0, "cv_draft": 0.0, "cv_prefill": 0.0}


def _cfg(mode: str, step, m: int = 8, requests: int = 48, seed: int = 0):
    # t = 4 x 5 ms = V = 20 ms: PSD's best case, so the host terms decide the gain
    return make_config(mode=mode, k=4, m=m, requests=requests, c_t=0.02, c_d=0.005,
                       seed=seed).replace(server_engine_step=step)


def _thr(mode: str, step, **kw) -> float:
    return float(simulate(_cfg(mode, step, **kw)).metrics["decode_throughput_tok_s"])


def _gain(step, **kw) -> float:
    return _thr("psd", step, **kw) / _thr("sd", step, **kw)


def _table(**changes):
    return {**ZERO, **changes}


def test_none_and_zero_terms_reproduce_the_old_results_exactly():
    for mode in ("ar", "sd", "sd-sep", "psd"):
        old = simulate(make_config(mode=mode, k=3, requests=24, jitter=None))
        none = simulate(make_config(mode=mode, k=3, requests=24).replace(
            server_engine_step="none"))
        zero = simulate(make_config(mode=mode, k=3, requests=24).replace(
            server_engine_step=_table()))
        for res in (none, zero):
            assert [r.finish for r in res.trace.requests] == [r.finish for r in
                                                              old.trace.requests]
            assert [(s.start, s.end) for s in res.trace.steps] == [
                (s.start, s.end) for s in old.trace.steps]


@settings(max_examples=8, deadline=None)
@given(st.floats(0.0, 2e-3), st.floats(1e-4, 2e-3))
def test_more_host_work_per_sequence_lowers_psd_gain(low, extra):
    a = _gain(_table(host_per_seq_s=low))
    b = _gain(_table(host_per_seq_s=low + extra))
    assert b < a


def test_host_work_that_overlaps_costs_less_than_host_work_that_serialises():
    host = _table(host_fixed_s=5e-3, host_per_seq_s=5e-4)
    for mode in ("ar", "sd", "psd"):
        serial = _thr(mode, {**host, "overlap": 0.0})
        hidden = _thr(mode, {**host, "overlap": 1.0})
        half = _thr(mode, {**host, "overlap": 0.5})
        none = _thr(mode, "none")
        assert serial < half < hidden <= none
    # host shorter than the GPU phases and fully overlapped: it costs nothing
    assert _thr("ar", {**host, "overlap": 1.0}) == _thr("ar", "none")


def test_step_variability_lowers_psd_gain():
    calm = _gain(_table(), requests=96)
    noisy = _gain(_table(cv_verify=0.3, cv_draft=0.3), requests=96)
    assert noisy < calm


def test_single_driver_serialising_both_halves_lowers_psd_gain():
    host = _table(host_fixed_s=3e-3, draft_fixed_s=1e-3)
    assert _gain({**host, "single_driver": True}) < _gain({**host, "single_driver": False})


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 64), st.integers(1, 6), st.floats(1e-3, 0.1), st.floats(1e-3, 0.1),
       st.floats(0, 1e-3), st.floats(0, 1e-4), st.floats(0, 1e-4), st.floats(0, 1e-3),
       st.floats(0, 3e-3))
def test_psd_single_driver_step_is_max_plus_both_halves_host(n, k, t, v, fixed, per_seq,
                                                             per_tok, draft_fixed, per_pass):
    """Balanced batches, host serialised: max(draft', verify') = max(t, V) + Hv + Hd."""
    step = EngineStep("x", host_fixed_s=fixed, host_per_seq_s=per_seq,
                      host_per_token_s=per_tok, draft_fixed_s=draft_fixed,
                      draft_per_pass_s=per_pass)
    sh = StepHost(step, "psd", separate=True, drafter=None)
    tokens = n * (k + 1)
    ver = float(sh.verify(np.array([v]), np.array([n]), np.array([tokens]))[0])
    dra = float(sh.draft(np.array([t]), np.array([n]), np.array([n * k]), np.array([k]))[0])
    hv = fixed + per_seq * n + per_tok * tokens
    hd = draft_fixed + per_pass * k
    assert max(ver, dra) == pytest.approx(max(t, v) + hv + hd, rel=1e-12)
    sd = StepHost(step, "sd", separate=False, drafter=None)
    sd_step = (float(sd.verify(np.array([v]), np.array([n]), np.array([tokens]))[0])
               + float(sd.draft(np.array([t]), np.array([n]), np.array([n * k]),
                                np.array([k]))[0]))
    assert sd_step == pytest.approx(t + v + hv + hd, rel=1e-12)


@pytest.mark.parametrize("mode", ["sd", "psd"])
def test_fast_path_equals_simpy_path_with_an_engine_step(mode):
    cfg = make_config(mode=mode, k=3, m=4, requests=24, workload={
        "name": "poisson", "rate": 40.0, "prompt": {"name": "fixed", "value": 32},
        "output": {"name": "fixed", "value": 48}}).replace(server_engine_step="vllm-v0")
    fast, slow = simulate(cfg, path="fast"), simulate(cfg, path="simpy")
    assert [(s.start, s.end) for s in fast.trace.steps] == [(s.start, s.end)
                                                            for s in slow.trace.steps]
    assert [r.finish for r in fast.trace.requests] == [r.finish for r in slow.trace.requests]


def test_gpu_preset_names_its_engine_step():
    assert get_engine_step("preset", preset_default="vllm-v0") is engine_step_presets()["vllm-v0"]
    from psdlab.sim.costs.engine_step import preset_default
    assert preset_default({"name": "gpu", "engine": "vllm-eager", "model": "x"}) == "vllm-v0"
    assert preset_default({"name": "gpu", "engine": "vllm-cudagraph"}) == "vllm-v1"
    assert preset_default({"name": "constant", "time": 0.01}) is None
    # a V1 preset overlaps, a V0 preset serialises
    assert engine_step_presets()["vllm-v1-async"].overlap == 1.0
    assert engine_step_presets()["vllm-v0"].overlap == 0.0


def test_engine_step_recorded_in_the_run_record():
    res = simulate(_cfg("psd", "vllm-v0", requests=8))
    assert res.trace.run.extra["engine_step"]["name"] == "vllm-v0"
    assert "engine_step" not in simulate(_cfg("psd", "none", requests=8)).trace.run.extra


@pytest.mark.parametrize("spec, needle", [
    ("vllm-v9", "unknown engine step 'vllm-v9'; known: hf-assisted, torch, vllm-v0,"),
    ({"base": "vllm-v0", "overlap": 1.5}, "server.engine_step.overlap: must be in [0, 1]"),
    ({"base": "vllm-v0", "host_per_seq_s": -1}, "server.engine_step.host_per_seq_s: must be"),
    ({"base": "vllm-v0", "cv_draft": 5}, "server.engine_step.cv_draft: must be in [0, 3]"),
    ({"base": "vllm-v0", "bogus": 1}, "server.engine_step.bogus: unknown field"),
    ({"base": "vllm-v0", "single_driver": "yes"}, "server.engine_step.single_driver"),
])
def test_bad_specs_give_one_line_errors_through_the_cli(tmp_path, capsys, spec, needle):
    from psdlab.cli import main

    cfg = tmp_path / "c.toml"
    value = json.dumps(spec) if isinstance(spec, str) else (
        "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in spec.items()) + "}")
    cfg.write_text(f"""requests = 4
[server]
mode = "psd"
engine_step = {value}
[target]
cost = {{name = "constant", time = 0.01}}
[drafter]
cost = {{name = "constant", time = 0.002}}
[acceptance]
name = "geometric"
alpha = 0.7
[workload]
name = "offline"
prompt = {{name = "fixed", value = 8}}
output = {{name = "fixed", value = 8}}
""")
    assert main(["simulate", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_preset_file_values_are_checked():
    from psdlab.sim.costs.engine_step import _step_from
    with pytest.raises(ValueError, match=r"^x\.overlap: must be in \[0, 1\]"):
        _step_from("x", {"overlap": -0.1}, "x")
