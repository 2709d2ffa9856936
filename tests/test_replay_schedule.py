"""A real PSD run replayed in the simulator takes the same schedule: every step verifies the
same sequences, and every admission prefills the same number.

With greedy decoding the calibration knows each request's match pattern, so the accepted
counts of the replay are the run's; the schedule then depends only on the two engines' rules
(admission, batch assignment, rebalancing, the SD fallback, the proposal cap).  Any
difference between the runtime's rules and the simulator's shows up here as a different
sequence of steps."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.runtime

from runtime.engine import Engine, EngineConfig  # noqa: E402
from runtime.requests import Request  # noqa: E402
from runtime.runner import ModelSpec  # noqa: E402
from runtime_engine_util import prompts, shared_pair  # noqa: E402
from validation.calibrate import calibrate  # noqa: E402
from validation.compare import _id_key, predict  # noqa: E402
from validation.model_file import write_model  # noqa: E402
from validation.validate import model_params  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.set_num_threads(1)
    return shared_pair(tmp_path_factory)


def _schedule(trace, ids=None):
    """Per step: ('P', n) for a prefill of n sequences, else the sorted verified ids."""
    out = []
    for s in sorted(trace.steps, key=lambda x: (x.start, x.index)):
        pre = [p for p in s.phases if p.kind == "prefill"]
        if pre:
            out.append(("P", pre[0].seqs))
        elif s.verified:
            out.append(tuple(sorted(ids[v.req] if ids else v.req for v in s.verified)))
    return out


@pytest.mark.parametrize("mode,k,batch", [("psd", 2, 2), ("psd", 3, 3), ("sd-sep", 2, 3)])
def test_replay_takes_the_runs_schedule(models, tmp_path, mode, k, batch):
    rows = prompts(11, seed=3, lo=2, hi=10)
    lengths = [9, 3, 14, 5, 7, 2, 11, 4, 8, 6, 12]
    reqs = [Request(f"r{i}", tuple(r), max_new_tokens=n)
            for i, (r, n) in enumerate(zip(rows, lengths))]
    cfg = EngineConfig(mode=mode, k=k, batch=batch, max_new_tokens=16, backend="inline",
                       max_len=64, ignore_eos=True)
    with Engine(cfg, ModelSpec(str(models["target"])), ModelSpec(str(models["noisy"]))) as eng:
        trace = eng.run(reqs).trace
    path = str(tmp_path / "model.json")
    write_model(path, calibrate([trace], holdout=0.0))
    _, sim = predict(trace, path, seeds=(0,), params=model_params(path))
    # the replay numbers requests in the run's admission order
    order = sorted(trace.requests, key=lambda r: (r.arrival, r.admitted, _id_key(r.id)))
    index = {r.id: i for i, r in enumerate(order)}
    measured = _schedule(trace, index)
    assert sum(x[1] for x in measured if x[0] == "P") == len(reqs)
    assert _schedule(sim) == measured
