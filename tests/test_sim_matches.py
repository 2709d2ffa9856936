"""The greedy ``matches`` acceptance model (sim/acceptance_matches.py), the request keys of
replay workloads, and the recovery of match patterns from traces
(validation/acceptance/match_patterns.py): a pattern seen at one k replays that k exactly and
predicts the others wherever it is known."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.trace import RequestRecord, RunInfo, StepRecord, Trace, Verified
from psdlab.sim.acceptance_registry import make_acceptance
from psdlab.sim.acceptance_matches import parse_pattern, pattern_text
from psdlab.sim.trajectories import sample_trajectories
from psdlab.sim.workloads import make_workload
from psdlab.validation.acceptance.match_patterns import match_patterns

ALWAYS = {"name": "positional", "rates": [1.0]}
NEVER = {"name": "positional", "rates": [0.0]}


def walk(g: str, k: int, length: int) -> list[tuple[int, int, int]]:
    """(proposed, accepted, emitted) of each verification of a greedy request whose match
    pattern is g (the rule the runtime follows: proposals capped at the budget)."""
    out, n = [], 1
    while n < length:
        prop = min(k, length - n - 1)
        a = 0
        while a < prop and g[n + a] == "1":
            a += 1
        emit = min(a + 1, length - n)
        out.append((prop, a, emit))
        n += emit
    return out


def greedy_trace(patterns: dict[str, str], k: int, lengths: dict[str, int]) -> Trace:
    """A runtime-like greedy trace: one step per round, every request verified once."""
    walks = {r: walk(g, k, lengths[r]) for r, g in patterns.items()}
    steps, t = [], 0.0
    for i in range(max(len(w) for w in walks.values())):
        rows = tuple(Verified(r, *w[i]) for r, w in walks.items() if i < len(w))
        steps.append(StepRecord(i, t, t + 0.1, (), rows))
        t += 0.1
    reqs = [RequestRecord(r, 0.0, 0.0, 0.05, t, 10, lengths[r]) for r in patterns]
    run = RunInfo(mode="sd-sep", k=k, m=len(patterns), source="runtime",
                  extra={"temperature": 0.0})
    return Trace(run, steps, reqs)


def model(patterns: dict[str, str], fallback=NEVER):
    return make_acceptance({"name": "matches", "requests": patterns, "fallback": fallback})


def trajectory(acc, keys, k, lengths, seed=0):
    rng = np.random.default_rng(seed)
    params = acc.request_params(rng, len(keys), keys=keys)
    out = np.asarray(lengths, dtype=np.int64)
    return sample_trajectories(rng, acc, params, np.full(len(keys), k), np.full(len(keys), 10),
                               out)


patterns_st = st.text(alphabet="01", min_size=2, max_size=40).map(lambda s: "." + s)


@settings(max_examples=60, deadline=None)
@given(g=patterns_st, k=st.integers(1, 6), pos=st.integers(1, 45))
def test_known_pattern_gives_the_run_of_matches_capped_at_k(g, k, pos):
    acc = model({"a": g}, fallback=NEVER)
    got = int(acc.sample_at(np.random.default_rng(0), np.array([0.0]), k, np.array([pos]))[0])
    run = 0
    while run < k and pos + run < len(g) and g[pos + run] == "1":
        run += 1
    assert got == run                     # past the end: unknown -> fallback NEVER stops it


def test_unknown_positions_and_requests_draw_from_the_fallback():
    rng = np.random.default_rng(0)
    yes, no = model({"a": ".1.1"}, ALWAYS), model({"a": ".1.1"}, NEVER)
    assert yes.sample_at(rng, np.array([0.0]), 4, np.array([1]))[0] == 4
    assert no.sample_at(rng, np.array([0.0]), 4, np.array([1]))[0] == 1
    params = no.request_params(rng, 2, keys=["zzz", "a"])
    assert params.tolist() == [-1.0, 0.0]
    assert yes.sample_at(rng, params, 3, np.array([1, 1])).tolist() == [3, 3]
    half = model({}, {"name": "positional", "rates": [0.5]})
    x = half.sample(rng, np.zeros(20000), 1)
    assert abs(x.mean() - 0.5) < 0.02
    assert half.expected_accepted(2) == pytest.approx(0.5 + 0.25)


@settings(max_examples=40, deadline=None)
@given(g=patterns_st, k=st.integers(1, 5), extra=st.integers(0, 5))
def test_trajectory_follows_the_pattern_position_by_position(g, k, extra):
    length = min(len(g), 2 + extra + len(g) // 2)
    tr = trajectory(model({"a": g}), ["a"], k, [length])
    n = int(tr.nsteps[0])
    got = list(zip(tr.acc[:n].tolist(), tr.emit[:n].tolist()))
    want = [(min(a, k), e) for _, a, e in walk(g, k, length)]
    assert [e for _, e in got] == [e for _, e in want]          # same steps, same tokens
    assert sum(e for _, e in got) == length - 1                 # tokens conserved
    assert all(a >= w for (a, _), (w, _) in zip(got, want))     # capped proposals accept <=


def test_pattern_errors_are_one_line_and_name_the_field():
    with pytest.raises(ValueError, match=r"acceptance.requests.r1: unexpected character 'x'"):
        make_acceptance({"name": "matches", "requests": {"r1": ".1x"}, "fallback": NEVER})
    with pytest.raises(ValueError, match=r"acceptance.fallback: missing"):
        make_acceptance({"name": "matches", "requests": {}})
    with pytest.raises(ValueError, match=r"acceptance.fallback: expected a 'positional' or"):
        make_acceptance({"name": "matches", "requests": {}, "fallback": {"name": "beta"}})
    with pytest.raises(ValueError, match=r"acceptance.seed: unknown field"):
        make_acceptance({"name": "matches", "requests": {}, "fallback": NEVER, "seed": 1})
    assert pattern_text(parse_pattern(".10.1", "x")) == ".10.1"


def test_replay_workload_reads_keys_in_arrival_order(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("arrival,prompt_len,output_len,key\n2.0,5,6,b\n0.5,7,8,a\n3.0,1,2,\n")
    reqs = make_workload({"name": "replay", "path": str(path)}).generate(None, None)
    assert reqs.keys == ("a", "b", "") and reqs.prompt_len.tolist() == [7, 5, 1]
    assert make_workload({"name": "replay", "path": str(path)}).generate(None, 2).keys == ("a",
                                                                                         "b")
    plain = tmp_path / "p.csv"
    plain.write_text("arrival,prompt_len,output_len\n0,5,6\n")
    assert make_workload({"name": "replay", "path": str(plain)}).generate(None, None).keys is None


@settings(max_examples=40, deadline=None)
@given(gs=st.lists(patterns_st, min_size=1, max_size=4), k=st.integers(1, 5))
def test_recovered_patterns_replay_their_own_k_exactly(gs, k):
    """Whatever the pattern, the positions one greedy run observes are exactly those its own
    replay needs, so a calibration at k reproduces every accepted count at that k."""
    pats = {f"r{i}": g for i, g in enumerate(gs)}
    lengths = {r: len(g) for r, g in pats.items()}
    rec = match_patterns([greedy_trace(pats, k, lengths)])
    assert rec is not None and rec.conflicts == 0
    for r, g in pats.items():                     # what is known agrees with the truth
        assert all(c == "." or c == g[j] for j, c in enumerate(rec.patterns[r]))
    keys = list(pats)
    tr = trajectory(model(rec.patterns, {"name": "positional", "rates": [0.5]}), keys, k,
                    [lengths[r] for r in keys], seed=3)
    for i, r in enumerate(keys):
        n, off = int(tr.nsteps[i]), int(tr.off[i])
        want = [(a, e) for _, a, e in walk(pats[r], k, lengths[r])]
        got = list(zip(tr.acc[off:off + n].tolist(), tr.emit[off:off + n].tolist()))
        assert [e for _, e in got] == [e for _, e in want]


def test_two_k_predict_a_third_and_disagreements_take_the_majority():
    rng = np.random.default_rng(7)
    pats = {f"r{i}": "." + "".join(rng.choice(["0", "1"], 40, p=[0.4, 0.6])) for i in range(6)}
    lengths = {r: 41 for r in pats}
    rec = match_patterns([greedy_trace(pats, 2, lengths), greedy_trace(pats, 4, lengths)])
    assert rec.coverage > 0.8
    keys = list(pats)
    tr = trajectory(model(rec.patterns, NEVER), keys, 3, [41] * 6)
    truth = [len(walk(pats[r], 3, 41)) for r in keys]
    assert sum(abs(int(a) - b) for a, b in zip(tr.nsteps, truth)) <= 2
    flipped = dict(pats, r0=pats["r0"][:1] + ("0" if pats["r0"][1] == "1" else "1")
                   + pats["r0"][2:])
    rec3 = match_patterns([greedy_trace(pats, 2, lengths), greedy_trace(pats, 2, lengths),
                           greedy_trace(flipped, 2, lengths)])
    assert rec3.conflicts >= 1 and rec3.patterns["r0"][1] == pats["r0"][1]
    sampled = greedy_trace(pats, 2, lengths)
    sampled.run.extra["temperature"] = 1.0
    assert match_patterns([sampled]) is None
