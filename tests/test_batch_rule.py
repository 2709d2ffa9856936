"""One PSD batch rule (``analysis.batch_rule``): its tie-breaks; the runtime's BatchManager, the
simulator's BatchManager (policy ``rebalance``) and the vLLM halves pick the batches the rule
picks on random event sequences; and every simulator path (SimPy step by step, the fast path's
sweep, its lanes iteration, its step-group planner) puts every request in the same batch at
every step on random workloads."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdlab.analysis import batch_rule as rule
from psdlab.runtime.batch_manager import BatchManager as RuntimeBM
from psdlab.runtime.vllm_ext.halves import Halves
from psdlab.sim import lanes
from psdlab.sim.batch_assignment import BatchAssignment as SimBM
from psdlab.sim.simulation import simulate
from sim_helpers import make_config

# ----------------------------------------------------------------------------- the rule itself


def test_join_takes_the_smaller_batch_ties_to_the_draft_batch():
    assert rule.join([2, 1], 0, 4) == 1 and rule.join([1, 2], 1, 4) == 0
    assert rule.join([2, 2], 1, 4) == 1 and rule.join([2, 2], 0, 4) == 0
    assert rule.join([2, 2], None, 4) == 0
    assert rule.join([4, 3], 0, 4) == 1          # the draft batch is full: the other one
    assert rule.join([4, 4], 1, 4) is None        # both full: wait


def test_rebalance_moves_the_latest_admitted_preferring_no_drafts():
    rank = {"a": 0, "b": 3, "c": 1, "d": 2, "e": 4}
    batches = (["a", "b", "c", "d"], ["e"])
    assert rule.rebalance(batches, rank, lambda r: False) == [("b", 0, 1)]
    batches = (["a", "b", "c", "d"], ["e"])
    assert rule.rebalance(batches, rank, lambda r: r in ("b", "d")) == [("c", 0, 1)]
    assert batches == (["a", "b", "d"], ["e", "c"])
    batches = ([], ["a", "b", "c", "d"])
    moves = rule.rebalance(batches, rank, lambda r: True)   # all hold drafts: latest of all
    assert moves == [("b", 1, 0), ("d", 1, 0)]


def test_victim_is_the_latest_of_the_larger_batch_ties_to_the_draft_batch():
    rank = np.array([0, 5, 2, 3, 4])
    assert rule.victim([[0, 2, 3], [1, 4]], rank, 1) == (3, 0)
    assert rule.victim([[0, 2], [1, 4]], rank, 1) == (1, 1)
    assert rule.victim([[0, 2], [1, 4]], rank, 0) == (2, 0)
    assert rule.victim([[0], []], rank, 1) == (0, 0)     # the larger one, whatever the tie


def test_a_request_moved_earlier_is_not_taken_for_the_latest():
    """a moved into batch 1 after d joined it: when batch 1 must give one back, d (admitted
    later) moves, not a (which joined batch 1 last) -- in the runtime, the halves and the sim."""
    rt = RuntimeBM(4)
    for s in "abcde":
        rt.assign(s)                                  # 0: a c e, 1: b d
    rt.remove("b")
    assert rt.rebalance(prefer=["a"]) == [("a", 0, 1)]  # c, e hold drafts
    assert rt.members(1) == ["d", "a"]
    rt.remove("c"), rt.remove("e")
    assert rt.rebalance() == [("d", 1, 0)]

    halves = Halves(4)
    halves.begin_step(list("abcde"))
    big = 0 if halves.sizes()[0] == 3 else 1
    three, two = halves.members(big), halves.members(1 - big)     # a c e | b d
    plan = halves.begin_step(three + two[1:], has_drafts=set(three[1:]))
    assert [m[0] for m in plan.moved] == [three[0]]
    assert halves.members(1 - big) == [two[1], three[0]]
    plan = halves.begin_step([three[0], two[1]])
    assert [m[0] for m in plan.moved] == [two[1]]

    sim = SimBM(2, 4, "rebalance")
    sim.batches = [[0, 2, 4], [3]]
    seq = np.arange(5)
    assert sim.rebalance(np.array([False, False, True, False, True]), seq) == [0]
    sim.batches[0] = []
    assert sim.rebalance(np.zeros(5, bool), seq) == [3]


# ----------------------------------------------------------------------------- (a) the copies

class Reference:
    """The rule driven by the test: two lists, admission ranks, nothing else."""

    def __init__(self, cap: int):
        self.cap, self.batches, self.rank, self.n = cap, ([], []), {}, 0

    def sizes(self):
        return [len(b) for b in self.batches]

    def admit(self, r, draft):
        b = rule.join(self.sizes(), draft, self.cap)
        if b is not None:
            self.batches[b].append(r)
            self.rank[r] = self.n
            self.n += 1
        return b

    def remove(self, r):
        for b in self.batches:
            if r in b:
                b.remove(r)

    def members(self):
        return [sorted(b) for b in self.batches]


#: (kind, batch, how many, which requests hold drafts (bit r % 6), flag)
events = st.lists(st.tuples(st.sampled_from(["arrive", "arrive", "finish", "preempt", "step"]),
                            st.integers(0, 1), st.integers(1, 3), st.integers(0, 63),
                            st.booleans()), min_size=4, max_size=60)


@settings(deadline=None, max_examples=300)
@given(cap=st.integers(1, 6), evs=events)
def test_runtime_and_sim_batch_managers_follow_the_rule(cap, evs):
    """Arrivals (join), finishes, preemptions (victim, then the request comes back with a new
    rank), step boundaries (rebalance with random drafts held; the draft batch flips)."""
    ref, rt, sim = Reference(cap), RuntimeBM(cap), SimBM(2, cap, "rebalance")
    admit_seq = np.full(400, -1, np.int64)
    ready = np.zeros(400, bool)
    draft, nxt, preempted = 0, 0, []
    for kind, side, n, mask, flag in evs:
        sim.next_draft = draft
        if kind == "arrive":                        # 1-3 arrive (or come back)
            for _ in range(n):
                r = preempted[0] if preempted and flag else nxt
                b = ref.admit(r, draft)
                assert sim.choose() == b
                assert rt.has_room() == (b is not None)
                if b is None:
                    break
                if r == nxt:
                    nxt += 1
                else:
                    preempted.pop(0)
                assert rt.assign(r, draft_batch=draft) == b
                sim.add(r, b)
                admit_seq[r] = ref.rank[r]
        elif kind == "finish" and len(rt):
            members = ref.batches[side] or ref.batches[1 - side]     # 1-3 in one batch
            for r in (members[:n] if flag else members[-n:]):
                ref.remove(r), rt.remove(r), sim.remove(r, sim.batch_of(r))
                del ref.rank[r]
        elif kind == "preempt" and len(rt):
            r, b = rule.victim(ref.batches, ref.rank, draft)
            assert sim.victim(admit_seq) == (r, b)
            assert rt.victim(draft) == (r, b)
            ref.remove(r), rt.remove(r), sim.remove(r, b)
            del ref.rank[r]
            preempted.append(r)
        elif kind == "step":
            held = {r for r in ref.rank if (mask >> (r % 6)) & 1}
            ready[:] = False
            ready[list(held)] = True
            want = rule.rebalance(ref.batches, ref.rank, held.__contains__)
            prefer = [r for r in ref.rank if r not in held]
            got = (rt.rebalance(prefer=prefer) if flag else      # its own ranks, or the loop's
                   rt.rebalance(prefer=prefer, admitted=dict(ref.rank)))
            assert got == want
            assert sim.rebalance(ready, admit_seq) == [m[0] for m in want]
            draft = 1 - draft
        assert [sorted(rt.members(b)) for b in (0, 1)] == ref.members()
        assert [sorted(b) for b in sim.batches] == ref.members()


@settings(deadline=None, max_examples=300)
@given(cap=st.integers(1, 6), evs=events)
def test_vllm_halves_follow_the_rule(cap, evs):
    """vLLM's running list changes (arrivals, finishes, preemptions with resumption); each step
    the halves take in new ids (ties: the half drafted next), rebalance, and admit during the
    step (ties: the verify half) as the rule says."""
    halves, ref = Halves(cap), Reference(cap)
    running: list[str] = []
    nxt, resumable = 0, []
    for kind, side, n, mask, flag in evs:
        if kind == "arrive":                        # 1-3 arrive (or resume)
            for _ in range(min(n, 2 * cap - len(running))):
                if resumable and flag:
                    rid = resumable.pop(0)
                else:
                    rid, nxt = f"r{nxt}", nxt + 1
                running.append(rid)
        elif kind == "finish" and running:         # 1-3 finish in one half
            members = halves.members(side) or halves.members(1 - side) or running
            for rid in (members[:n] if flag else members[-n:]):
                if rid in running:
                    running.remove(rid)
        elif kind == "preempt" and running:
            resumable.append(running.pop(-n % len(running)))
        elif kind == "step":
            has = {r for r in running if (mask >> (int(r[1:]) % 6)) & 1}
            draft = 1 - halves.next_verify
            for r in [r for r in ref.rank if r not in running]:
                ref.remove(r)
                del ref.rank[r]
            for r in running:
                if r not in ref.rank:
                    assert ref.admit(r, draft) is not None
            want = rule.rebalance(ref.batches, ref.rank, has.__contains__)
            plan = halves.begin_step(running, has_drafts=has)
            assert list(plan.moved) == want
            assert [sorted(halves.members(h)) for h in (0, 1)] == ref.members()
            if flag and len(running) < 2 * cap:      # vLLM admits one during the step
                rid = f"r{nxt}"
                nxt += 1
                running.append(rid)
                halves.admit([rid], plan)
                assert halves.half_of(rid) == ref.admit(rid, plan.verify)
            assert [sorted(halves.members(h)) for h in (0, 1)] == ref.members()


# ----------------------------------------------------------------------------- (b) sim paths

def _force(monkeypatch, path: str) -> str:
    """Pick one of the simulator's execution paths; returns simulate()'s ``path``."""
    if path == "lanes":         # the fixed-point lanes layout instead of the one-pass sweep
        monkeypatch.setattr(lanes, "sweepable", lambda c: False)
    elif path == "groups":      # multi-step plans from the core planner only (no lanes plans)
        monkeypatch.setattr(lanes, "eligible", lambda c: False)
    return "simpy" if path == "simpy" else "fast"


def _batches(res) -> tuple[list, list]:
    """Per step: verified batch, drafted batch, the verified requests, the phases' sizes;
    per request: its (last) batch."""
    steps = [(s.index, s.verify_batch, s.draft_batch, sorted(v.req for v in s.verified),
              [(p.kind, p.seqs) for p in s.phases]) for s in res.trace.steps]
    reqs = sorted((r.id, r.batch, r.preemptions) for r in res.trace.requests)
    return steps, reqs


@st.composite
def workloads(draw):
    """Arrival gaps (bursts and pauses), prompt and output lengths, k, m; mostly the rebalance
    policy without a KV limit (where the fast path lays out whole stretches), sometimes the
    paper's policy, a KV limit (preemptions) or per-request k (the lanes iteration)."""
    n = draw(st.integers(4, 40))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.002, 0.01, 0.03, 0.08, 0.3]),
                         min_size=n, max_size=n))
    out = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 48), min_size=n, max_size=n))
    k = draw(st.integers(1, 5))
    m = draw(st.integers(1, 6))
    need = -(-(48 + 60 + k + 1) // 8)               # the largest request fits alone
    kv = draw(st.sampled_from([0] * 6 + [need, 2 * need]))
    k_choices = draw(st.sampled_from([()] * 4 + [(1, 4)]))
    policy = draw(st.sampled_from(["rebalance"] * 4 + ["paper"]))
    return np.cumsum(gaps).tolist(), out, prompt, dict(
        mode="psd", k=k, m=m, requests=n, policy=policy, kv_blocks=kv, block_size=8,
        k_choices=k_choices, alpha=draw(st.floats(0.0, 0.95)), seed=draw(st.integers(0, 99)))


@pytest.mark.e2e
@settings(deadline=None, max_examples=int(os.environ.get("BATCH_RULE_EXAMPLES", 80)),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(wl=workloads())
def test_every_simulator_path_picks_the_same_batches(monkeypatch, wl):
    """The SimPy path takes every decision through ``sim.batch_assignment`` (the rule, by the tests
    above); the fast paths decide admissions themselves (``join`` per admission, stopping a
    stretch where the rule leaves their steady regime) and must agree step by step."""
    arrival, out, prompt, kw = wl
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.csv")
        with open(path, "w") as fh:
            fh.write("arrival,prompt_len,output_len\n")
            fh.writelines(f"{a!r},{p},{o}\n" for a, p, o in zip(arrival, prompt, out))
        cfg = make_config(workload={"name": "replay", "path": path}, **kw)
        seen = {}
        for name in ("simpy", "fast", "lanes", "groups"):
            with monkeypatch.context() as mp:
                seen[name] = _batches(simulate(cfg, path=_force(mp, name)))
    assert seen["simpy"][0], "no steps ran"
    for name in ("fast", "lanes", "groups"):
        assert seen[name] == seen["simpy"], name


@pytest.mark.parametrize("name", ["lanes", "groups"])
def test_forced_paths_really_differ_from_the_default(monkeypatch, name):
    """The switches change which planner runs (else the test above compares a path with
    itself): the default lays stretches out by the sweep; "lanes" by the fixed-point layout,
    never the sweep; "groups" by neither, in more (shorter) intervals."""
    wl = {"name": "poisson", "rate": 120.0, "prompt": {"name": "uniform", "low": 8, "high": 64},
          "output": {"name": "uniform", "low": 5, "high": 60}}
    cfg = make_config(mode="psd", m=4, requests=60, workload=wl, policy="rebalance")
    calls = {"one_pass_plan": 0, "layout": 0}
    for fn in calls:
        def counting(*a, _real=getattr(lanes, fn), _fn=fn, **k):  # noqa: B008 (bind this fn)
            calls[_fn] += 1
            return _real(*a, **k)
        monkeypatch.setattr(lanes, fn, counting)
    base = simulate(cfg, path="fast")
    assert calls["one_pass_plan"] > 0 and calls["layout"] == 0
    calls.update(one_pass_plan=0, layout=0)
    with monkeypatch.context() as mp:
        forced = simulate(cfg, path=_force(mp, name))
    assert calls["one_pass_plan"] == 0
    assert (calls["layout"] > 0) == (name == "lanes")
    if name == "groups":
        assert forced.counters["intervals"] > base.counters["intervals"]
