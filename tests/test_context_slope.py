"""The decode fits' context slope: read off the variation inside repeated shapes
(``validation.nnls_fit.within_group_slope``, ``validation.calibrate.context_slope``), and the verify
table's measured times moved by it to the context a replay asks for
(``sim.costs.calibrated``)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from psdlab.analysis.trace import Phase, RunInfo, StepRecord, Trace, Verified
from psdlab.sim.costs.calibrated import calibrated_cost
from psdlab.validation.calibrate import MIN_TABLE, calibrate
from psdlab.validation.nnls_fit import fit_nonneg, within_group_slope
from psdlab.sim.costs.fitted import write_fit
from psdlab.validation.model_file import model_parts

#: a CPU pass's time is a step function of its shape (on the demo's machine 4 sequences verify
#: as fast as 1): per-shape offsets, falling with the batch, that no affine model has
BUMP = {1: 0.0, 2: -0.005, 3: -0.010, 4: -0.015}


@settings(deadline=None, max_examples=40)
@given(st.floats(1e-6, 1e-3), st.lists(st.floats(0.01, 0.5), min_size=2, max_size=6),
       st.integers(0, 2**31 - 1))
def test_within_group_slope_is_exact_whatever_the_groups_own_levels(slope, levels, seed):
    """Noise-free data y = level(group) + slope * x: the within-group slope is the slope,
    whatever the levels and however x is spread across the groups (the levels are what a
    joint affine fit would mix into it)."""
    rng = np.random.default_rng(seed)
    x, y, g = [], [], []
    for j, level in enumerate(levels):
        xs = rng.uniform(0, 100, 5) + 300 * j
        x += list(xs)
        y += list(level + slope * xs)
        g += [j] * 5
    got, se, used = within_group_slope(np.array(x), np.array(y), g)
    assert got == pytest.approx(slope, rel=1e-6)
    assert used == 5 * len(levels) and se < 1e-6 * slope + 1e-12


def test_within_group_slope_skips_groups_with_one_context():
    """Groups of one row or one x value carry no slope; none left: nan and no rows."""
    got, se, used = within_group_slope([1.0, 1.0, 2.0], [0.1, 0.2, 0.3], ["a", "a", "b"])
    assert np.isnan(got) and np.isnan(se) and used == 0


def test_fixed_coefficient_is_kept_and_the_rest_fitted_to_what_it_leaves():
    """A fixed coefficient is reported as given; the free ones fit y minus its part, and with
    match_total the total time is still matched."""
    rng = np.random.default_rng(1)
    s = rng.integers(1, 5, 300).astype(float)
    c = s * rng.uniform(50, 150, 300)
    y = (0.03 + 0.01 * s + 2e-5 * c) * rng.gamma(200, 1 / 200, 300)
    X = np.c_[np.ones_like(s), s, c]
    fit = fit_nonneg(X, y, ("base", "per_seq", "per_context"), match_total=True,
                     fixed={"per_context": (3e-5, 2e-5, 4e-5)})
    coef = fit.coefficients()
    assert coef["per_context"] == 3e-5 and fit.identified == (True, True, True)
    assert (fit.ci_low[2], fit.ci_high[2]) == (2e-5, 4e-5)
    assert float(np.sum(X @ np.array(fit.coef))) == pytest.approx(float(y.sum()), rel=1e-9)
    # the free terms absorb what the larger fixed slope takes off: less per sequence
    free = fit_nonneg(X, y, ("base", "per_seq", "per_context"), match_total=True)
    assert coef["per_seq"] < free.coefficients()["per_seq"]


def _serial_trace(seed: int, per_context: float, n_steps: int = 240) -> Trace:
    """SD steps on two devices at batch sizes 1-4 (k = 4), the context growing with the batch
    (sum over its sequences) and varying inside each size; verify time = 0.03 + 0.0001 per
    token + per_context per context token + the shape's step-function offset, 3% noise."""
    rng = np.random.default_rng(seed)
    run = RunInfo(mode="sd-sep", k=4, m=4, source="runtime",
                  devices={"drafter": "cpu:0", "target": "cpu:1"})
    steps, t = [], 0.0
    for i in range(n_steps):
        n = int(rng.integers(1, 5))
        ctx = int(n * rng.uniform(60, 160))
        tokens = 5 * n
        v = (0.03 + 0.0001 * tokens + per_context * ctx + BUMP[n]) * rng.normal(1, 0.03)
        d = 4 * (0.02 + 0.5 * BUMP[n]) * rng.normal(1, 0.03)    # the drafter's steps too
        draft = Phase("draft", "cpu:0", t, t + d, n, 4 * n, ctx)
        verify = Phase("verify", "cpu:1", t + d, t + d + v, n, tokens, ctx)
        steps.append(StepRecord(i, t, t + d + v, (draft, verify),
                                tuple(Verified(f"r{j}", 4, 1, 2) for j in range(n))))
        t += d + v
    return Trace(run, steps, [])


def test_calibration_reads_the_context_slope_inside_shapes():
    """Shapes with their own offsets (larger batches relatively faster, as CPU kernels are)
    and context growing with the batch: a joint affine fit gives the context term what the
    offsets took off the larger shapes (the non-negative per-token terms cannot), the
    calibration reads the planted
    slope from the variation inside each shape."""
    planted = 4e-5
    tr = _serial_trace(3, planted)
    cal = calibrate([tr], holdout=0.0)
    got = cal.costs["verify"].coefficients()["per_context"]
    assert got == pytest.approx(planted, rel=0.2)
    lo, hi = cal.costs["verify"].ci_low[3], cal.costs["verify"].ci_high[3]
    assert lo < planted < hi
    assert any("verify: per_context from the context variation" in n for n in cal.notes)
    # what the joint fit of the same phases gives: far from the slope
    from psdlab.validation.phase_model import collect_phases, design
    rows = collect_phases([tr])[0]["verify"]
    joint = fit_nonneg(design("verify", [p for p, _ in rows]), np.array([d for _, d in rows]),
                       ("base", "per_token", "per_seq", "per_context"), match_total=True)
    assert abs(joint.coefficients()["per_context"] - planted) > 0.5 * planted


def test_verify_table_records_each_shapes_mean_context():
    tr = _serial_trace(4, 4e-5)
    table = calibrate([tr], holdout=0.0).verify_table
    for sq, tk, _median, count, ctx in table:
        want = [p.context for s in tr.steps for p in s.phases
                if p.kind == "verify" and (p.seqs, p.tokens) == (sq, tk)]
        assert count == len(want) >= MIN_TABLE
        assert ctx == pytest.approx(float(np.mean(want)))


def _model_with_table(tmp_path, rows) -> tuple[str, dict]:
    cal = calibrate([_serial_trace(5, 4e-5)], holdout=0.0)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(cal))
    doc = json.loads(open(path).read())
    doc["meta"]["tables"]["target"] = rows
    out = tmp_path / "t.json"
    out.write_text(json.dumps(doc))
    return str(out), doc["roles"]["target"]["coef"]


def test_table_times_move_by_the_fits_context_slope(tmp_path):
    """A measured shape's time holds at its mean calibration context and moves by the fit's
    context slope elsewhere; interpolation and the step past the largest shape use the moved
    times; a table row without a context (an older model file) does not move."""
    path, coef = _model_with_table(tmp_path, [[2, 10, 0.5, 9, 200.0], [2, 20, 0.7, 9, 260.0]])
    pc = coef["per_context"]
    assert pc > 0
    c = calibrated_cost(path, "target")
    fit = calibrated_cost(path, "target", table=False)
    assert c.forward_time(2, 10, 200) == pytest.approx(0.5)
    assert c.forward_time(2, 10, 500) == pytest.approx(0.5 + 300 * pc)
    assert c.forward_time(2, 20, 100) == pytest.approx(0.7 - 160 * pc)
    mid = (0.5 + 100 * pc + 0.7 + 40 * pc) / 2
    assert c.forward_time(2, 15, 300) == pytest.approx(mid)
    assert c.forward_time(2, 25, 300) == pytest.approx(
        0.7 + 40 * pc + fit.forward_time(2, 25, 300) - fit.forward_time(2, 20, 300))
    assert np.allclose(c.forward_time(np.array([2, 2]), np.array([10, 15]), 300.0),
                       [0.5 + 100 * pc, mid])
    old, _ = _model_with_table(tmp_path, [[2, 10, 0.5, 9]])
    assert calibrated_cost(old, "target").forward_time(2, 10, 500) == pytest.approx(0.5)


def test_draft_table_holds_one_pass_of_the_serial_draft_phases():
    """A serial draft phase of k passes gives (time - per-phase cost) / k at its mean pass
    context (context + seqs (k - 1) / 2); overlapped steps are left out; the entry is the
    mean (the replay's times add up, so the table must be unbiased for the mean)."""
    from psdlab.validation.cost_tables import draft_table
    tr = _serial_trace(6, 4e-5)
    skew = []
    for i, s in enumerate(tr.steps):             # a right-skewed draft time: mean > median
        d = s.phases[0]
        if i % 7 == 0:
            d = Phase("draft", d.device, d.start, d.start + 3 * (d.end - d.start), d.seqs,
                      d.tokens, d.context)
        skew.append(StepRecord(s.index, s.start, s.end, (d, s.phases[1]), s.verified))
    over = StepRecord(len(skew), 0.0, 9.0, (Phase("draft", "cpu:0", 0.0, 9.0, 2, 8, 100),
                                            Phase("verify", "cpu:1", 0.0, 0.1, 2, 10, 100)),
                      (), 0, 1, True)
    from psdlab.validation.phase_model import with_draft_forwards
    table = draft_table([with_draft_forwards(Trace(tr.run, skew + [over], []))],
                        per_phase=0.002)
    assert [r[:2] for r in table] == [(n, n) for n in (1, 2, 3, 4)]
    for n, _, per_pass, count, ctx in table:
        mine = [s.phases[0] for s in skew if s.phases[0].seqs == n]
        assert count == len(mine)
        assert per_pass == pytest.approx(np.mean([(p.end - p.start - 0.002) / 4 for p in mine]))
        assert ctx == pytest.approx(np.mean([p.context + n * 3 / 2 for p in mine]))
    cal = calibrate([Trace(tr.run, skew, [])], holdout=0.0)
    assert len(cal.draft_table) == 4


def test_drafter_table_reaches_the_replays_drafter(tmp_path):
    """The model file carries the drafter's table and the replay's drafter cost takes it: a
    one-sequence pass at the table's context costs the table's time, not the fit's."""
    cal = calibrate([_serial_trace(7, 4e-5)], holdout=0.0)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(cal))
    doc = json.loads(open(path).read())
    rows = doc["meta"]["tables"]["drafter"]
    n, _, per_pass, _, ctx = rows[0]
    c = calibrated_cost(path, "drafter")
    assert c.forward_time(n, n, ctx) == pytest.approx(per_pass)
    fit = calibrated_cost(path, "drafter", table=False)
    assert abs(fit.forward_time(n, n, ctx) / per_pass - 1) > 0.05


def test_a_context_probe_fixes_the_decode_fits_context_slopes(tmp_path):
    """With a probe's result the verify and draft fits take its slopes (95% interval from its
    standard error, a negative slope as 0), say so in the notes and keep the probe in the
    model file; without one, the within-shape slope as before."""
    from psdlab.validation.context_slopes import probe_slopes
    tr = _serial_trace(3, 4e-5)
    probe = {"verify": {"slope": 1.5e-5, "se": 1e-6}, "draft": {"slope": -2e-6, "se": 2e-6}}
    cal = calibrate([tr], holdout=0.0, context_probe=probe)
    verify, draft = cal.costs["verify"], cal.costs["draft"]
    assert verify.coefficients()["per_context"] == 1.5e-5
    assert (verify.ci_low[3], verify.ci_high[3]) == pytest.approx((1.5e-5 - 1.96e-6,
                                                                   1.5e-5 + 1.96e-6))
    assert draft.coefficients()["per_context"] == 0.0
    assert probe_slopes(probe)["draft"] == (0.0, 0.0, pytest.approx(-2e-6 + 3.92e-6))
    assert sum("per_context fixed at the controlled context probe" in n for n in cal.notes) == 2
    doc = write_fit(tmp_path / "m.json", *model_parts(cal))
    assert doc["meta"]["context_probe"] == probe
    plain = calibrate([tr], holdout=0.0)
    assert plain.costs["verify"].coefficients()["per_context"] == pytest.approx(4e-5, rel=0.2)
    assert "context_probe" not in write_fit(tmp_path / "p.json", *model_parts(plain))["meta"]


def test_context_probe_file_roundtrip_and_bad_files(tmp_path):
    from psdlab.validation.context_slopes import (PROBE_FILE, probe_slopes, read_probe,
                                                 read_probe_file, write_probe)
    probe = {"seqs": 4, "k": 4, "verify": {"slope": 2e-5, "se": 1e-6}}
    assert read_probe(tmp_path) is None
    path = write_probe(tmp_path, probe)
    assert path.endswith(PROBE_FILE) and read_probe(tmp_path) == probe
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        read_probe_file(tmp_path / "bad.json")
    for bad, field in (({"verify": {"slope": "x", "se": 1}}, "context_probe.verify"),
                       ({"draft": {"slope": 1e-5, "se": -1.0}}, "context_probe.draft"),
                       ({"verify": {"slope": float("nan"), "se": 0.0}}, "context_probe.verify")):
        with pytest.raises(ValueError, match=field):
            probe_slopes(bad)


def test_calibrate_cli_takes_the_probe_beside_the_traces_or_named(tmp_path, capsys):
    """``psdlab calibrate`` uses the context_probe.json in the first trace's folder, or the
    file ``--context-probe`` names; a bad probe file is a one-line error."""
    from psdlab.analysis.trace import write_trace
    from psdlab.cli import main
    from psdlab.validation.context_slopes import write_probe
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "sd.jsonl"
    write_trace(path, _serial_trace(5, 4e-5))
    assert main(["calibrate", str(path), "-o", str(tmp_path / "plain.json"),
                 "--no-acceptance-selection"]) == 0
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert "context_probe" not in plain["meta"]
    write_probe(folder, {"verify": {"slope": 1e-5, "se": 0.0}})
    assert main(["calibrate", str(path), "-o", str(tmp_path / "beside.json"),
                 "--no-acceptance-selection"]) == 0
    beside = json.loads((tmp_path / "beside.json").read_text())
    assert beside["roles"]["target"]["coef"]["per_context"] == 1e-5
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"verify": {"slope": 3e-5, "se": 0.0}}))
    assert main(["calibrate", str(path), "-o", str(tmp_path / "named.json"),
                 "--context-probe", str(other), "--no-acceptance-selection"]) == 0
    named = json.loads((tmp_path / "named.json").read_text())
    assert named["roles"]["target"]["coef"]["per_context"] == 3e-5
    capsys.readouterr()
    other.write_text("[1, 2]")
    assert main(["calibrate", str(path), "-o", str(tmp_path / "x.json"),
                 "--context-probe", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "other.json" in err
