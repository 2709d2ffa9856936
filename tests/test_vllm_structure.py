"""runtime.vllm_ext.structure: the PSD structure of a vLLM run, read from the scheduler's event
log (no vLLM needed).  Each broken rule is caught; a correct log passes."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.runtime.vllm_ext.structure import psd_structure


def _good_log(n_overlapped: int, tail: int = 0) -> list[tuple[str, int, int]]:
    """What PSDScheduler writes: step 1 prefills (no drafting), then overlapped steps that
    alternate halves, then ``tail`` sequential steps on half 0."""
    ev = [("scheduled", 1, 0), ("output", 1, 0)]
    v = 0
    for n in range(2, 2 + n_overlapped):
        d = 1 - v
        ev += [("submit", n, d), ("scheduled", n, v), ("output", n, v)]
        ev += [("collect", n, d)]
        v = d
    for n in range(2 + n_overlapped, 2 + n_overlapped + tail):
        ev += [("submit", n, 0), ("collect", n, 0), ("scheduled", n, 0), ("output", n, 0)]
    return ev


@given(st.integers(0, 30), st.integers(0, 5))
def test_the_schedulers_own_order_passes(n, tail):
    s = psd_structure(_good_log(n, tail))
    assert s.ok, s.problems
    assert (s.steps, s.overlapped, s.sequential) == (1 + n + tail, n, tail)
    assert s.alternations == max(n - 1, 0)


def _swap(ev, a, b):
    ev = list(ev)
    i, j = ev.index(a), ev.index(b)
    ev[i], ev[j] = ev[j], ev[i]
    return ev


def test_drafting_dispatched_after_scheduling_is_caught():
    ev = _swap(_good_log(4), ("submit", 3, 0), ("scheduled", 3, 1))
    assert any("dispatched after" in p for p in psd_structure(ev).problems)


def test_drafts_collected_before_the_verification_returned_are_caught():
    ev = _swap(_good_log(4), ("output", 3, 1), ("collect", 3, 0))
    assert any("collected before" in p for p in psd_structure(ev).problems)


def test_halves_that_do_not_alternate_are_caught():
    ev = [e if e[1] != 3 else (e[0], 3, {"submit": 1, "collect": 1}.get(e[0], 0))
          for e in _good_log(4)]
    probs = psd_structure(ev).problems
    assert any("not the half" in p for p in probs)


def test_drafting_never_collected_is_caught():
    ev = [e for e in _good_log(3) if e != ("collect", 2, 1)]
    assert any("never collected" in p for p in psd_structure(ev).problems)


def test_sequential_step_collected_after_scheduling_is_caught():
    ev = _swap(_good_log(2, tail=2), ("collect", 4, 0), ("scheduled", 4, 0))
    assert any("sequential" in p for p in psd_structure(ev).problems)


@settings(max_examples=60)
@given(st.integers(2, 12), st.data())
def test_any_single_swap_of_a_steps_events_is_caught(n, data):
    """Swapping two events of one overlapped step breaks its order (or makes the output
    precede the scheduling): always a problem."""
    ev = _good_log(n)
    step = data.draw(st.integers(2, n + 1))
    mine = [e for e in ev if e[1] == step]
    a, b = data.draw(st.sampled_from([(x, y) for i, x in enumerate(mine)
                                      for y in mine[i + 1:]]))
    assert not psd_structure(_swap(ev, a, b)).ok
