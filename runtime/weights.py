"""Weights for the runtime's decoder: load HF safetensors directories, convert GGUF once, and
build tiny random Hugging Face models for tests.

- `load_model(path, device, dtype)` reads `config.json` + `model.safetensors` (or sharded
  `*.safetensors` with `model.safetensors.index.json`) and maps HF parameter names onto
  `runtime.model.Transformer` (q/k/v fused into wqkv, gate/up into w13).
- `convert_gguf(gguf_path, out_dir)` dequantises a GGUF file through transformers into an HF
  safetensors directory once; it writes into a temporary directory and renames it, so an
  interrupted conversion is never taken as complete.
- `random_model_dir(out_dir, cfg_overrides, seed, model_type)` saves a seeded tiny random
  LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM; `random_model(cfg, seed)` builds a
  random `Transformer` directly (no transformers), e.g. for realistic-size speed runs.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch

from psdlab.analysis.checks import check_choice
from psdlab.runtime.model_config import ModelConfig
from psdlab.runtime.model import Transformer

CONVERSION_MARKER = "psdlab_conversion.json"
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_DIRECT = ("input_layernorm.weight", "post_attention_layernorm.weight",
           "self_attn.o_proj.weight", "self_attn.o_proj.bias", "self_attn.q_norm.weight",
           "self_attn.k_norm.weight", "mlp.down_proj.weight", "mlp.down_proj.bias")
_FUSED = {"self_attn.q_proj": ("self_attn.wqkv", 0), "self_attn.k_proj": ("self_attn.wqkv", 1),
          "self_attn.v_proj": ("self_attn.wqkv", 2), "mlp.gate_proj": ("mlp.w13", 0),
          "mlp.up_proj": ("mlp.w13", 1)}
_IGNORED = re.compile(r"rotary_emb\.inv_freq$")


def _safetensor_files(path: Path) -> list[Path]:
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [path / name for name in sorted(set(weight_map.values()))]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"path: no *.safetensors files in {path}")
    return files


def _iter_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open
    for file in _safetensor_files(path):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def map_hf_state_dict(tensors: Iterator[tuple[str, torch.Tensor]], cfg: ModelConfig,
                      device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Map HF names (model.layers.N.self_attn.q_proj.weight, ...) to Transformer's names."""
    out: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[int, torch.Tensor]] = {}
    for name, tensor in tensors:
        tensor = tensor.to(device=device, dtype=dtype)
        target = _map_name(name, parts, tensor)
        if target is not None:
            out[target] = tensor
    for fused, pieces in parts.items():
        want = 3 if ".wqkv." in fused else 2
        if sorted(pieces) != list(range(want)):
            raise ValueError(f"weights: incomplete projections for {fused} (have {sorted(pieces)})")
        out[fused] = torch.cat([pieces[i] for i in range(want)], dim=0)
    if cfg.tie_word_embeddings or "lm_head.weight" not in out:
        if not cfg.tie_word_embeddings:
            raise ValueError("weights: lm_head.weight missing and tie_word_embeddings is false")
        out["lm_head.weight"] = out["embed_tokens.weight"]
    return out


def _map_name(name: str, parts: dict[str, dict[int, torch.Tensor]],
              tensor: torch.Tensor) -> str | None:
    if _IGNORED.search(name):
        return None
    if name in ("model.embed_tokens.weight", "model.norm.weight"):
        return name[len("model."):]
    if name == "lm_head.weight":
        return name
    m = _LAYER_RE.match(name)
    if m:
        layer, rest = m.groups()
        if rest in _DIRECT:
            return f"layers.{layer}.{rest}"
        module, _, kind = rest.rpartition(".")
        if module in _FUSED:
            fused, index = _FUSED[module]
            parts.setdefault(f"layers.{layer}.{fused}.{kind}", {})[index] = tensor
            return None
    raise ValueError(f"weights: unexpected tensor {name!r} for this Llama-family decoder")


def load_model(path: str | os.PathLike, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> tuple[Transformer, ModelConfig]:
    """Load an HF-format directory (config.json + safetensors) into a Transformer in eval mode."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"path: no config.json in {path}")
    cfg = ModelConfig.from_hf(json.loads(config_file.read_text()))
    state = map_hf_state_dict(_iter_tensors(path), cfg, device=device, dtype=dtype)
    with torch.device("meta"):
        model = Transformer(cfg)
    missing = set(model.state_dict()) - set(state)
    unexpected = set(state) - set(model.state_dict())
    if missing or unexpected:
        raise ValueError(f"weights: missing {sorted(missing)[:4]}, unexpected "
                         f"{sorted(unexpected)[:4]} in {path}")
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    return model.eval(), cfg


def random_model(cfg: ModelConfig, seed: int = 0, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, std: float = 0.02) -> Transformer:
    """A Transformer with seeded random weights (no transformers involved), in eval mode."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.device("meta"):
        model = Transformer(cfg)
    state = {name: _random_param(name, tuple(p.shape), gen, std).to(device=device, dtype=dtype)
             for name, p in model.state_dict().items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    return model.eval()


def _random_param(name: str, shape: tuple[int, ...], gen: torch.Generator,
                  std: float) -> torch.Tensor:
    noise = torch.randn(shape, generator=gen)
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * noise
    if name.endswith(".bias"):
        return 0.1 * noise
    return std * noise


# ---------------------------------------------------------------------------------------------
# Tiny random HF models (for tests of every runtime area)

_HF_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}
TINY_DEFAULTS: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    tie_word_embeddings=False, rms_norm_eps=1e-6, initializer_range=0.1)


def random_model_dir(out_dir: str | os.PathLike, cfg_overrides: dict[str, Any] | None = None,
                     seed: int = 0, model_type: str = "llama",
                     max_shard_size: str | None = None) -> Path:
    """Save a seeded tiny random HF model (config.json + safetensors) to out_dir; return it.

    cfg_overrides use HF config names (num_hidden_layers, rope_parameters, ...).  Matrices are
    drawn N(0, initializer_range) (default 0.1, so logits are far from uniform), norm weights
    1 + 0.1 N(0, 1) and biases 0.1 N(0, 1), so a wrong name mapping cannot go unnoticed.
    """
    import transformers
    check_choice("model_type", model_type, tuple(_HF_CLASSES))
    conf_cls, model_cls = (getattr(transformers, n) for n in _HF_CLASSES[model_type])
    kwargs = {**TINY_DEFAULTS, **(cfg_overrides or {})}
    if model_type == "qwen3" and "head_dim" not in kwargs:
        kwargs["head_dim"] = kwargs["hidden_size"] // kwargs["num_attention_heads"]
    config = conf_cls(**kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_(_random_param(name, tuple(p.shape), gen, config.initializer_range))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(out, safe_serialization=True, **extra)
    return out


# ---------------------------------------------------------------------------------------------
# GGUF -> HF safetensors, once

def is_complete_conversion(out_dir: str | os.PathLike) -> bool:
    """True when out_dir holds a finished convert_gguf output (marker written last)."""
    out = Path(out_dir)
    return (out / CONVERSION_MARKER).is_file() and (out / "config.json").is_file()


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Convert a GGUF file to an HF safetensors directory (model + tokenizer) once; return it.

    Skips the work when out_dir already holds a complete conversion.  Writes into a temporary
    sibling directory and renames it into place, so out_dir is either absent or complete.
    """
    gguf_path, out = Path(gguf_path), Path(out_dir)
    if is_complete_conversion(out):
        return out
    if not gguf_path.is_file():
        raise FileNotFoundError(f"gguf_path: no such file: {gguf_path}")
    if out.exists():
        raise ValueError(f"out_dir: {out} exists but is not a complete conversion; "
                         "remove it or choose another directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _convert_into(gguf_path, tmp)
        try:
            os.rename(tmp, out)
        except OSError:
            if not is_complete_conversion(out):   # lost a race to an incomplete dir: report
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _convert_into(gguf_path: Path, tmp: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src, name = str(gguf_path.parent), gguf_path.name
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    _detach_gguf_quantizer(model)
    model.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(src, gguf_file=name).save_pretrained(tmp)
    marker = {"source": str(gguf_path.resolve()), "source_bytes": gguf_path.stat().st_size,
              "model_type": model.config.model_type}
    (tmp / CONVERSION_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    umask = os.umask(0)
    os.umask(umask)
    for file in tmp.iterdir():                          # mkdtemp and some writers use 0600
        file.chmod(0o644 & ~umask)
    tmp.chmod(0o755 & ~umask)


def _detach_gguf_quantizer(model: Any) -> None:
    """transformers (5.x) keeps a GGUF quantizer on the model and refuses to save it, even when
    it dequantised every weight to a dense nn.Linear (no GGUF kernels installed).  Check the
    weights are dense, then drop the quantizer so save_pretrained writes plain safetensors."""
    packed = sorted({type(m).__name__ for m in model.modules()
                     if "gguf" in type(m).__name__.lower()})
    if packed:
        raise ValueError(f"gguf_path: transformers kept packed GGUF modules {packed}; "
                         "cannot write dense safetensors")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
