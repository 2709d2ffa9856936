"""The lossless rule of `psdlab bench-gpu` (`validation.gpu.bench_gpu`, `docs/cuda.md`): each
output that departs from AR's is judged by the target's top-2 logit margin at its first
divergence, accepted only within `MARGIN_ULPS` bf16 spacings of the top logit."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

#: a divergence from AR is put down to rounding when the target's top-2 margin there is at
#: most this many bf16 spacings of the top logit (bf16 keeps 8 significant bits)
MARGIN_ULPS = 4


def bf16_spacing(x: float) -> float:
    """The distance between neighbouring bf16 numbers at |x| (8 significant bits)."""
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - 7)


@dataclass(frozen=True)
class Divergence:
    """One request's first departure from AR's output and the target's logits there."""
    request: int
    position: int
    ar_token: int
    token: int
    top2: tuple[float, float]          # the two highest logits
    top2_margin: float
    logits: tuple[float, float]        # of AR's token and of this run's
    gap_bf16_spacings: float           # between those two, in bf16 spacings
    near_top: bool                     # both within MARGIN_ULPS spacings of the top logit
    accepted: bool                     # near the top and near each other: rounding


@dataclass(frozen=True)
class LosslessVerdict:
    """The rule on one m's runs: each speculative run's departures from AR, judged."""
    psd_equals_sd_sep: bool
    equal_to_ar: Mapping[str, bool]                       # run -> output equal to AR's
    divergences: Mapping[str, tuple[Divergence, ...]]     # run -> its departures
    divergences_total: int
    divergences_accepted: int
    holds: bool


def divergences(model: Any, prompts: list[list[int]], ar: list[list[int]],
                other: list[list[int]], device: str) -> list[Divergence]:
    """Each request whose output departs from AR's: the first position, both tokens, the
    target's logits there (a third numeric path: one causal pass over the common prefix), its
    top-2 margin, the two tokens' gap in bf16 spacings; accepted when both tokens are within
    `MARGIN_ULPS` spacings of each other and of the top logit (a near-tie that rounding can
    flip; random-weight models have many, sometimes among three or more tokens)."""
    import torch
    out = []
    for i, (p, a, b) in enumerate(zip(prompts, ar, other)):
        pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if pos is None:
            continue
        ids = torch.tensor([list(p) + list(a[:pos])], device=device)
        logits = model.forward_no_cache(ids)[0, -1].float()
        t0, t1 = torch.topk(logits, 2).values.tolist()
        la, lb = float(logits[a[pos]]), float(logits[b[pos]])
        gap = abs(la - lb) / bf16_spacing(max(abs(la), abs(lb)))
        near_top = t0 - min(la, lb) <= MARGIN_ULPS * bf16_spacing(t0)
        out.append(Divergence(request=i, position=pos, ar_token=a[pos], token=b[pos],
                              top2=(t0, t1), top2_margin=t0 - t1, logits=(la, lb),
                              gap_bf16_spacings=gap, near_top=near_top,
                              accepted=bool(gap <= MARGIN_ULPS and near_top)))
    return out


def lossless(outputs: dict[str, list], prompts: list[list[int]], model: Any, device: str
             ) -> LosslessVerdict:
    """The rule on one m's runs (`docs/cuda.md`): every departure from AR's output is judged
    by the target's top-2 margin at its first position; SD-sep == PSD is reported beside it
    (their verification batches shrink differently as requests end, so in bf16 their shapes,
    and so their rounding, can differ; the batch-invariant mode removes that)."""
    ar = outputs["ar"]
    spec = [v for k, v in outputs.items() if k != "ar"]
    judged = {name: tuple(divergences(model, prompts, ar, run, device))
              for name, run in outputs.items() if name != "ar"}
    found = [d for v in judged.values() for d in v]
    return LosslessVerdict(psd_equals_sd_sep=all(run == spec[0] for run in spec),
                           equal_to_ar={name: not v for name, v in judged.items()},
                           divergences=judged, divergences_total=len(found),
                           divergences_accepted=sum(d.accepted for d in found),
                           holds=all(d.accepted for d in found))
