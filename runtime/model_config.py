"""Model configuration for the runtime's Llama-family decoder.

`ModelConfig` is the one description of a model's shape that `runtime.model`, `runtime.kv_cache`
and `runtime.weights` share.  `ModelConfig.from_hf` reads a Hugging Face `config.json` dict
(model_type llama / qwen2 / qwen3; SmolLM2 is llama) and rejects anything this decoder does not
implement with a one-line ValueError, so a wrong model never runs silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psdlab.analysis.checks import check_int, check_positive

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
SUPPORTED_ROPE_TYPES = ("default", "llama3")


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3 (rope_type "llama3") frequency scaling parameters."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class ModelConfig:
    """Shape and switches of a Llama-family decoder (Llama 2/3, SmolLM2, Qwen2, Qwen3)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qk_norm: bool = False            # Qwen3: RMSNorm over head_dim on q and k before RoPE
    attention_bias: bool = False     # bias on q/k/v projections (Qwen2; Llama attention_bias)
    o_proj_bias: bool = False        # bias on the output projection (Llama attention_bias)
    mlp_bias: bool = False           # bias on gate/up/down (Llama mlp_bias)
    max_position_embeddings: int = 2048
    rope_scaling: RopeScaling | None = None
    model_type: str = "llama"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            check_int(name, getattr(self, name), minimum=1)
        check_positive("rope_theta", self.rope_theta)
        check_positive("rms_norm_eps", self.rms_norm_eps)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={self.num_heads}, "
                             f"got {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim: must be even for RoPE, got {self.head_dim}")

    @property
    def num_params(self) -> int:
        """Number of parameters (tied embeddings counted once)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * d * (self.num_heads + 2 * self.num_kv_heads) + self.num_heads * d * h
        mlp = 3 * h * self.intermediate_size
        per_layer = attn + mlp + 2 * h + (2 * d if self.qk_norm else 0)
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + emb + h

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> "ModelConfig":
        """Build from a Hugging Face config.json dict; one-line ValueError if unsupported."""
        model_type = config.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type: must be one of {', '.join(SUPPORTED_MODEL_TYPES)}, "
                             f"got {model_type!r}")
        _reject_unsupported(config)
        num_heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        head_dim = config.get("head_dim") or hidden // num_heads
        theta, scaling = _rope_from_hf(config)
        llama = model_type == "llama"
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(config.get("num_key_value_heads") or num_heads),
            head_dim=int(head_dim),
            rope_theta=theta,
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qk_norm=model_type == "qwen3",
            attention_bias=(model_type == "qwen2") or bool(config.get("attention_bias", False)),
            o_proj_bias=(model_type != "qwen2") and bool(config.get("attention_bias", False)),
            mlp_bias=llama and bool(config.get("mlp_bias", False)),
            max_position_embeddings=int(config.get("max_position_embeddings", 2048)),
            rope_scaling=scaling,
            model_type=model_type,
        )


def _reject_unsupported(config: dict[str, Any]) -> None:
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act: only 'silu' (SwiGLU) is supported, got {act!r}")
    if config.get("use_sliding_window", False):
        raise ValueError("use_sliding_window: sliding-window attention is not supported, got True")
    if config.get("pretraining_tp", 1) not in (1, None):
        raise ValueError(f"pretraining_tp: must be 1, got {config.get('pretraining_tp')!r}")
    layer_types = config.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise ValueError("layer_types: only 'full_attention' layers are supported")


def _rope_from_hf(config: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    """Read RoPE settings from either transformers 5 `rope_parameters` or 4.x `rope_scaling`."""
    params = dict(config.get("rope_parameters") or {})
    legacy = config.get("rope_scaling") or {}
    params = {**legacy, **params}
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"rope_type: must be one of {', '.join(SUPPORTED_ROPE_TYPES)}, "
                         f"got {rope_type!r}")
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial_rotary_factor: only 1.0 is supported, "
                         f"got {params['partial_rotary_factor']!r}")
    if rope_type == "default":
        return theta, None
    scaling = RopeScaling(
        factor=float(params["factor"]),
        low_freq_factor=float(params["low_freq_factor"]),
        high_freq_factor=float(params["high_freq_factor"]),
        original_max_position_embeddings=int(
            params.get("original_max_position_embeddings",
                       config.get("max_position_embeddings", 8192))),
    )
    return theta, scaling
