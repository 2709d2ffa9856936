"""The acceptance model that transfers to unseen prompts: the simulator's ``fitted`` model
(sim/acceptance_fitted.py), its maximum-likelihood fit and cross-validated choice
(validation/acceptance/transfer.py), the demo's disjoint prompt sides
(validation/demo/measurement_plan.py)
and the results file's comparisons (validation/results_file.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.trace import RequestRecord, RunInfo, StepRecord, Trace, Verified
from psdlab.sim.acceptance_registry import make_acceptance
from psdlab.sim.acceptance_fitted import style_of
from psdlab.sim.trajectories import sample_trajectories
from psdlab.validation.acceptance import transfer as at

TRUE = {"name": "fitted", "styles": {"chat": 2.0, "code": 0.0, "math": 1.0}, "default": 1.0,
        "draft": [0.0, 0.5, 0.8, 1.0], "output": 0.0, "sigma": 0.7, "ref_position": 10}


def fake_trace(spec: dict, keys: list[str], k: int, length: int = 60, seed: int = 0,
               temperature: float = 1.0) -> Trace:
    """A trace whose accepted counts the ``fitted`` model drew (one step per round, every
    unfinished request verified once): independent draws, so a sampled trace (a greedy one,
    ``temperature=0``, would see one fact at each position however often it is served)."""
    acc = make_acceptance(spec)
    rng = np.random.default_rng(seed)
    params = acc.request_params(rng, len(keys), keys=keys)
    n = len(keys)
    tr = sample_trajectories(rng, acc, params, np.full(n, k), np.full(n, 10),
                             np.full(n, length))
    steps, t = [], 0.0
    for j in range(int(tr.nsteps.max())):
        rows = []
        for i, key in enumerate(keys):
            if j < tr.nsteps[i]:
                f = tr.off[i] + j
                rows.append(Verified(key, k, int(tr.acc[f]), int(tr.emit[f])))
        steps.append(StepRecord(j, t, t + 0.1, (), tuple(rows)))
        t += 0.1
    reqs = [RequestRecord(key, 0.0, 0.0, 0.05, t, 10, length) for key in keys]
    return Trace(RunInfo(mode="sd-sep", k=k, m=n, source="runtime",
                         extra={"temperature": temperature}), steps, reqs)


KEYS = [f"{s}-{i}" for s in ("chat", "code", "math") for i in range(4)]


@pytest.fixture(scope="module")
def data():
    return [fake_trace(TRUE, KEYS, k, seed=k) for k in (2, 4)]


def test_style_is_the_key_up_to_the_first_dash():
    assert style_of("chat-14") == "chat" and style_of("code-3~2") == "code"
    acc = make_acceptance(TRUE)
    assert acc.base("chat-1") == 2.0 and acc.base("poem-1") == 1.0      # unknown: default


@given(st.floats(-4, 4), st.floats(0, 2), st.integers(1, 6), st.integers(1, 40),
       st.floats(-1, 1))
@settings(max_examples=25, deadline=None)
def test_expected_accepted_matches_sampling(base, sigma, k, pos, growth):
    spec = dict(TRUE, default=base, sigma=sigma, styles={}, spread_growth=growth)
    acc = make_acceptance(spec)
    rng = np.random.default_rng(1)
    params = acc.request_params(rng, 20000)
    got = acc.sample_at(rng, params, k, np.full(20000, pos))
    assert got.min() >= 0 and got.max() <= k
    assert got.mean() == pytest.approx(acc.expected_accepted(k, position=pos), abs=0.06)


def test_a_higher_level_accepts_more():
    acc = make_acceptance(TRUE)
    assert (acc.expected_accepted(4, base=2.0) > acc.expected_accepted(4, base=1.0)
            > acc.expected_accepted(4, base=0.0))


def test_bad_specs_name_the_field():
    with pytest.raises(ValueError, match="acceptance.draft"):
        make_acceptance({"name": "fitted", "default": 0.0, "draft": []})
    with pytest.raises(ValueError, match="acceptance.colour"):
        make_acceptance({"name": "fitted", "default": 0.0, "draft": [0.0], "colour": 1})
    with pytest.raises(ValueError, match="acceptance.sigma"):
        make_acceptance({"name": "fitted", "default": 0.0, "draft": [0.0], "sigma": -1})


def test_trials_follow_the_output_positions(data):
    tr = at.trials(data[:1])
    rp, rk, rn, ra = tr.rows
    assert tr.y.sum() == ra.sum()                          # every accepted token is a trial
    assert set(tr.prompt) == set(KEYS)
    first = [n for p, n in zip(rp, rn) if p == "chat-0"]
    assert first[0] == 1 and all(b > a for a, b in zip(first, first[1:]))


def test_fit_recovers_style_order_spread_and_positions(data):
    cand = next(c for c in at.CANDIDATES if c[0] == "positional+style+request")
    spec = at.fit(cand, at.trials(data)).spec()
    s = spec["styles"]
    assert s["chat"] > s["math"] > s["code"]
    assert s["chat"] - s["code"] == pytest.approx(2.0, abs=0.8)
    assert 0.2 < spec["sigma"] < 1.5
    assert spec["draft"][0] == 0.0 and spec["draft"][3] > 0.3


def test_prompt_sides_are_disjoint_and_cover_every_style():
    from psdlab.runtime.prompts import load_prompts
    from psdlab.validation.demo.prompt_sides import prompt_sides
    prompts = load_prompts(split="heldout")
    sides = prompt_sides([(p.id, p.style) for p in prompts])
    cal, held = set(sides["calibration"]), set(sides["heldout"])
    assert not cal & held and len(cal | held) == len(prompts)
    assert abs(len(cal) - len(held)) <= 1
    for style in {p.style for p in prompts}:
        of = {i for i, p in enumerate(prompts) if p.style == style}
        assert of & cal and of & held, style


def test_demo_sides_are_split_fresh3_and_the_new_split_fresh11():
    """The demo's calibration side is split ``fresh3`` and its held-out side split
    ``fresh11``, never a split an earlier demo held out (half of ``heldout``, ``fresh``,
    ``fresh2``, ``fresh4`` to ``fresh10``); the two sides share no prompt id or text
    and every style has at least 20 prompts on each; each side's first 5 prompts are one of
    each style.  The acceptance pool holds the calibration side, split ``fresh`` and of
    ``fresh2``, ``fresh4``, ``fresh5`` and ``fresh6`` every third prompt of each style (the
    first included); never a held-out prompt, and never one of splits ``train`` and
    ``heldout`` (the drafter's writer), nor of ``fresh7`` to ``fresh11``."""
    from psdlab.runtime.prompts import load_prompts
    from psdlab.validation.demo.prompt_sides import pool_list, side_list
    cal, held = side_list("calibration"), side_list("heldout")
    ids = {s: {p.id for p in load_prompts(split=s)}
           for s in ("train", "heldout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5",
                     "fresh6", "fresh7", "fresh8", "fresh9", "fresh10", "fresh11")}
    assert {p.id for p in cal} == ids["fresh3"] and {p.id for p in held} == ids["fresh11"]
    pool = {p.id for p in pool_list()}
    assert ids["fresh3"] <= pool and ids["fresh"] <= pool
    for split in ("fresh2", "fresh4", "fresh5", "fresh6"):
        thirds = {i for i in ids[split] if int(i.rsplit("-", 1)[1][1:]) % 3 == 1}
        assert pool & ids[split] == thirds and len(thirds) == 80, split
    assert not pool & (ids["train"] | ids["heldout"] | ids["fresh7"] | ids["fresh8"]
                       | ids["fresh9"] | ids["fresh10"] | ids["fresh11"])
    assert not {p.text for p in pool_list()} & {p.text for p in held}
    assert not {p.id for p in cal} & {p.id for p in held}
    assert not {p.text for p in cal} & {p.text for p in held}
    for side in (cal, held):
        styles = [p.style for p in side]
        assert all(styles.count(s) >= 20 for s in set(styles)) and len(set(styles)) == 5
        assert len(set(styles[:5])) == 5


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=40), st.integers(1, 40))
def test_every_prefix_of_a_side_mixes_the_styles_evenly(styles, n):
    """A run of n requests serves a side's first n prompts: per style, their counts differ by
    at most one among the styles the side still has prompts of."""
    from collections import Counter

    from psdlab.validation.demo.prompt_sides import prompt_sides
    items = [(f"p{i:02d}", s) for i, s in enumerate(styles)]
    for members in prompt_sides(items).values():
        assert len(set(members)) == len(members)
        total = Counter(items[i][1] for i in members)
        head = Counter(items[i][1] for i in members[:n])
        open_styles = [s for s in total if head[s] < total[s]]
        if open_styles:          # styles not yet exhausted are never behind by more than one
            assert max(head.values()) - min(head[s] for s in open_styles) <= 1


def test_demo_requests_cycle_one_side_with_distinct_ids():
    from psdlab.validation.demo.prompt_sides import demo_requests
    ids = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]
    cal = demo_requests(None, 5, ids, "calibration")
    held = demo_requests(None, 5, ids, "heldout")
    assert len({r for r, _ in cal}) == 5 and len({r for r, _ in held}) == 5
    assert not {p for _, p in cal} & {p for _, p in held}          # disjoint prompts
    assert {at.prompt_of(r) for r, _ in cal} == {"test-0", "test-2", "test-4"}
    with pytest.raises(ValueError, match="side"):
        demo_requests(None, 2, ids, "train")


def test_headline_comparisons_say_what_they_compare():
    from psdlab.validation.results_file import headline_comparisons, in_flight
    rows = [{"config": c, "mode": mo, "k": k, "m": m, "in_flight": in_flight(mo, m),
             "measured_tok_s": tp, "predicted_tok_s": tp}
            for c, mo, k, m, tp in (("ar", "ar", 0, 4, 40.0), ("sd", "sd-sep", 3, 4, 30.0),
                                     ("psd", "psd", 3, 4, 45.0), ("psd2", "psd", 3, 2, 42.0))]
    got = {(c["psd"], c["other"]): c for c in headline_comparisons(rows)}
    assert got[("psd", "sd")]["basis"] == "iso-batch"
    assert got[("psd", "sd")]["measured_gain"] == pytest.approx(0.5)
    assert got[("psd2", "sd")]["basis"] == "iso-concurrency"
    assert got[("psd2", "ar")]["basis"] == "iso-concurrency"
    assert ("psd", "ar") not in got                      # 8 in flight against 4: neither


def test_machine_info_and_git_info_have_their_fields():
    from psdlab.validation.results_file import git_info, machine_info
    info = machine_info([0.5, 0.4, 0.3])
    assert info["load_before"] == [0.5, 0.4, 0.3] and info["cpus"] >= 1
    assert set(info["cpu_flags"]) <= set(__import__(
        "psdlab.validation.results_file", fromlist=["FLAGS"]).FLAGS)
    g = git_info()
    assert g["tree"] in (None, "clean", "uncommitted changes on top of HEAD")


def test_each_repeat_serves_the_next_window_and_pairs_share_theirs():
    """The default plan's runs of a side tile its prompt list: SD and PSD of one repeat serve
    the same prompts, the repeats of a workload different ones, and together the held-out
    runs serve every held-out prompt."""
    from psdlab.validation.demo.prompt_sides import prompt_windows, window
    from psdlab.validation.demo.measurement_plan import default_plan
    plan = default_plan()
    sizes = {"calibration": 39, "heldout": 39}
    starts = prompt_windows(plan.runs, sizes, plan.num_prompts)
    by_key = {}
    for r in plan.runs:
        by_key.setdefault((r.prompts, r.workload, r.rep), set()).add(starts[r.name])
    assert all(len(v) == 1 for v in by_key.values())              # pairs share a window
    reps = {}
    for (side, wl, _rep), (o,) in by_key.items():
        reps.setdefault((side, wl), []).append(o)
    assert any(len(set(v)) > 1 for v in reps.values())            # repeats move on
    items = [(f"p{i}", (i,)) for i in range(39)]
    served = {rid for r in plan.runs if r.prompts == "heldout"
              for rid, _ in window(items, starts[r.name], plan.num_prompts)}
    assert {rid.split("~")[0] for rid in served} == {f"p{i}" for i in range(39)}
    # the calibration runs of one repeat serve one window, whatever their k; the repeats
    # serve different ones
    cal = {}
    for r in plan.runs:
        if r.role == "calibrate":
            cal.setdefault(r.rep, set()).add(starts[r.name])
    assert all(len(v) == 1 for v in cal.values()) and len(cal) > 1
    assert len({next(iter(v)) for v in cal.values()}) == len(cal)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 50), st.integers(1, 20), st.integers(0, 200))
def test_a_window_is_the_list_rotated_and_cycled(size, n, offset):
    from psdlab.validation.demo.prompt_sides import window
    items = [(f"p{i}", (i,)) for i in range(size)]
    got = window(items, offset, n)
    assert len(got) == n and len({rid for rid, _ in got}) == n
    assert [ids[0] for _, ids in got] == [(offset + j) % size for j in range(n)]


def test_repeats_on_other_prompts_group_only_when_the_demo_names_them():
    """The demo's repeats serve different prompt windows (other prompt lengths): grouped
    under their config when ``groups`` names them and their shape agrees; a run of another
    shape (other output lengths) or one the caller does not name stays apart."""
    from dataclasses import replace as dc_replace

    from psdlab.validation.validate import group_repeats
    base = fake_trace(TRUE, KEYS, 3, seed=1)
    other_prompts = dc_replace(base, requests=[dc_replace(r, prompt_len=r.prompt_len + 7)
                                               for r in base.requests])
    longer = dc_replace(base, requests=[dc_replace(r, output_len=r.output_len + 1)
                                        for r in base.requests])
    runs = [("x_r1", base), ("x_r2", other_prompts), ("x_r3", longer)]
    named = group_repeats(runs, {"x_r1": "x", "x_r2": "x", "x_r3": "x"})
    assert [(c, len(t)) for c, t in named] == [("x", 2), ("x_r3", 1)]
    unnamed = group_repeats(runs[:2])
    assert [len(t) for _, t in unnamed] == [1, 1]      # the full workload key tells them apart


def _greedy_traces(sigma: float, prompts: int, length: int, seed: int) -> list[Trace]:
    """Real greedy behaviour: each prompt has one match pattern (position n matches with
    probability sigmoid(0.4 + u), u ~ N(0, sigma^2) per prompt), walked at k = 2 and 4, each
    by an SD and a PSD run that see exactly the same verifications."""
    rng = np.random.default_rng(seed)
    keys = [f"chat-{i}" for i in range(prompts)]
    pats = {key: rng.random(length + 8) < 1 / (1 + np.exp(-(0.4 + sigma * rng.standard_normal())))
            for key in keys}
    text = {key: "".join("1" if m else "0" for m in pat) for key, pat in pats.items()}
    from greedy_util import greedy_trace
    return [greedy_trace(text, k, length, cap_at_end=False, mode=mode)
            for k in (2, 4) for mode in ("sd-sep", "psd")]


def test_greedy_re_observations_count_once_and_the_spread_is_not_inflated():
    """A greedy prompt's outcome at a position is one fact: the SD and PSD runs of a window
    and the runs at another k see it again.  Counted once, the spread between prompts is
    recovered; counted as independent draws (the traces marked as sampled), the binomial
    noise the duplicates hide is not subtracted and the spread comes out too wide."""
    traces = _greedy_traces(0.3, 300, 24, seed=1)
    cand = next(c for c in at.CANDIDATES if c[0] == "positional+request")
    once = at.trials(traces)
    assert once.w.sum() == pytest.approx(at.trials(traces[:1] + traces[2:3]).w.sum(), rel=0.01)
    assert np.all(once.w <= 1.0)
    assert once.y.size <= at.trials(traces[:1]).y.size + at.trials(traces[2:3]).y.size
    fitted = at.fit(cand, once)
    assert fitted.sigma == pytest.approx(0.3, abs=0.1)
    as_draws = [Trace(replace(t.run, extra={"temperature": 1.0}), t.steps, t.requests)
                for t in traces]
    assert at.trials(as_draws).w.sum() == at.trials(as_draws).y.size   # sampled: all count
    assert at.fit(cand, at.trials(as_draws)).sigma > fitted.sigma + 0.12
    # the same greedy run served twice changes nothing
    twice = at.fit(cand, at.trials(traces + traces))
    assert twice.sigma == pytest.approx(fitted.sigma, rel=1e-6)
    assert twice.beta == pytest.approx(fitted.beta, rel=1e-6)


@given(st.integers(1, 300), st.integers(0, 2 ** 31 - 1))
@settings(max_examples=40, deadline=None)
def test_request_levels_are_latin_hypercube_normal(n, seed):
    """``stratified_normal``: one draw in each of n equal-probability strata of N(0, 1), in a
    seeded random order; ``request_params`` scales them by sigma (so a run's levels cover the
    distribution evenly whatever the seed)."""
    from scipy.special import ndtr
    from psdlab.sim.acceptance_fitted import make_fitted, stratified_normal
    z = stratified_normal(np.random.default_rng(seed), n)
    assert z.shape == (n,) and np.isfinite(z).all()
    strata = np.floor(ndtr(np.sort(z)) * n).astype(int)
    assert np.array_equal(np.clip(strata, 0, n - 1), np.arange(n))
    assert np.array_equal(z, stratified_normal(np.random.default_rng(seed), n))
    model = make_fitted(dict(TRUE, sigma=0.7), "t")
    u = model.request_params(np.random.default_rng(seed), n)[:, 1]
    assert np.allclose(u, 0.7 * stratified_normal(np.random.default_rng(seed), n))
    assert stratified_normal(np.random.default_rng(seed), 0).size == 0
