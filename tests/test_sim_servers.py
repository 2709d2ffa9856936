"""Step structure of the four servers, read back from the trace."""
import pytest

from psdlab.sim.simulation import simulate
from sim_helpers import make_config

WL = {"name": "offline", "prompt": {"name": "fixed", "value": 16},
      "output": {"name": "uniform", "low": 20, "high": 120}}


def _run(mode, **kw):
    cfg = make_config(mode=mode, k=3, m=4, requests=8 if mode == "psd" else 4, workload=WL,
                      c_t=0.03, c_d=0.004, **kw)
    return simulate(cfg).trace


def _phase(step, kind):
    found = [p for p in step.phases if p.kind == kind]
    return found[0] if found else None


def test_ar_emits_one_token_per_step_without_drafts():
    trace = _run("ar")
    for step in trace.steps:
        assert _phase(step, "draft") is None
        assert all(v.proposed == 0 and v.emitted == 1 for v in step.verified)


@pytest.mark.parametrize("mode,same_device", [("sd", True), ("sd-sep", False)])
def test_sd_drafts_then_verifies(mode, same_device):
    trace = _run(mode)
    for prev, step in zip([None] + trace.steps[:-1], trace.steps):
        if _phase(step, "prefill"):          # a prefill is written as a step of its own
            assert {p.kind for p in step.phases} == {"prefill"} and not step.verified
            continue
        if prev is not None and _phase(prev, "prefill"):
            assert step.start == prev.end and step.index == prev.index
        d, v = _phase(step, "draft"), _phase(step, "verify")
        assert d.end <= v.start and not step.overlapped
        assert (d.device == v.device) == same_device
        assert step.end == pytest.approx(step.start + (v.end - step.start))


def test_psd_start_up_overlap_and_fallback():
    trace = _run("psd")
    steps = trace.steps
    prefill, first = steps[0], steps[1]
    # start-up: the prefill of all requests, then the first draft batch drafted alone
    assert {p.kind for p in prefill.phases} == {"prefill"} and _phase(prefill, "prefill").seqs == 8
    assert first.start == prefill.end and first.index == prefill.index
    assert _phase(first, "verify") is None and _phase(first, "draft").seqs == 4
    assert not first.overlapped
    overlapped = [s for s in steps if s.overlapped]
    assert len(overlapped) > len(steps) / 2
    for s in overlapped:
        d, v = _phase(s, "draft"), _phase(s, "verify")
        assert d.device != v.device and d.start == v.start
        assert s.end == max(d.end, v.end)               # the step lasts the longer phase
        assert s.draft_batch == 1 - s.verify_batch
    for a, b in zip(overlapped, overlapped[1:]):
        if b.index == a.index + 1:
            assert b.verify_batch == a.draft_batch      # the batches swap every step
    # drain tail: once a batch is empty the other runs as SD (draft, then verify)
    tail = [s for s in steps[2:] if not s.overlapped and not _phase(s, "prefill")]
    assert tail, "offline runs with uneven lengths end with a fallback tail"
    for s in tail:
        d, v = _phase(s, "draft"), _phase(s, "verify")
        if d and v:
            assert d.end <= v.start


def test_k_per_request_is_proposed_and_costs_passes():
    cfg = make_config(mode="psd", k=3, m=4, requests=40, workload=WL, k_choices=(1, 5),
                      c_t=0.03, c_d=0.004, seed=2)
    trace = simulate(cfg).trace
    by_req = {}
    for step in trace.steps:
        for v in step.verified:
            by_req.setdefault(v.req, set()).add(v.proposed)
        d = _phase(step, "draft")
        if d is not None:      # tokens drafted = sum of the k of the drafted requests
            assert 1 * d.seqs <= d.tokens <= 5 * d.seqs
    assert all(len(ks) == 1 for ks in by_req.values())          # a request keeps its k
    assert {next(iter(ks)) for ks in by_req.values()} == {1, 5}
    # a batch of k = 1 requests drafts in one pass (0.004 s), one with any k = 5 in five
    drafts = {round(_phase(s, "draft").end - _phase(s, "draft").start, 9)
              for s in trace.steps if _phase(s, "draft")}
    assert drafts <= {0.004, 0.02} and 0.02 in drafts
