"""Token sampling: greedy, temperature and top-p (nucleus), all as probability tensors.

Everything is expressed as probabilities so that speculative decoding can compare draft and
target distributions: greedy is a one-hot argmax distribution, and `rejection.rejection_sample`
then reduces to exact-match acceptance.  Sampling uses an explicit `torch.Generator`, so the
same seed gives the same tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from psdlab.analysis.checks import check_nonnegative, check_range


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_p in (0, 1] keeps the smallest set of top tokens whose
    probability mass reaches top_p."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        check_nonnegative("temperature", self.temperature)
        check_range("top_p", self.top_p, 0.0, 1.0, lo_open=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities [..., V] in fp32 from logits [..., V] under params (renormalised)."""
    logits = logits.float()
    if params.greedy:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        probs = _top_p(probs, params.top_p)
    return probs


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero all tokens outside the nucleus (mass before a token >= top_p) and renormalise."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return kept / kept.sum(dim=-1, keepdim=True)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row: probs [..., V] -> LongTensor [...]."""
    flat = probs.reshape(-1, probs.shape[-1]).float()
    tokens = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return tokens.reshape(probs.shape[:-1])
