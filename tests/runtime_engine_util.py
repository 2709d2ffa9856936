"""Helpers shared by the runtime engine tests: tiny random models and reference outputs."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

VOCAB = 96

#: worker processes pin the drafter to core 0 and the target to core 1
needs_two_cores = pytest.mark.skipif(not {0, 1} <= set(os.sched_getaffinity(0)),
                                     reason="needs CPU cores 0 and 1 for the worker processes")


def tiny_pair(root: Path, vocab: int = VOCAB) -> dict[str, Path]:
    """A tiny random target, a different random drafter with the same vocabulary, and a
    drafter that is the target with noise added (so drafts are partly accepted)."""
    from psdlab.runtime.weights import random_model_dir
    target = random_model_dir(root / "target", {"vocab_size": vocab, "max_position_embeddings":
                                                256}, seed=11)
    other = random_model_dir(root / "other", {"vocab_size": vocab, "num_hidden_layers": 1,
                                              "max_position_embeddings": 256}, seed=12)
    noisy = perturbed_copy(target, root / "noisy", scale=0.01, seed=13)
    return {"target": target, "other": other, "noisy": noisy, "same": target}


def shared_pair(tmp_path_factory) -> dict[str, Path]:
    """`tiny_pair` built once per pytest session (every runtime test module reuses it)."""
    root = tmp_path_factory.getbasetemp() / "runtime_tiny_pair"
    done = root / "done"
    if not done.exists():
        tiny_pair(root)
        done.write_text("ok")
    return {"target": root / "target", "other": root / "other", "noisy": root / "noisy",
            "same": root / "target"}


def perturbed_copy(src: Path, dst: Path, scale: float, seed: int) -> Path:
    from safetensors.torch import load_file, save_file
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.json", dst / "config.json")
    gen = torch.Generator().manual_seed(seed)
    for f in sorted(src.glob("*.safetensors")):
        tensors = load_file(str(f))
        noisy = {k: (v + scale * torch.randn(v.shape, generator=gen)).contiguous()
                 for k, v in sorted(tensors.items())}
        save_file(noisy, str(dst / f.name), metadata={"format": "pt"})
    return dst


def hf_greedy(model_dir: Path, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """transformers' own greedy generate, one prompt at a time (no padding), EOS ignored."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], dtype=torch.long)
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                 min_new_tokens=0, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
            outs.append(gen[0, len(p):].tolist())
    return outs


def prompts(n: int, seed: int, lo: int = 1, hi: int = 40, vocab: int = VOCAB) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi + 1, (n,), generator=gen).tolist()
    return [torch.randint(0, vocab, (L,), generator=gen).tolist() for L in lens]


def write_prompt_ids(path: Path, rows: list[list[int]]) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "prompt_ids": r}) + "\n"
                            for i, r in enumerate(rows)))
    return path
