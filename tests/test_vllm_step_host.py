"""The host-step bookkeeping the engine measurements share (validation/engine/host_steps.py),
without any engine: which vLLM V1 steps count as full decode steps, host time = step wall minus the
passes, the per-cell statistics and the fitted host lines."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.validation.engine import host_steps as vsh


def _step(seqs, tokens, new=0, wall=0.010, fwd_t=0.004, fwd_d=0.0, exec_=0.006, samp=0.0005):
    return {"wall": wall, "seqs": seqs, "tokens": tokens, "new": new, "emitted": seqs,
            "schedule": 0.001, "update": 0.0005, "exec": exec_, "process_outputs": 0.0007,
            "fwd_target": fwd_t, "fwd_draft": fwd_d, "sampling": samp}


def test_only_full_decode_steps_count():
    steps = [_step(4, 64, new=4),            # prefill: requests join
             _step(4, 20),                   # SD k = 4: 4 x 5 tokens, counts
             _step(3, 15),                   # a request finished: not the full batch
             _step(4, 16),                   # drafts shortened at the end
             _step(4, 20, fwd_d=0.002)]
    got = vsh.v1_decode_steps(steps, batch=4, k=4)
    assert len(got) == 2
    assert got[0]["host"] == pytest.approx(6.0)          # 10 ms wall - 4 ms target pass
    assert got[1]["host"] == pytest.approx(4.0)          # the drafter's passes come off too
    # execute/sample less the passes and the samplers; the rest of the wall is "other"
    assert got[0]["exec_host"] == pytest.approx(6.0 - 4.0 - 0.5)
    assert got[0]["other"] == pytest.approx(10.0 - 1.0 - 0.5 - 6.0 - 0.7)
    assert vsh.v1_decode_steps(steps, batch=4, k=0) == []   # AR wants 4 x 1 tokens


def test_cpu_time_host_subtracts_the_passes_cpu_time():
    s = dict(_step(2, 2), wall_cpu=0.007, fwd_target_cpu=0.003)
    (got,) = vsh.v1_decode_steps([s], batch=2, k=0)
    assert got["host_cpu"] == pytest.approx(4.0)          # 7 ms CPU - 3 ms in the pass
    assert got["host"] == pytest.approx(6.0)              # wall: 10 - 4


@settings(max_examples=40, deadline=None)
@given(fixed=st.floats(0.1, 5.0), per_seq=st.floats(0.0, 0.2), per_tok=st.floats(0.0, 0.05),
       sd=st.floats(0.0, 5.0), per_k=st.floats(0.0, 1.0))
def test_fits_recover_a_known_host_line(fixed, per_seq, per_tok, sd, per_k):
    cells = []
    for mode, k in (("ar", 0), ("sd", 2), ("sd", 4)):
        for b in (1, 2, 4, 8, 16, 32, 64):
            t = b * (k + 1)
            host = fixed + per_seq * b + per_tok * t + (sd + per_k * k if k else 0.0)
            cells.append({"mode": mode, "k": k, "label": f"sd-k{k}" if k else "ar",
                          "batch": b, "scheduled_tokens": t,
                          "host_ms": {"median": host + 9.0, "repeat_median": host}})
    f = vsh.fits(cells)
    assert f["all"]["fixed_ms"] == pytest.approx(fixed, abs=1e-6)
    assert f["all"]["per_seq_ms"] == pytest.approx(per_seq, abs=1e-6)
    assert f["all"]["per_token_ms"] == pytest.approx(per_tok, abs=1e-6)
    assert f["all"]["sd_fixed_ms"] == pytest.approx(sd, abs=1e-6)
    assert f["all"]["per_draft_pass_ms"] == pytest.approx(per_k, abs=1e-6)
    # per mode the line in batch alone: slope = per_seq + per_tok (k + 1)
    assert f["sd-k4"]["per_seq_ms"] == pytest.approx(per_seq + 5 * per_tok, abs=1e-6)
    assert f["ar"]["fixed_ms"] == pytest.approx(fixed, abs=1e-6)


def test_fit_r2_drops_with_noise():
    cells = [{"mode": "ar", "k": 0, "label": "ar", "batch": b, "scheduled_tokens": b,
              "host_ms": {"repeat_median": 1.0 + 0.05 * b + (0.8 if b % 2 else -0.8)}}
             for b in (1, 2, 4, 8, 16, 32, 64)]
    assert vsh.fits(cells)["ar"]["r2"] < 0.99


def test_bad_grids_are_one_line_errors():
    assert vsh.parse_ints("4, 1,2,2", "--batches", 1, 256) == [1, 2, 4]
    with pytest.raises(ValueError, match=r"^--batches: comma-separated integers in 1\.\.256"):
        vsh.parse_ints("1,x", "--batches", 1, 256)
    with pytest.raises(ValueError, match=r"^--ks: integers in 1\.\.8, got '9'$"):
        vsh.parse_ints("9", "--ks", 1, 8)


def test_a_cell_keeps_each_repeats_median_beside_the_pooled_one():
    fast = [{"host": 1.0, "x": 0.5}] * 5
    slow = [{"host": 9.0, "x": 0.5}] * 5               # a repeat another job slowed
    cell = vsh.summarize_cell([fast, fast, slow], keys=("host",), parts=("x", "y"),
                              mode="sd", k=2, batch=1)
    assert cell["host"]["repeat_medians"] == [1.0, 1.0, 9.0]
    assert cell["host"]["repeat_median"] == 1.0        # the slowed repeat does not move it
    assert cell["host"]["p75"] == 9.0 and cell["steps"] == 15 and cell["repeats"] == 3
    assert cell["parts_ms_median"] == {"x": 0.5, "y": 0.0}
    with pytest.raises(ValueError, match="no step recorded"):
        vsh.summarize_cell([[], []], keys=("host",), parts=(), mode="ar")


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.0, 5.0), b=st.floats(0.0, 1.0), c=st.floats(0.0, 1.0))
def test_fit_line_recovers_its_columns(a, b, c):
    cells = [{"j": j, "t": t, "h": {"repeat_median": a + b * j + c * t}}
             for j in (1, 2, 4, 8) for t in (2, 3, 9)]
    f = vsh.fit_line(cells, "h", ("one", "j", "t"))
    assert f["coef_ms"]["one"] == pytest.approx(a, abs=1e-6)
    assert f["coef_ms"]["j"] == pytest.approx(b, abs=1e-6)
    assert f["coef_ms"]["t"] == pytest.approx(c, abs=1e-6)
