"""Simulated SD and PSD makespans vs the exact finite-run closed form (sim.closed_form)."""
import numpy as np
import pytest

from psdlab.sim.closed_form import emitted_pmf, psd_makespan, sd_makespan, steps_cdf
from psdlab.sim.simulation import simulate
from sim_helpers import make_config

ALPHA, K, M, L = 0.8, 4, 8, 400
C_T, C_D = 0.03, 0.006     # t = k c_d = 0.024 < V = 0.03


def _offline(n):
    return {"name": "offline", "prompt": {"name": "fixed", "value": 64},
            "output": {"name": "fixed", "value": L}}


def _mean_makespan(mode, requests, seeds):
    out = []
    for seed in seeds:
        cfg = make_config(mode=mode, k=K, m=M, requests=requests, workload=_offline(requests),
                          alpha=ALPHA, c_t=C_T, c_d=C_D, seed=seed, level="none")
        out.append(simulate(cfg).makespan_s)
    return float(np.mean(out))


def test_emitted_pmf_mean_is_the_textbook_formula():
    pe = emitted_pmf(ALPHA, K)
    assert pe.sum() == pytest.approx(1.0)
    assert (np.arange(pe.size) * pe).sum() == pytest.approx((1 - ALPHA ** (K + 1)) / (1 - ALPHA))


def test_steps_cdf_edges():
    # one token per step when alpha = 0: exactly `tokens` steps
    cdf = steps_cdf(0.0, K, 5)
    assert cdf[4] == 0.0 and cdf[5] == 1.0


def test_sd_makespan_matches_closed_form():
    expected = sd_makespan(ALPHA, K, M, L, C_T, C_D)
    got = _mean_makespan("sd", M, range(96))
    assert got == pytest.approx(expected, rel=0.01)


def test_psd_makespan_matches_closed_form():
    expected = psd_makespan(ALPHA, K, M, L, C_T, C_D)
    got = _mean_makespan("psd", 2 * M, range(96))
    assert got == pytest.approx(expected, rel=0.01)


def test_closed_form_start_up_and_tail_matter():
    """The finite-run form is not the steady-state R max(t, V) / f: with these numbers the
    start-up and the drain tail are worth more than the 1% tolerance used above."""
    per_step = (1 - ALPHA ** (K + 1)) / (1 - ALPHA)
    steady = 2 * (L - 1) / per_step * max(K * C_D, C_T)
    assert psd_makespan(ALPHA, K, M, L, C_T, C_D) > 1.02 * steady


@pytest.mark.parametrize("mode", ["sd", "psd"])
def test_saturated_decode_throughput_matches_analysis_batch_model(mode):
    """In steady state (all slots busy, drain tail cut as the paper does) the simulated decode
    throughput is the analysis layer's batch-model throughput m E(k) / step."""
    from psdlab.analysis.metrics import summarize
    from psdlab.analysis.theory import batch
    from psdlab.sim.sim_config import config_from_dict

    m, k, alpha = 8, 4, 0.7
    model = batch.BatchModel(verify_time=batch.AffineVerifyTime(c0=0.02, c_tok=0.0005),
                             draft_time=batch.AffineDraftTime(d0=0.003, d_seq=0.0002),
                             acceptance=batch.GeometricRate(alpha))
    expected = getattr(batch, mode)(model, m, k).throughput
    cfg = config_from_dict({
        "requests": 48, "seed": 5, "server": {"mode": mode, "k": k, "m": m},
        "target": {"cost": {"name": "affine", "base": 0.02, "per_token": 0.0005}},
        "drafter": {"cost": {"name": "affine", "base": 0.003, "per_token": 0.0002}},
        "acceptance": {"name": "geometric", "alpha": alpha},
        "workload": {"name": "poisson", "rate": 1000.0, "prompt": {"name": "fixed", "value": 8},
                     "output": {"name": "fixed", "value": 1500}}})
    got = summarize(simulate(cfg).trace, steps_fraction=0.7)["decode_throughput_tok_s"]
    assert got == pytest.approx(expected, rel=0.01)
