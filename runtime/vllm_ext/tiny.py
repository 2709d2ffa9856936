"""A tiny random Llama pair with a locally built tokenizer, for vLLM tests and CI (no downloads).

`tiny_pair(root)` writes ``root/target`` (2 layers) and ``root/draft`` (the target's weights
plus small noise, so drafts are partly accepted), each an HF directory that vLLM can load:
``config.json``, ``model.safetensors`` and a word-level tokenizer (``tokenizer.json``) over a
fixed vocabulary of ``VOCAB`` tokens.  Building takes a second and is cached per directory.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

VOCAB = 256
#: head_dim 64 (hidden 128, 2 heads): a size every vLLM CPU attention kernel supports
TINY_CONFIG = {"vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256,
               "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
               "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2,
               "pad_token_id": 0}
_SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]


def words() -> list[str]:
    """The tokenizer's vocabulary: 4 special tokens, then w4 .. w255."""
    return _SPECIAL + [f"w{i}" for i in range(len(_SPECIAL), VOCAB)]


def save_tokenizer(out: Path) -> None:
    """A whitespace word-level tokenizer over `words()`, saved as an HF fast tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(words())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.save_pretrained(str(out))


def _perturb(src: Path, dst: Path, scale: float, seed: int) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    gen = torch.Generator().manual_seed(seed)
    tensors = load_file(str(src / "model.safetensors"))
    noisy = {k: (v + scale * torch.randn(v.shape, generator=gen)).contiguous()
             for k, v in sorted(tensors.items())}
    save_file(noisy, str(dst / "model.safetensors"), metadata={"format": "pt"})


def _build(out: Path, seed: int, noise_from: Path | None) -> Path:
    from psdlab.runtime.weights import random_model_dir
    if (out / "tokenizer.json").is_file() and (out / "model.safetensors").is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if noise_from is None:
        random_model_dir(tmp, dict(TINY_CONFIG), seed=seed)
    else:
        tmp.mkdir(parents=True)
        shutil.copy(noise_from / "config.json", tmp / "config.json")
        _perturb(noise_from, tmp, scale=0.005, seed=seed)
    cfg = json.loads((tmp / "config.json").read_text())
    cfg.update({k: TINY_CONFIG[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_tokenizer(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def tiny_pair(root: str | Path, seed: int = 7) -> dict[str, str]:
    """Build (once) the tiny target and its noisy drafter under ``root``."""
    root = Path(root)
    target = _build(root / "target", seed, None)
    draft = _build(root / "draft", seed + 1, target)
    return {"target": str(target), "draft": str(draft)}


def tiny_prompts(n: int, length: int = 12, seed: int = 0) -> list[list[int]]:
    """``n`` seeded prompts of token ids (no special tokens)."""
    import random
    rng = random.Random(seed)
    return [[rng.randrange(len(_SPECIAL), VOCAB) for _ in range(length + (i % 3))]
            for i in range(n)]
