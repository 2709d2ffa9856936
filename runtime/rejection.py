"""Batched speculative-decoding rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

For each row b with num_draft[b] = k draft tokens d_1..d_k drawn from the draft distributions
q_i, and target distributions p_1..p_{k+1}: accept d_i with probability min(1, p_i(d_i)/q_i(d_i))
in order; at the first rejection emit a token from norm(max(0, p_i - q_i)) and stop; if all k
are accepted emit a bonus token from p_{k+1}.  The emitted tokens are then distributed exactly
as if sampled from the target.  With one-hot (greedy) distributions this reduces to
"longest prefix of the draft that matches the target's argmax, then the target's argmax".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from psdlab.runtime.sampling import sample

PAD = -1  # value of tokens[b, t] for t >= num_emitted[b]


@dataclass(frozen=True)
class RejectionResult:
    """accepted[b]: draft tokens accepted; tokens[b, :num_emitted[b]]: emitted tokens (the
    accepted prefix then one corrected/bonus token; the rest is PAD); num_emitted = accepted+1."""

    accepted: torch.Tensor
    tokens: torch.Tensor
    num_emitted: torch.Tensor


def _validate(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None,
              target_probs: torch.Tensor, num_draft: torch.Tensor) -> None:
    b, k = draft_tokens.shape
    if target_probs.dim() != 3 or tuple(target_probs.shape[:2]) != (b, k + 1):
        raise ValueError(f"target_probs: expected shape [{b}, {k + 1}, V], "
                         f"got {list(target_probs.shape)}")
    v = target_probs.shape[2]
    if draft_probs is not None and tuple(draft_probs.shape) != (b, k, v):
        raise ValueError(f"draft_probs: expected shape [{b}, {k}, {v}], "
                         f"got {list(draft_probs.shape)}")
    if num_draft.shape != (b,) or bool(((num_draft < 0) | (num_draft > k)).any()):
        raise ValueError(f"num_draft: expected {b} values in [0, {k}], got {num_draft.tolist()}")


def rejection_sample(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None,
                     target_probs: torch.Tensor, num_draft: torch.Tensor | None = None,
                     generator: torch.Generator | None = None) -> RejectionResult:
    """Verify draft_tokens [B, K] against target_probs [B, K+1, V]; see the module docstring.

    draft_probs [B, K, V] are the draft distributions the tokens were drawn from; None means
    the draft was deterministic (one-hot on draft_tokens).  num_draft [B] (default K) is the
    number of real draft tokens per row; later columns are padding and are ignored.
    """
    b, k = draft_tokens.shape
    dev = target_probs.device
    draft_tokens = draft_tokens.to(dev)
    if num_draft is None:
        num_draft = torch.full((b,), k, dtype=torch.long, device=dev)
    num_draft = torch.as_tensor(num_draft, dtype=torch.long, device=dev)
    _validate(draft_tokens, draft_probs, target_probs, num_draft)
    cols = torch.arange(k, device=dev)
    in_draft = cols[None] < num_draft[:, None]                        # [B, K]
    safe_tokens = torch.where(in_draft, draft_tokens, 0)

    p_tok = target_probs[:, :k].gather(-1, safe_tokens[..., None]).squeeze(-1).float()
    if draft_probs is None:
        q_tok = torch.ones_like(p_tok)
    else:
        q_tok = draft_probs.gather(-1, safe_tokens[..., None]).squeeze(-1).float()
    u = torch.rand(p_tok.shape, generator=generator, device=dev)
    ok = (u * q_tok < p_tok) & in_draft                               # accept iff u < p/q
    accepted = ok.long().cumprod(dim=-1).sum(dim=-1)                  # leading accepts

    last = _next_token_dist(draft_probs, target_probs, safe_tokens, accepted, num_draft)
    next_tok = sample(last, generator)

    tokens = torch.full((b, k + 1), PAD, dtype=torch.long, device=dev)
    keep = torch.arange(k + 1, device=dev)[None] < accepted[:, None]
    tokens[:, :k] = torch.where(keep[:, :k], draft_tokens, PAD)
    tokens.scatter_(1, accepted[:, None], next_tok[:, None])
    return RejectionResult(accepted=accepted, tokens=tokens, num_emitted=accepted + 1)


def _next_token_dist(draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                     safe_tokens: torch.Tensor, accepted: torch.Tensor,
                     num_draft: torch.Tensor) -> torch.Tensor:
    """[B, V]: the bonus distribution p_{a} where all were accepted, else norm(max(0, p - q))."""
    b, k = safe_tokens.shape
    rows = torch.arange(b, device=target_probs.device)
    p = target_probs[rows, accepted].float()                          # [B, V]
    if k == 0:
        return p
    at = accepted.clamp(max=k - 1)
    if draft_probs is None:
        q = torch.zeros_like(p).scatter_(-1, safe_tokens[rows, at][:, None], 1.0)
    else:
        q = draft_probs[rows, at].float()
    residual = (p - q).clamp(min=0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    bonus = (accepted >= num_draft)[:, None]
    # mass == 0 only when p == q at a rejected position (probability 0 event up to rounding).
    use_p = bonus | (mass <= 0)
    return torch.where(use_p, p, residual / mass.clamp(min=torch.finfo(p.dtype).tiny))
