"""The structural prior of a calibration from speculative runs only: the ratio of a drafter
forward pass to a target forward pass, given directly or derived from the two models'
Hugging Face ``config.json`` files.

Speculative runs time k drafting forwards and one verification together, so they pin the
step's total, not its split between the two models (``identifiability``).  With the prior,
``calibration.fit_from_bench`` ties every drafter coefficient to the target's
(drafter.<term> = ratio x target.<term>) and fits the target's; the split then comes from the
prior, not the data.

The rule (:func:`forward_params`, the one place it lives): a forward pass costs in
proportion to the weights of its matrix multiplications -- every layer's attention
projections, MLP (the active experts of an MoE layer) and norms, plus the LM head (vocab x
hidden) once; the input embedding is a row lookup, no matmul, so it is not counted (a tied
embedding still costs its LM-head use).  Why weights: a decode forward of a small batch reads
every weight once (memory-bound: time ~ bytes of weights), a prefill does 2 FLOPs per weight
and token (compute-bound: time ~ weights x tokens); both scale with this count.  Attention
over the context (not weights) is left out, so the ratio describes short contexts best.
For two models of one family and hidden size (a layer-pruned drafter, as psdlab's) it is
``(L_d x layer + head) / (L_t x layer + head)``: for SmolLM2-135M (30 layers) and its
18-layer drafter 0.684, where the layer count alone would give 0.6.  Parameter counts come
from ``sim.costs.catalog.ModelShape``.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

from psdlab.sim.costs.catalog import ModelShape

#: allowed range of the ratio: (0, MAX_RATIO]
MAX_RATIO = 10.0


def check_ratio(value: Any, field: str = "drafter_to_target_ratio") -> float:
    """``value`` as a float in (0, MAX_RATIO], else a one-line ValueError naming ``field``."""
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: expected a number in (0, {MAX_RATIO:g}], got {value!r}") \
            from None
    if not (math.isfinite(r) and 0.0 < r <= MAX_RATIO):
        raise ValueError(f"{field}: must be in (0, {MAX_RATIO:g}], got {value!r}")
    return r


def _int(cfg: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (
            value == 0 and default is None):
        raise ValueError(f"{path}: field {key!r}: expected a positive integer, got {value!r}")
    return value


def spec_from_hf_config(path: str | os.PathLike[str]) -> ModelShape:
    """The ``ModelShape`` of a Hugging Face ``config.json`` (a file, or a folder holding one)
    of a decoder-only transformer; missing or bad fields are one-line errors."""
    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, "config.json")
    try:
        with open(p, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except OSError as exc:
        raise ValueError(f"{p}: cannot read the model config ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{p}: expected a JSON object (a Hugging Face config.json)")
    if isinstance(cfg.get("text_config"), dict):          # multimodal wrappers
        cfg = {**cfg, **cfg["text_config"]}
    hidden = _int(cfg, "hidden_size", p)
    heads = _int(cfg, "num_attention_heads", p)
    experts = _int(cfg, "num_local_experts", p, _int(cfg, "num_experts", p, 0))
    return ModelShape(
        name=os.path.basename(os.path.dirname(os.path.abspath(p))) or p,
        layers=_int(cfg, "num_hidden_layers", p), hidden=hidden, heads=heads,
        kv_heads=_int(cfg, "num_key_value_heads", p, heads),
        head_dim=_int(cfg, "head_dim", p, hidden // heads),
        intermediate=_int(cfg, "intermediate_size", p), vocab=_int(cfg, "vocab_size", p),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), experts=experts,
        experts_active=_int(cfg, "num_experts_per_tok", p, 0) if experts else 0,
        expert_intermediate=(_int(cfg, "moe_intermediate_size", p,
                                  _int(cfg, "intermediate_size", p)) if experts else 0))


def forward_params(spec: ModelShape) -> int:
    """The weights one forward pass multiplies by (module docstring: the rule)."""
    return spec.layers * spec.layer_params(active_only=True) + spec.lm_head_params


def ratio_from_configs(target_config: str, draft_config: str) -> float:
    """Drafter forward / target forward by :func:`forward_params` of the two configs."""
    ratio = forward_params(spec_from_hf_config(draft_config)) / forward_params(
        spec_from_hf_config(target_config))
    return check_ratio(ratio, "--target-config/--draft-config (their ratio)")


def resolve_ratio(ratio: float | None, target_config: str | None,
                  draft_config: str | None) -> float | None:
    """The prior's ratio from what was given (a number, or both configs, or nothing: None);
    a mix or one config alone is a one-line error."""
    if (target_config is None) != (draft_config is None):
        raise ValueError("target_config/draft_config: give both model configs or neither")
    if ratio is not None and target_config is not None:
        raise ValueError("drafter_to_target_ratio: give the ratio or the two model configs, "
                         "not both")
    if ratio is not None:
        return check_ratio(ratio)
    if target_config is not None and draft_config is not None:
        return ratio_from_configs(target_config, draft_config)
    return None
