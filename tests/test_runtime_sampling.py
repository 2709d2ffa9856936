"""Sampling and batched rejection sampling: validation, greedy/temperature/top-p, and that
speculative rejection sampling is lossless (emitted tokens follow the target distribution)."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402

from psdlab.runtime.rejection import PAD, rejection_sample  # noqa: E402
from psdlab.runtime.sampling import SamplingParams, logits_to_probs, sample  # noqa: E402

pytestmark = pytest.mark.runtime
N = 100_000


def tv(counts: torch.Tensor, probs: torch.Tensor) -> float:
    emp = counts.double() / counts.sum()
    return 0.5 * (emp - probs.double()).abs().sum().item()


def dist(*values: float) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.float32)
    return t / t.sum()


# --- SamplingParams / logits_to_probs / sample -------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_p": -1}, "top_p"),
])
def test_bad_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field) as err:
        SamplingParams(**kwargs)
    assert "\n" not in str(err.value)


def test_greedy_is_one_hot_argmax():
    logits = torch.randn(4, 3, 50, generator=torch.Generator().manual_seed(0))
    probs = logits_to_probs(logits, SamplingParams())
    assert torch.equal(probs.argmax(-1), logits.argmax(-1))
    assert torch.equal(probs.sum(-1), torch.ones(4, 3)) and set(probs.unique().tolist()) == {0, 1}


def test_temperature_matches_softmax_formula():
    logits = np.array([[1.0, -2.0, 0.5, 3.0]])
    for temp in (0.5, 1.0, 2.0):
        e = np.exp(logits / temp)
        probs = logits_to_probs(torch.tensor(logits), SamplingParams(temperature=temp))
        np.testing.assert_allclose(probs.numpy(), e / e.sum(), rtol=1e-5)


def test_top_p_keeps_the_nucleus():
    logits = torch.tensor([0.05, 0.5, 0.15, 0.3]).log()
    got = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.8))
    assert torch.allclose(got, torch.tensor([0.0, 0.625, 0.0, 0.375]), atol=1e-6)
    got = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.81))
    assert torch.allclose(got, torch.tensor([0.0, 0.5, 0.15, 0.3]) / 0.95, atol=1e-6)


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 10_000), top_p=st.floats(0.01, 1.0), temp=st.floats(0.2, 3.0))
def test_top_p_nucleus_is_minimal(seed, top_p, temp):
    logits = torch.randn(12, generator=torch.Generator().manual_seed(seed)) * 3
    full = torch.softmax(logits.double() / temp, -1)
    got = logits_to_probs(logits, SamplingParams(temperature=temp, top_p=top_p))
    kept = got > 0
    assert abs(got.sum().item() - 1) < 1e-5
    assert full[kept].sum().item() >= top_p - 1e-5                # reaches top_p
    assert full[kept].sum().item() - full[kept].min().item() < top_p + 1e-5  # minimal
    assert full[kept].min() >= full[~kept].max() if (~kept).any() else True   # top tokens
    assert torch.allclose(got[kept], (full[kept] / full[kept].sum()).float(), atol=1e-5)


def test_sample_follows_probs_and_is_seeded():
    p = dist(1, 2, 3, 4)
    draws = sample(p.expand(N, 4), torch.Generator().manual_seed(0))
    assert tv(torch.bincount(draws, minlength=4), p) < 0.01
    again = sample(p.expand(N, 4), torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)


# --- rejection sampling: lossless in distribution ----------------------------------------------

PAIRS = {
    "random": (dist(3, 1, 4, 1, 5, 9), dist(2, 7, 1, 8, 2, 8)),
    "q-zero-where-p-not": (dist(1, 2, 3, 0.5, 3.5, 1), dist(5, 5, 0, 0, 0, 0)),
    "p-zero-where-q-not": (dist(0, 0, 3, 1, 1, 5), dist(1, 1, 1, 1, 1, 1)),
    "equal": (dist(1, 2, 3, 4, 5, 6), dist(1, 2, 3, 4, 5, 6)),
    "disjoint": (dist(0, 0, 0, 1, 2, 3), dist(4, 1, 1, 0, 0, 0)),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_first_token_follows_target(name):
    p, q = PAIRS[name]
    gen = torch.Generator().manual_seed(11)
    draft = torch.multinomial(q.expand(N, -1), 1, replacement=True, generator=gen)
    res = rejection_sample(draft, q.expand(N, 1, -1), p.expand(N, 2, -1), None, gen)
    assert tv(torch.bincount(res.tokens[:, 0], minlength=6), p) < 0.01
    # acceptance rate of the optimal coupling: sum_x min(p, q)
    assert abs(res.accepted.double().mean().item() - torch.minimum(p, q).sum().item()) < 0.01


def test_deterministic_draft_follows_target():
    p = dist(2, 1, 5, 2)
    gen = torch.Generator().manual_seed(12)
    draft = torch.full((N, 1), 2)                       # draft_probs None: one-hot on token 2
    res = rejection_sample(draft, None, p.expand(N, 2, -1), None, gen)
    assert tv(torch.bincount(res.tokens[:, 0], minlength=4), p) < 0.01
    assert abs(res.accepted.double().mean().item() - p[2].item()) < 0.01


def _chain(n, gen, v=3):
    """Context-dependent target P1, P2[x1] and draft Q1, Q2[d1] on a tiny vocab."""
    g = torch.Generator().manual_seed(7)
    p1, q1 = torch.rand(v, generator=g) + 0.05, torch.rand(v, generator=g) + 0.05
    p2, q2 = torch.rand(v, v, generator=g) ** 2, torch.rand(v, v, generator=g) ** 2
    q2[:, 0] = 0                                        # draft never proposes 0 second
    p1, q1 = p1 / p1.sum(), q1 / q1.sum()
    p2, q2 = p2 / p2.sum(-1, keepdim=True), q2 / q2.sum(-1, keepdim=True)
    d1 = torch.multinomial(q1.expand(n, -1), 1, replacement=True, generator=gen)[:, 0]
    d2 = sample(q2[d1], gen)
    return p1, p2, q1, q2, d1, d2


def test_two_token_joint_follows_target():
    n, v = 200_000, 3
    gen = torch.Generator().manual_seed(13)
    p1, p2, q1, q2, d1, d2 = _chain(n, gen, v)
    target = torch.stack([p1.expand(n, -1), p2[d1], torch.full((n, v), 1 / v)], dim=1)
    res = rejection_sample(torch.stack([d1, d2], 1), torch.stack([q1.expand(n, -1), q2[d1]], 1),
                           target, None, gen)
    x1 = res.tokens[:, 0]
    # where only one token was emitted, the next step would sample x2 from the target
    x2 = torch.where(res.num_emitted >= 2, res.tokens[:, 1], sample(p2[x1], gen))
    joint = (p1[:, None] * p2).reshape(-1)
    assert tv(torch.bincount(x1 * v + x2, minlength=v * v), joint) < 0.01
    assert int(res.accepted.max()) == 2 and int(res.accepted.min()) == 0


def test_ragged_num_draft_first_token_follows_target():
    p, q = PAIRS["q-zero-where-p-not"]
    gen = torch.Generator().manual_seed(14)
    k = 3
    draft = torch.multinomial(q.expand(N, -1), k, replacement=True, generator=gen)
    num_draft = torch.randint(0, k + 1, (N,), generator=gen)
    res = rejection_sample(draft, q.expand(N, k, -1), p.expand(N, k + 1, -1), num_draft, gen)
    assert bool((res.accepted <= num_draft).all())
    assert tv(torch.bincount(res.tokens[:, 0], minlength=6), p) < 0.01
    zero = num_draft == 0                               # no draft: the bonus from the target
    assert tv(torch.bincount(res.tokens[zero, 0], minlength=6), p) < 0.02


# --- greedy and bookkeeping ----------------------------------------------------------------------

def one_hot(idx: torch.Tensor, v: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(idx, v).float()


@settings(deadline=None, max_examples=60)
@given(seed=st.integers(0, 10_000), b=st.integers(1, 6), k=st.integers(0, 5),
       with_draft_probs=st.booleans())
def test_greedy_is_longest_matching_prefix_plus_target_argmax(seed, b, k, with_draft_probs):
    v = 4
    g = torch.Generator().manual_seed(seed)
    target_arg = torch.randint(0, v, (b, k + 1), generator=g)
    draft = torch.where(torch.rand(b, k, generator=g) < 0.7, target_arg[:, :k],
                        torch.randint(0, v, (b, k), generator=g))
    num_draft = torch.randint(0, k + 1, (b,), generator=g)
    res = rejection_sample(draft, one_hot(draft, v) if with_draft_probs else None,
                           one_hot(target_arg, v), num_draft, g)
    for r in range(b):
        a = 0
        while a < int(num_draft[r]) and int(draft[r, a]) == int(target_arg[r, a]):
            a += 1
        assert int(res.accepted[r]) == a and int(res.num_emitted[r]) == a + 1
        expect = draft[r, :a].tolist() + [int(target_arg[r, a])] + [PAD] * (k - a)
        assert res.tokens[r].tolist() == expect


def test_same_seed_same_result_and_seeds_matter():
    p, q = PAIRS["random"]
    draft = torch.multinomial(q.expand(64, -1), 2, replacement=True,
                              generator=torch.Generator().manual_seed(0))
    args = (draft, q.expand(64, 2, -1), p.expand(64, 3, -1), None)
    a = rejection_sample(*args, torch.Generator().manual_seed(5))
    b = rejection_sample(*args, torch.Generator().manual_seed(5))
    c = rejection_sample(*args, torch.Generator().manual_seed(6))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.accepted, b.accepted)
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize("field", ["target_probs", "draft_probs", "num_draft"])
def test_bad_shapes_name_the_field(field):
    draft = torch.zeros(2, 3, dtype=torch.long)
    args = {"draft_tokens": draft, "draft_probs": torch.full((2, 3, 5), 0.2),
            "target_probs": torch.full((2, 4, 5), 0.2), "num_draft": torch.tensor([1, 3])}
    bad = {"target_probs": torch.full((2, 3, 5), 0.2), "draft_probs": torch.full((2, 3, 4), 0.25),
           "num_draft": torch.tensor([1, 4])}
    with pytest.raises(ValueError, match=field):
        rejection_sample(**{**args, field: bad[field]})
