"""The PSD halves of the vLLM scheduler (pure logic, runs without vLLM): balance under
arrivals, finishes, aborts and preemptions; alternation; every running request in one half."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from psdlab.runtime.vllm_ext.halves import Halves

CAP = 4   # max_num_seqs 8


def _check(plan, running: list[str], halves: Halves) -> None:
    assert sorted(plan.verify_ids + plan.draft_ids) == sorted(running)
    assert set(plan.verify_ids).isdisjoint(plan.draft_ids)
    a, b = halves.sizes()
    assert abs(a - b) <= 1
    assert max(a, b) <= CAP
    if len(running) >= 2:
        assert plan.draft is not None and plan.overlapped
    else:
        assert plan.draft is None


events = st.lists(st.tuples(st.sampled_from(["arrive", "finish", "abort", "preempt", "step"]),
                            st.integers(0, 50)), min_size=1, max_size=60)


@settings(deadline=None, max_examples=150)
@given(events)
def test_halves_stay_balanced_and_alternate(evs):
    halves = Halves(CAP)
    running: list[str] = []
    next_id = 0
    last = None
    for kind, x in evs:
        if kind == "arrive" and len(running) < 2 * CAP:
            running.append(f"r{next_id}")
            next_id += 1
        elif kind in ("finish", "abort", "preempt") and running:
            running.pop(x % len(running))
        plan = halves.begin_step(running)
        _check(plan, running, halves)
        if last is not None and last.draft is not None and plan.draft is not None:
            # the half drafted last step is verified now, unless rebalancing emptied it
            assert plan.verify == last.draft
        last = plan


def test_admitted_requests_join_the_smaller_half_ties_to_verify_half():
    halves = Halves(CAP)
    plan = halves.begin_step(["a", "b", "c"])
    small = 0 if halves.sizes()[0] < halves.sizes()[1] else 1
    halves.admit(["d"], plan)
    assert halves.half_of("d") == small
    plan = halves.begin_step(["a", "b", "c", "d"])
    halves.admit(["e"], plan)
    assert halves.half_of("e") == plan.verify


def test_finishing_a_whole_half_moves_requests_over():
    halves = Halves(CAP)
    halves.begin_step(["a", "b", "c", "d"])
    zero = halves.members(0)
    rest = [r for r in ["a", "b", "c", "d"] if r not in zero]
    plan = halves.begin_step(rest)         # every request of half 0 finished
    assert sorted(halves.sizes()) == [1, 1]
    assert plan.moved and plan.overlapped


def test_requests_with_drafts_are_not_the_ones_moved():
    halves = Halves(CAP)
    halves.begin_step(["a", "b", "c", "d", "e", "f"])
    keep = halves.members(0)
    movable = halves.members(1)
    # two of half 0 finish; half 1 holds 3, one of which has no drafts
    survivors = keep[2:] + movable
    has_drafts = set(movable[:2])
    plan = halves.begin_step(survivors, has_drafts=has_drafts)
    assert [m[0] for m in plan.moved] == [movable[2]]


def test_single_request_falls_back_to_sequential_sd():
    halves = Halves(CAP)
    plan = halves.begin_step(["a"])
    assert plan.draft is None and plan.verify_ids == ("a",)
    plan = halves.begin_step(["a"])
    assert plan.draft is None and plan.verify_ids == ("a",)


def test_capacity_is_checked():
    with pytest.raises(ValueError, match="batch"):
        Halves(0)
