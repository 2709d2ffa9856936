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

from psdlab.runtime.controller import Engine, EngineConfig  # noqa: E402
from psdlab.runtime.requests import Request  # noqa: E402
from psdlab.runtime.runner import ModelSpec  # noqa: E402
from runtime_engine_util import prompts, shared_pair  # noqa: E402
from psdlab.validation.calibrate import calibrate  # noqa: E402
from psdlab.validation.compare import predict_trace  # noqa: E402
from psdlab.sim.costs.fitted import write_fit  # noqa: E402
from psdlab.validation.model_file import model_parts  # noqa: E402
from psdlab.validation.schedule import admission_index, agreement, schedule  # noqa: E402
from psdlab.validation.validate import model_params  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.set_num_threads(1)
    return shared_pair(tmp_path_factory)


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
    write_fit(path, *model_parts(calibrate([trace], holdout=0.0)))
    _, sim = predict_trace(trace, path, seeds=(0,), params=model_params(path))
    measured = schedule(trace, admission_index(trace))
    assert sum(x[1] for x in measured if x[0] == "P") == len(reqs)
    assert schedule(sim) == measured
    ag = agreement(trace, sim)
    assert ag.first_difference is None and ag.share == 1.0
    assert ag.steps_measured == len(measured)


def test_agreement_finds_the_first_difference(models, tmp_path):
    """A replay that lost one step: the agreement says where and how much."""
    from dataclasses import replace
    rows = prompts(4, seed=1, lo=2, hi=8)
    reqs = [Request(f"q{i}", tuple(r), max_new_tokens=6) for i, r in enumerate(rows)]
    cfg = EngineConfig(mode="sd-sep", k=2, batch=2, max_new_tokens=8, backend="inline",
                       max_len=64, ignore_eos=True)
    with Engine(cfg, ModelSpec(str(models["target"])), ModelSpec(str(models["noisy"]))) as eng:
        trace = eng.run(reqs).trace
    index = admission_index(trace)
    renamed = replace(trace, requests=[replace(r, id=index[r.id]) for r in trace.requests],
                      steps=[replace(s, verified=tuple(replace(v, req=index[v.req])
                                                       for v in s.verified))
                             for s in trace.steps])
    sched = schedule(trace, index)
    n = len(sched)
    assert n == len(trace.steps) > 4              # SD: every step prefills or verifies
    assert agreement(trace, renamed).first_difference is None
    # drop a step that differs from the next one: the first difference is there
    i = next(j for j in range(1, n - 1) if sched[j] != sched[j + 1])
    steps = sorted(renamed.steps, key=lambda x: (x.start, x.index))
    ag = agreement(trace, replace(renamed, steps=steps[:i] + steps[i + 1:]))
    assert ag.first_difference == i
    assert ag.matched == n - 1 and ag.share == pytest.approx((n - 1) / n)
