"""The PSD batch manager: the paper's assign/recycle rules and the rebalance policy."""
import numpy as np
import pytest

from psdlab.sim.batch_assignment import BatchAssignment
from psdlab.sim.simulation import simulate
from sim_helpers import make_config


def test_paper_first_step_goes_to_smaller_batch_then_to_draft_batch():
    bm = BatchAssignment(2, 3, "paper")
    for r in range(4):
        b = bm.choose()
        bm.add(r, b)
    assert bm.batches == [[0, 2], [1, 3]]          # alternating while not started
    bm.started = True
    bm.next_draft = 1
    assert bm.choose() == 1
    bm.add(4, 1)
    assert bm.choose() is None                       # draft batch full: wait (no spill-over)
    bm.remove(0, 0)                                  # a finished request gives its place back
    bm.next_draft = 0
    assert bm.choose() == 0


def test_paper_victim_is_latest_admitted_and_no_rebalancing():
    bm = BatchAssignment(2, 4, "paper")
    bm.batches = [[0, 1, 2], [3]]
    seq = np.array([0, 1, 5, 2])
    assert bm.victim(seq) == (2, 0)
    assert bm.rebalance(np.zeros(4, bool), seq) == []


def test_rebalance_joins_smaller_moves_and_prefers_unready():
    bm = BatchAssignment(2, 8, "rebalance")
    bm.batches = [[0, 1, 2, 3], [4]]
    bm.next_draft = 0
    assert bm.choose() == 1
    ready = np.array([True, True, False, True, False])
    seq = np.arange(5)
    moved = bm.rebalance(ready, seq)
    assert moved == [2]                  # the only request without drafts ready moves first
    assert sorted(map(len, bm.batches)) == [2, 3]
    assert bm.victim(seq)[1] == int(np.argmax(bm.sizes()))


@pytest.mark.parametrize("policy,balanced", [("paper", False), ("rebalance", True)])
def test_preemptions_unbalance_only_the_paper_policy(policy, balanced):
    wl = {"name": "poisson", "rate": 200.0, "prompt": {"name": "uniform", "low": 20, "high": 200},
          "output": {"name": "uniform", "low": 10, "high": 200}}
    cfg = make_config(mode="psd", m=8, requests=120, workload=wl, policy=policy, kv_blocks=90,
                      block_size=8, seed=3)
    gaps = []
    res = simulate(cfg, observer=lambda core: gaps.append(abs(np.subtract(*core.bm.sizes()))))
    assert res.counters["preemptions"] > 0
    assert (max(gaps) <= 1) == balanced
