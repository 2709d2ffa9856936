"""validation.set_shift (a prompt set's acceptance level, the spread between sets, forward
chaining) and scripts/acceptance_by_set.py on hand-built patterns."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from psdlab.validation import set_shift
from psdlab.validation.acceptance_pool import walk
from psdlab.validation.set_shift import SetLevel

patterns_st = st.lists(st.text(alphabet="01", min_size=3, max_size=16).map(lambda s: "." + s),
                       min_size=1, max_size=12)


def test_writing_order_names_every_shipped_split_once():
    from psdlab.runtime.prompts import SPLITS
    assert set_shift.WRITING_ORDER == tuple(s for s in SPLITS if s != "all")


@given(patterns_st, st.integers(1, 5))
@settings(max_examples=60, deadline=None)
def test_level_is_accepted_over_proposed_of_the_walk(pats, k):
    """The rate counts every verification the greedy walk makes, over every output length."""
    lengths = {4: 2, len(max(pats, key=len)): 1}
    acc = prop = 0
    for p in pats:
        for n, w in lengths.items():
            for _, proposed, accepted in walk(p[:n], k):
                acc += w * accepted
                prop += w * proposed
    if prop == 0:
        with pytest.raises(ValueError, match="patterns"):
            set_shift.level(pats, ["a"] * len(pats), k, lengths)
        return
    rate, se = set_shift.level(pats, ["a"] * len(pats), k, lengths, draws=50)
    assert rate == pytest.approx(acc / prop)
    assert 0.0 <= rate <= 1.0 and se >= 0.0


def test_level_se_is_zero_for_identical_prompts_and_grows_with_their_spread():
    same = [".1010"] * 20
    assert set_shift.level(same, ["a"] * 20, 2, {5: 1})[1] == pytest.approx(0.0)
    mixed = [".1111", ".0000"] * 10
    _, se = set_shift.level(mixed, ["a"] * 20, 2, {5: 1}, draws=400)
    assert se > 0.05
    # resampling within style: two styles each uniform inside leave nothing to resample
    _, se_style = set_shift.level(mixed, ["x", "y"] * 10, 2, {5: 1}, draws=400)
    assert se_style == pytest.approx(0.0)


def test_level_is_seeded():
    pats = [".1101", ".0010", ".1110", ".0001"] * 3
    a = set_shift.level(pats, ["a"] * 12, 2, {5: 1}, seed=3)
    assert a == set_shift.level(pats, ["a"] * 12, 2, {5: 1}, seed=3)


@given(st.lists(st.floats(0.05, 0.6), min_size=2, max_size=8), st.floats(0.0, 0.05))
@settings(max_examples=60, deadline=None)
def test_between_set_sd_subtracts_the_sampling_variance(rates, se):
    levels = [SetLevel(f"s{i}", 10, r, se) for i, r in enumerate(rates)]
    want = np.sqrt(max(0.0, np.var(rates, ddof=1) - se ** 2))
    assert set_shift.between_set_sd(levels) == pytest.approx(want, abs=1e-12)
    assert set_shift.between_set_sd(levels) <= np.std(rates, ddof=1) + 1e-12


def test_between_set_sd_is_zero_when_sampling_explains_the_spread():
    levels = [SetLevel("a", 10, 0.30, 0.05), SetLevel("b", 10, 0.32, 0.05)]
    assert set_shift.between_set_sd(levels) == 0.0
    assert set_shift.between_set_sd(levels[:1]) == 0.0


@given(st.floats(0.1, 0.5), st.floats(-0.01, 0.02), st.integers(3, 7))
@settings(max_examples=60, deadline=None)
def test_forward_chain_uses_only_earlier_sets(start, step, n):
    """On a straight line the trend rule is exact, the previous set is off by one step, the
    pooled rule by the mean distance; a later set never changes an earlier prediction."""
    levels = [SetLevel(f"s{i}", 10 + i, start + step * i, 0.01) for i in range(n)]
    chain = set_shift.forward_chain(levels, first=2)
    assert [s for s, _ in chain] == [lv.split for lv in levels[2:]]
    for i, (_, err) in enumerate(chain, start=2):
        truth = levels[i].rate
        assert err["linear trend"] == pytest.approx(0.0, abs=1e-9)
        assert err["previous set"] == pytest.approx(levels[i - 1].rate / truth - 1)
        w = np.arange(10, 10 + i)
        pooled = np.dot(w, [lv.rate for lv in levels[:i]]) / w.sum()
        assert err["pooled"] == pytest.approx(pooled / truth - 1)
    shifted = levels[:-1] + [SetLevel("last", 10, 0.9, 0.01)]
    assert set_shift.forward_chain(shifted, 2)[:-1] == chain[:-1]


def _script(name: str = "acceptance_by_set"):
    import importlib.util
    import sys
    from pathlib import Path
    scripts = Path(__file__).resolve().parents[1] / "scripts"
    if str(scripts) not in sys.path:
        sys.path.insert(0, str(scripts))
    path = scripts / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_acceptance_by_set_reads_patterns_and_writes_its_report(tmp_path, capsys):
    """From a patterns file (no probing): one level line per split present at each k, the
    between-set line and a forward-chaining row per set from ``fresh`` on; the report file
    holds what was printed; ids the shipped prompts lack are a one-line error (exit 2)."""
    from psdlab.runtime.prompts import load_prompts
    mod = _script()
    rng = np.random.default_rng(0)
    pats = {}
    for split, p_acc in (("heldout", 0.7), ("fresh", 0.6), ("fresh2", 0.5), ("fresh3", 0.4)):
        for p in load_prompts(split=split)[:15]:
            pats[p.id] = "." + "".join("1" if rng.random() < p_acc else "0" for _ in range(15))
    src = tmp_path / "in-patterns.json"
    src.write_text(json.dumps({"max_new_tokens": 16, "patterns": pats, "cpu": "test"}))
    out = tmp_path / "rep"
    assert mod.main(["--patterns", str(src), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert (tmp_path / "rep.txt").read_text() == text
    for k in (3, 4):
        block = text.split(f"k = {k}:")[1].split("k = ")[0]
        rates = [float(line.split()[2]) for line in block.splitlines()
                 if " n=" in line]
        assert len(rates) == 4 and rates == sorted(rates, reverse=True)
        assert "between-set SD" in block
        chains = block.split("forward chaining")[1:]
        assert len(chains) == 2
        rows = [[line.split()[0] for line in c.splitlines()[2:] if line.strip()] for c in chains]
        assert rows == [["fresh", "fresh2", "fresh3", "mean"], ["fresh2", "fresh3", "mean"]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"max_new_tokens": 16, "patterns": {"nope-1": ".1010"}}))
    assert mod.main(["--patterns", str(bad)]) == 2
    assert mod.main(["--patterns", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "nope-1" in err[0] and "missing.json" in err[1]


def _fitted(logit: float, sigma: float = 0.0):
    from psdlab.sim.acceptance_fitted import make_fitted
    return make_fitted({"name": "fitted", "default": logit, "draft": [0.0], "sigma": sigma},
                       "test")


def test_simulated_rate_is_one_or_zero_at_the_extremes():
    keys = [f"chat-{i}" for i in range(5)]
    assert set_shift.simulated_rate(_fitted(40.0), keys, {9: 1, 16: 2}, 4, reps=2) == 1.0
    assert set_shift.simulated_rate(_fitted(-40.0), keys, {9: 1, 16: 2}, 4, reps=2) == 0.0
    with pytest.raises(ValueError, match="keys"):
        set_shift.simulated_rate(_fitted(0.0), [], {9: 1}, 4)


@given(st.floats(0.15, 0.85), st.integers(2, 5))
@settings(max_examples=8, deadline=None)
def test_simulated_rate_walks_as_the_pattern_walk_does(p, k):
    """A constant acceptance probability p is an i.i.d. Bernoulli(p) match pattern: the
    simulated walk and the walk of such patterns (``level``) agree within Monte Carlo error,
    proposals shortened near the end alike."""
    import math
    from psdlab.sim.acceptance_fitted import make_fitted  # noqa: F401  (the real model)
    rng = np.random.default_rng(1)
    lengths = {7: 1, 12: 1}
    pats = ["." + "".join("1" if rng.random() < p else "0" for _ in range(11))
            for _ in range(3000)]
    walked, se = set_shift.level(pats, ["a"] * len(pats), k, lengths, draws=50)
    sim = set_shift.simulated_rate(_fitted(math.log(p / (1 - p))),
                                   ["a-1"] * 300, lengths, k, reps=10, seed=2)
    assert abs(sim - walked) < 5 * se + 0.01


def test_acceptance_by_set_transfer_fits_every_candidate_on_the_other_sets(tmp_path, capsys):
    """``--transfer``: one case per later set present, each fitted on the others; every
    candidate and the resampling row predict it; the summary averages every case."""
    from psdlab.runtime.prompts import load_prompts
    from psdlab.validation.acceptance_transfer import CANDIDATES
    mod = _script()
    rng = np.random.default_rng(0)
    pats = {}
    for split in ("fresh", "fresh2", "fresh3"):
        for p in load_prompts(split=split)[:10]:
            pats[p.id] = "." + "".join("1" if rng.random() < 0.5 else "0" for _ in range(15))
    src = tmp_path / "p.json"
    src.write_text(json.dumps({"max_new_tokens": 16, "patterns": pats}))
    assert mod.main(["--patterns", str(src), "--transfer"]) == 0
    text = capsys.readouterr().out.split("transfer:")[1]
    cases = [line for line in text.splitlines() if line.startswith("  other later sets")]
    assert [c.split("->")[1].split()[0] for c in cases] == ["fresh", "fresh2", "fresh3"]
    assert all("(20 fitting prompts, 10 predicted" in c for c in cases)
    for cand in [c[0] for c in CANDIDATES] + [mod.RESAMPLED]:
        rows = [line for line in text.splitlines() if line.strip().startswith(cand + " ")]
        assert len(rows) == 4, cand                  # three cases and the summary
    assert "demo pool" not in text                   # its held-out split has no patterns here


def test_machine_speed_compares_the_timings_both_files_hold(tmp_path, capsys):
    """`scripts/machine_speed.py`: the ratio new / reference of each median both files hold
    (the machine block and timings only one holds are ignored), their median; unreadable or
    disjoint files are one-line errors (exit 2)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / "machine_speed.py"
    spec = importlib.util.spec_from_file_location("machine_speed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ref = {"machine": {"date": "d1", "x": {"median_ms": 1.0}},
           "gemm": {"a": {"median_ms": 10.0}, "b": {"median_ms": 20.0},
                    "only_ref": {"median_ms": 5.0}}}
    new = {"machine": {"date": "d2"},
           "gemm": {"a": {"median_ms": 15.0}, "b": {"median_ms": 40.0},
                    "only_new": {"median_ms": 1.0}}}
    (tmp_path / "r.json").write_text(json.dumps(ref))
    (tmp_path / "n.json").write_text(json.dumps(new))
    assert mod.ratios(ref, new) == [("gemm/a", 10.0, 15.0), ("gemm/b", 20.0, 40.0)]
    assert mod.main([str(tmp_path / "r.json"), str(tmp_path / "n.json")]) == 0
    out = capsys.readouterr().out
    assert "x1.50" in out and "x2.00" in out and "median x1.75" in out and "2 timings" in out
    (tmp_path / "e.json").write_text(json.dumps({"other": 1}))
    assert mod.main([str(tmp_path / "r.json"), str(tmp_path / "e.json")]) == 2
    assert mod.main([str(tmp_path / "r.json"), str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no timing in common" in err[0] and "missing.json" in err[1]


def test_prompt_agreement_report_finds_a_covariate_that_explains_the_sets(tmp_path, capsys):
    """Hand-built: each later set's prompts accept with a probability equal to their feature
    and the sets' features differ, so the within-style correlation is high and the feature
    term removes most of the style-mix transfer error; a feature that is noise does not."""
    from psdlab.runtime.prompts import load_prompts
    mod = _script("prompt_agreement")
    rng = np.random.default_rng(1)
    pats, feats = {}, {}
    for split, centre in (("fresh", 0.25), ("fresh2", 0.5), ("fresh3", 0.75)):
        counts: dict[str, int] = {}
        for p in load_prompts(split=split):
            counts[p.style] = counts.get(p.style, 0) + 1
            if counts[p.style] > 12:
                continue
            x = float(np.clip(centre + rng.normal(0, 0.1), 0.05, 0.95))
            pats[p.id] = "." + "".join("1" if rng.random() < x else "0" for _ in range(15))
            feats[p.id] = {"agree": x, "overlap": float(rng.random())}
    src, ff = tmp_path / "p.json", tmp_path / "f.json"
    src.write_text(json.dumps({"patterns": pats}))
    ff.write_text(json.dumps({"features": feats}))
    out = tmp_path / "rep"
    assert mod.main([str(src), "--features", str(ff), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert (tmp_path / "rep.txt").read_text() == text
    corr = {line.split()[0]: [float(x) for x in line.split()[1:]]
            for line in text.split("(later sets pooled):")[1].split("per set")[0].splitlines()
            if line.strip().startswith(("agree", "overlap"))}
    assert min(corr["agree"]) > 0.5 and max(abs(c) for c in corr["overlap"]) < 0.4
    mean = [line for line in text.splitlines() if line.strip().startswith("mean |e|")][0]
    style_mix, agree, overlap = (float(x.rstrip("%")) for x in mean.split()[2:])
    assert agree < 0.5 * style_mix and overlap > 0.5 * style_mix
    assert mod.main([str(tmp_path / "missing.json"), "--features", str(ff)]) == 2
    assert "missing.json" in capsys.readouterr().err
