"""A model's own ``config.json`` (Hugging Face format) as a catalog model shape.

``model = "path/to/config.json"`` (or a folder holding one) is accepted wherever a catalog name
is (``sim.costs.catalog.get_model``: the ``gpu`` and ``roofline`` cost models, ``psdlab cost
--model``).  The fields read are the ones every Llama / Qwen2 / Qwen3 / Mistral / Gemma-style
decoder writes:

- ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``
  (GQA; the head count when absent), ``head_dim`` (``hidden_size / num_attention_heads`` when
  absent or null), ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings`` (absent:
  true for Gemma, false otherwise, as transformers' config classes default),
  ``max_position_embeddings`` (the context length, optional);
- MoE: ``num_experts`` / ``num_local_experts`` / ``n_routed_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size`` (Mixtral: ``intermediate_size`` is the expert's), shared experts
  (``shared_expert_intermediate_size``, or ``n_shared_experts`` experts of
  ``moe_intermediate_size``), dense layers (``first_k_dense_replace`` with ``moe_layer_freq``;
  ``decoder_sparse_step`` with ``mlp_only_layers``);
- the weight format: ``quantization_config`` (``quant_method`` awq / gptq with ``bits`` 4 or 8:
  ``w4a16`` / ``w8a16``; ``fp8``: ``fp8``), else ``torch_dtype`` (or transformers 4.56's
  ``dtype``): bfloat16 is the default format, float16 and float32 (which vLLM's ``--dtype
  auto`` serves in fp16) read ``fp16``.

A multimodal config that keeps its language model under ``text_config`` (Gemma 3, ...) is read
from there.  A bad file gives one line naming the field: ``cost.model.hidden_size: missing in
FILE``.  Multi-head latent attention (DeepSeek-V2/V3 ``kv_lora_rank``) is refused: its KV cache
and projections are not the GQA shapes the roofline prices.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Callable, Mapping, TypeVar

from psdlab.analysis.checks import check_choice, check_int

#: the shape class the fields are given to (``sim.costs.catalog.ModelShape``; passed in by the
#: catalog, which imports this module, so that the two do not import each other)
_Shape = TypeVar("_Shape")

#: config.json ``torch_dtype`` -> the cost model's weight format ("" = the default, bf16)
TORCH_DTYPES: dict[str, str] = {"bfloat16": "", "float16": "fp16", "float32": "fp16"}
#: (quant_method, bits) -> weight format; fp8 checkpoints carry no bits
QUANT_FORMATS: dict[tuple[str, int | None], str] = {
    ("awq", 4): "w4a16", ("gptq", 4): "w4a16", ("gptq", 8): "w8a16", ("fp8", None): "fp8"}
#: the spellings of the routed-expert count, first present wins
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def config_path(value: str) -> str | None:
    """The config.json a model value names: a ``.json`` path, or a folder holding
    ``config.json``; None when it names neither (a catalog name)."""
    if value.lower().endswith(".json"):
        return value
    if os.path.isdir(value):
        return os.path.join(value, "config.json")
    return None


def model_from_config(path: str, where: str, make: Callable[..., _Shape]) -> _Shape:
    """The model shape of one config.json, built by ``make`` from ModelShape's fields
    (``sim.costs.catalog.get_model`` passes ModelShape); ValueError ``WHERE.FIELD: ...`` on a
    bad file."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        raise ValueError(f"{where}: no config.json at {path}") from None
    return _load(os.path.abspath(path), stamp, where, make)


@functools.lru_cache(maxsize=64)
def _load(path: str, stamp: int, where: str, make: Callable[..., _Shape]) -> _Shape:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: {path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: {path} must hold a JSON object, got {type(raw).__name__}")
    cfg = raw
    if "hidden_size" not in raw and isinstance(raw.get("text_config"), dict):
        cfg, where = raw["text_config"], f"{where}.text_config"
    return _ConfigReader(cfg, path, where).shape(_model_name(path), raw, make)


def _model_name(path: str) -> str:
    base = os.path.basename(path)
    if base == "config.json":
        return os.path.basename(os.path.dirname(path)) or "config"
    return os.path.splitext(base)[0]


class _ConfigReader:
    """Reads the fields of one config.json, each error naming the field and the file."""

    def __init__(self, cfg: Mapping[str, Any], path: str, where: str) -> None:
        self.cfg, self.path, self.where = cfg, path, where

    def fail(self, key: str, why: str) -> ValueError:
        return ValueError(f"{self.where}.{key}: {why} (in {self.path})")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int_(self, key: str, minimum: int = 1, maximum: int | None = None,
             default: int | None = None) -> int:
        if not self.has(key):
            if default is not None:
                return default
            raise self.fail(key, "missing; the cost model needs it")
        try:
            return check_int(f"{self.where}.{key}", self.cfg[key], minimum, maximum)
        except ValueError as exc:
            raise ValueError(f"{exc} (in {self.path})") from None

    def bool_(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.cfg[key]
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, value: Any, choices: tuple[str, ...]) -> str:
        try:
            return str(check_choice(f"{self.where}.{key}", value, choices))
        except ValueError as exc:
            raise ValueError(f"{exc} (in {self.path})") from None

    # ------------------------------------------------------------------ the parts
    def attention(self) -> tuple[int, int, int, int]:
        """(hidden, heads, kv_heads, head_dim)."""
        if self.has("kv_lora_rank"):
            raise self.fail("kv_lora_rank", "multi-head latent attention (DeepSeek-V2/V3) is "
                                            "not priced by the roofline; give the model inline")
        hidden = self.int_("hidden_size")
        heads = self.int_("num_attention_heads")
        kv_heads = self.int_("num_key_value_heads", default=heads)
        if heads % kv_heads:
            raise self.fail("num_key_value_heads",
                            f"must divide num_attention_heads={heads}, got {kv_heads}")
        if self.has("head_dim"):
            head_dim = self.int_("head_dim")
        elif hidden % heads:
            raise self.fail("head_dim", f"missing, and hidden_size={hidden} is not a multiple "
                                        f"of num_attention_heads={heads}")
        else:
            head_dim = hidden // heads
        return hidden, heads, kv_heads, head_dim

    def experts(self) -> dict[str, int]:
        """The MoE fields of ModelShape (empty for a dense model)."""
        key = next((k for k in EXPERT_KEYS if self.has(k)), None)
        if key is None or self.cfg[key] == 0:
            return {}
        experts = self.int_(key)
        active = self.int_("num_experts_per_tok", 1, experts)
        if self.has("moe_intermediate_size"):
            expert_inter = self.int_("moe_intermediate_size")
        else:
            expert_inter = self.int_("intermediate_size")       # Mixtral: the expert's size
        shared = 0
        if self.has("shared_expert_intermediate_size"):
            shared = self.int_("shared_expert_intermediate_size", minimum=0)
        elif self.has("n_shared_experts"):
            shared = self.int_("n_shared_experts", minimum=0) * expert_inter
        return {"experts": experts, "experts_active": active,
                "expert_intermediate": expert_inter, "shared_expert_intermediate": shared}

    def dense_layers(self, layers: int) -> int:
        """Layers of a MoE model whose MLP is dense: the first ``first_k_dense_replace`` (then
        every ``moe_layer_freq``-th is MoE), or those off ``decoder_sparse_step`` and in
        ``mlp_only_layers``."""
        if self.has("first_k_dense_replace"):
            first = self.int_("first_k_dense_replace", 0, layers)
            freq = self.int_("moe_layer_freq", default=1)
            moe = [i for i in range(layers) if i >= first and i % freq == 0]
        else:
            step = self.int_("decoder_sparse_step", default=1)
            only = self.cfg.get("mlp_only_layers") or []
            if not isinstance(only, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                    for i in only):
                raise self.fail("mlp_only_layers", f"expected a list of layer indices in "
                                                   f"0..{layers - 1}, got {only!r}")
            moe = [i for i in range(layers) if (i + 1) % step == 0 and i not in only]
        if not moe:
            raise self.fail("num_experts_per_tok", "no layer is MoE (first_k_dense_replace, "
                                                   "decoder_sparse_step or mlp_only_layers)")
        return layers - len(moe)

    def weight_dtype(self) -> str:
        """The weight format the checkpoint stores ("" = bf16)."""
        quant = self.cfg.get("quantization_config")
        if quant is not None:
            if not isinstance(quant, Mapping):
                raise self.fail("quantization_config", f"expected a table, got {quant!r}")
            methods = tuple(sorted({m for m, _ in QUANT_FORMATS}))
            method = self.choice("quantization_config.quant_method",
                                 str(quant.get("quant_method", "")).lower(), methods)
            if method == "fp8":
                return QUANT_FORMATS[("fp8", None)]
            sub = _ConfigReader(quant, self.path, f"{self.where}.quantization_config")
            bits = sub.int_("bits")
            allowed = sorted(b for m, b in QUANT_FORMATS if m == method and b is not None)
            if (method, bits) not in QUANT_FORMATS:
                raise sub.fail("bits", f"must be one of {', '.join(map(str, allowed))} for "
                                       f"{method}, got {bits}")
            return QUANT_FORMATS[(method, bits)]
        key = "torch_dtype" if self.has("torch_dtype") else "dtype"
        if not self.has(key):
            return ""
        return TORCH_DTYPES[self.choice(key, self.cfg[key], tuple(TORCH_DTYPES))]

    def shape(self, name: str, raw: Mapping[str, Any], make: Callable[..., _Shape]) -> _Shape:
        """The model shape of the whole config (ModelShape's fields, given to ``make``)."""
        layers = self.int_("num_hidden_layers")
        hidden, heads, kv_heads, head_dim = self.attention()
        moe = self.experts()
        if moe:
            dense = self.dense_layers(layers)
            inter = self.int_("intermediate_size") if (dense or self.has("intermediate_size")) \
                else moe["expert_intermediate"]
            moe["dense_layers"] = dense
        else:
            inter = self.int_("intermediate_size")
        model_type = str(self.cfg.get("model_type", raw.get("model_type", "")))
        tied = self.bool_("tie_word_embeddings", default=model_type.startswith("gemma"))
        max_len = self.int_("max_position_embeddings") if self.has("max_position_embeddings") \
            else None
        hf_id = raw.get("_name_or_path")
        return make(name=name, layers=layers, hidden=hidden, heads=heads,
                    kv_heads=kv_heads, head_dim=head_dim, intermediate=inter,
                    vocab=self.int_("vocab_size"), tied_embeddings=tied, max_model_len=max_len,
                    weight_dtype=self.weight_dtype(),
                    hf_id=hf_id if isinstance(hf_id, str) else "",
                    source=f"config.json {self.path}", **moe)
