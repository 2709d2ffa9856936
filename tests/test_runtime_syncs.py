"""Host syncs in the runner's hot path.  On a GPU every device-to-host read (``.item()``,
``.tolist()``, ``int(t)``, ``bool(t)``, ``nonzero``, boolean-mask indexing, ``.cpu()``) stalls
the host until the stream drains; a drafting or verification command should make exactly one
(its result).  Counted on CPU with a TorchFunctionMode that sees every such call, so a sync
reintroduced into `Transformer.forward_planned` / `ModelRunner` fails here without a GPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402

from psdlab.runtime.runner import ModelRunner, ModelSpec, RunnerConfig  # noqa: E402
from runtime_engine_util import shared_pair  # noqa: E402

models = pytest.fixture(scope="module")(shared_pair)
READS = {"item", "tolist", "__int__", "__bool__", "__float__", "__index__", "nonzero",
         "unique", "cpu", "numpy", "masked_select", "argwhere"}


class _Reads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in READS:
            self.calls.append(name)
        elif name == "__getitem__" and any(isinstance(a, torch.Tensor) and a.dtype == torch.bool
                                           for a in _flat(args[1:])):
            self.calls.append("bool-mask index")
        return func(*args, **(kwargs or {}))


def _flat(xs):
    for x in xs:
        if isinstance(x, (tuple, list)):
            yield from _flat(x)
        else:
            yield x


def _runner(models, **kw) -> ModelRunner:
    r = ModelRunner(RunnerConfig(ModelSpec(str(models["noisy"])), max_slots=4, max_len=64, **kw))
    r.feed([0, 1, 2], [0, 0, 0], [[5, 9, 11, 3], [7, 2], [13, 14, 15, 16, 17]])
    return r


def test_the_counter_sees_a_sync():
    with _Reads() as reads:
        x = torch.arange(4)
        int(x.max())
        x[x > 1]
    assert reads.calls == ["__int__", "bool-mask index"]


def test_greedy_draft_and_verify_read_the_device_once_each(models):
    r = _runner(models)
    with _Reads() as reads:
        drafts, probs = r.draft([0, 1, 2], [4, 2, 5], [[21], [22], [23]], [4, 4, 2])
    assert probs is None and [len(d) for d in drafts] == [4, 4, 2]
    assert reads.calls == ["tolist"]
    with _Reads() as reads:
        r.verify([0, 1, 2], [4, 2, 5], [[21], [22], [23]], drafts, None)
    assert reads.calls == ["tolist"]


def test_sampled_draft_keeps_its_probabilities_on_the_device_for_a_thread_worker(models):
    r = _runner(models, temperature=1.0, host_outputs=False, seed=3)
    with _Reads() as reads:
        drafts, probs = r.draft([0, 1, 2], [4, 2, 5], [[21], [22], [23]], [3, 3, 3])
    assert isinstance(probs, torch.Tensor) and probs.shape == (3, 3, r.vocab_size)
    assert reads.calls == ["tolist"]
    piped = _runner(models, temperature=1.0, host_outputs=True, seed=3)
    same, as_numpy = piped.draft([0, 1, 2], [4, 2, 5], [[21], [22], [23]], [3, 3, 3])
    assert same == drafts and torch.equal(torch.from_numpy(as_numpy), probs)
