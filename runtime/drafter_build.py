"""Drafter construction: the target's first layers plus a few trained layers, as a plain Llama.

A drafter is described by a small JSON spec (``runtime/data/drafter.json``) and a safetensors file
of the tensors it adds beyond the target's (``runtime/data/drafter.safetensors``, fp16). The
drafter is an ordinary ``LlamaForCausalLM``: its layers are the target's layers listed in
``kept_layers`` (renumbered 0..L-1), followed by ``new_layers`` layers of the target's own shape
whose weights come from the committed file; embeddings, final norm and tied LM head are the
target's unless the file overrides them. So any Llama loader (ours or transformers) reads it.

An *early exit* of the target at depth L (``early_exit_spec(L)``) is a spec with the target's
first L layers, no new layers and no weights file: it is built from the target's own weights
alone (first L layers + final norm + tied LM head), into a cache directory named by its depth.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psdlab.analysis.checks import check_int

if TYPE_CHECKING:
    import torch

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_SPEC = DATA_DIR / "drafter.json"
SPEC_FORMAT = "psdlab-drafter/1"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "generation_config.json")
DTYPES = ("float32", "float16", "bfloat16")
_LAYER_KEY = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class DrafterSpec:
    """Which target layers the drafter keeps, how many new layers follow, where their weights
    are."""

    kept_layers: tuple[int, ...]
    new_layers: int
    weights_file: str = "drafter.safetensors"
    name: str = "smollm2-drafter"
    init_from: tuple[int, ...] = ()  # target layers the new layers started from (training only)
    sha256: str = ""
    dtype: str = "float32"           # the dtype the runtime runs the drafter in by default
    info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.kept_layers:
            raise ValueError("kept_layers: must list at least one target layer")
        for i in self.kept_layers:
            check_int("kept_layers[]", i, minimum=0)
        check_int("new_layers", self.new_layers, minimum=0, maximum=8)
        if self.new_layers and not self.weights_file:
            raise ValueError("weights_file: a spec with new layers needs a weights file")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    @property
    def num_layers(self) -> int:
        return len(self.kept_layers) + self.new_layers

    @property
    def needs_weights(self) -> bool:
        """False for a spec built from the target's weights alone (an early exit)."""
        return bool(self.weights_file)

    def to_json(self) -> dict[str, Any]:
        return {"format": SPEC_FORMAT, "name": self.name, "kept_layers": list(self.kept_layers),
                "new_layers": self.new_layers, "init_from": list(self.init_from),
                "weights_file": self.weights_file, "sha256": self.sha256, "dtype": self.dtype,
                "info": self.info}


def load_drafter_spec(path: str | Path | None = None) -> DrafterSpec:
    """Read a drafter spec JSON (default: the committed one)."""
    file = Path(path) if path is not None else DEFAULT_SPEC
    if not file.is_file():
        raise FileNotFoundError(f"drafter spec not found: {file} (run scripts/train_drafter.py)")
    obj = json.loads(file.read_text())
    if obj.get("format") != SPEC_FORMAT:
        raise ValueError(f"{file}: field 'format' must be {SPEC_FORMAT!r}, "
                         f"got {obj.get('format')!r}")
    return DrafterSpec(kept_layers=tuple(obj["kept_layers"]), new_layers=int(obj["new_layers"]),
                       weights_file=obj.get("weights_file", "drafter.safetensors"),
                       name=obj.get("name", "smollm2-drafter"),
                       init_from=tuple(obj.get("init_from", ())), sha256=obj.get("sha256", ""),
                       dtype=obj.get("dtype", "float32"), info=obj.get("info", {}))


def save_drafter_spec(spec: DrafterSpec, path: str | Path) -> None:
    Path(path).write_text(json.dumps(spec.to_json(), indent=2) + "\n")


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def early_exit_spec(depth: int, dtype: str = "bfloat16",
                    n_target: int | None = None) -> DrafterSpec:
    """The target's first ``depth`` layers + final norm + tied LM head, nothing trained."""
    check_int("depth", depth, minimum=1, maximum=n_target)
    return DrafterSpec(kept_layers=tuple(range(depth)), new_layers=0, weights_file="",
                       name=f"smollm2-exit-{depth}", dtype=dtype,
                       info={"early_exit": depth})


def drafter_dir_name(spec: DrafterSpec, target_key: str = "") -> str:
    """Cache directory name; changes when the committed weights change (or, for a spec
    without weights, when its layers, its dtype or the target, ``target_key``, change)."""
    if not spec.needs_weights:
        key = json.dumps([list(spec.kept_layers), spec.dtype, target_key]).encode()
        return f"{spec.name}-{hashlib.sha256(key).hexdigest()[:12]}"
    return f"{spec.name}-{(spec.sha256 or 'nohash')[:12]}"


def drafter_config(target_cfg: dict[str, Any], spec: DrafterSpec) -> dict[str, Any]:
    """The target's config with the drafter's layer count (plus a note of where it came from)."""
    n_target = int(target_cfg["num_hidden_layers"])
    bad = [i for i in spec.kept_layers if i >= n_target]
    if bad:
        raise ValueError(f"kept_layers: must be in [0, {n_target - 1}], got {bad}")
    cfg = dict(target_cfg)
    cfg["num_hidden_layers"] = spec.num_layers
    if "layer_types" in cfg and isinstance(cfg["layer_types"], list):
        cfg["layer_types"] = [cfg["layer_types"][0]] * spec.num_layers
    cfg["psdlab_drafter"] = {"name": spec.name, "kept_layers": list(spec.kept_layers),
                             "new_layers": spec.new_layers, "sha256": spec.sha256,
                             "dtype": spec.dtype}
    return cfg


def preferred_dtype(model_dir: str | Path | None) -> str | None:
    """The dtype a drafter directory asks to run in (``psdlab_drafter.dtype``), if any."""
    if model_dir is None:
        return None
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return None
    info = json.loads(config.read_text()).get("psdlab_drafter", {})
    dtype = info.get("dtype") if isinstance(info, dict) else None
    return dtype if dtype in DTYPES else None


def native_bf16_on_cpu() -> bool:
    """True when this CPU runs bfloat16 matrix products natively (oneDNN's check: AVX512-BF16
    or AMX); without it torch emulates them, several times slower than float32."""
    import torch
    ops = torch.ops.mkldnn
    return bool(torch.backends.mkldnn.is_available()
                and hasattr(ops, "_is_mkldnn_bf16_supported") and ops._is_mkldnn_bf16_supported())


def runnable_dtype(asked: str, device: str = "cpu") -> str:
    """The dtype to run a model in that asks for ``asked``: bfloat16 on a CPU without native
    bfloat16 runs as float32 instead (same weights, wider arithmetic; greedy SD/PSD output stays
    the target's), anything else as asked."""
    if asked == "bfloat16" and device.startswith("cpu") and not native_bf16_on_cpu():
        return "float32"
    return asked


def drafter_state_from_target(target_state: dict[str, torch.Tensor], spec: DrafterSpec,
                              extra: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drafter tensors: renamed kept target layers, shared tensors, then ``extra`` on top."""
    remap = {src: dst for dst, src in enumerate(spec.kept_layers)}
    out: dict[str, torch.Tensor] = {}
    for key, value in target_state.items():
        match = _LAYER_KEY.match(key)
        if match is None:
            out[key] = value
        elif int(match.group(1)) in remap:
            out[f"model.layers.{remap[int(match.group(1))]}.{match.group(2)}"] = value
    for key, value in extra.items():
        match = _LAYER_KEY.match(key)
        if match is not None and int(match.group(1)) >= spec.num_layers:
            raise ValueError(f"{spec.weights_file}: tensor {key} is beyond the drafter's "
                             f"{spec.num_layers} layers")
        if match is not None:
            ref = target_state.get(f"model.layers.0.{match.group(2)}")
            value = pad_slim_mlp(key, value, tuple(ref.shape) if ref is not None else None,
                                 spec.weights_file)
        out[key] = value
    missing = [f"model.layers.{i}." for i in range(spec.num_layers)
               if not any(k.startswith(f"model.layers.{i}.") for k in out)]
    if missing:
        raise ValueError(f"{spec.weights_file}: no weights for drafter layers {missing}")
    return out


#: MLP projections of a new layer that may be narrower than the target's (slim layers):
#: the axis along the intermediate (neuron) dimension
_SLIM_AXES = {"mlp.gate_proj.weight": 0, "mlp.up_proj.weight": 0, "mlp.down_proj.weight": 1}


def pad_slim_mlp(key: str, value: torch.Tensor, shape: tuple[int, ...] | None,
                 source: str) -> torch.Tensor:
    """A new layer's tensor at the target layer's shape: MLP projections stored with fewer
    neurons (a slim layer) get zero neurons appended, which leaves the layer's function
    unchanged (a zero gate/up row gives a zero activation; a zero down column adds nothing).
    Any other shape mismatch is an error."""
    if shape is None or tuple(value.shape) == shape:
        return value
    suffix = key.split(".", 3)[3]
    axis = _SLIM_AXES.get(suffix)
    ok = (axis is not None and value.dim() == len(shape) and value.shape[axis] < shape[axis]
          and all(value.shape[d] == shape[d] for d in range(len(shape)) if d != axis))
    if not ok:
        raise ValueError(f"{source}: tensor {key} has shape {tuple(value.shape)}, "
                         f"the target's layers have {shape}")
    assert axis is not None                    # ok above
    import torch
    pad = list(shape)
    pad[axis] = shape[axis] - value.shape[axis]
    return torch.cat([value, value.new_zeros(pad)], dim=axis)


def slim_mlp_state(state: dict[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
    """Cut the MLP projections of layer tensors to their first ``width`` neurons (the inverse of
    `pad_slim_mlp` for a layer whose other neurons are zero)."""
    out = {}
    for key, value in state.items():
        match = _LAYER_KEY.match(key)
        axis = _SLIM_AXES.get(match.group(2)) if match is not None else None
        out[key] = value if axis is None else value.narrow(axis, 0, min(width, value.shape[axis]))
    return out


def _load_target_state(target_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(target_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {target_dir}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def build_drafter_dir(target_dir: str | Path, out_dir: str | Path, spec: DrafterSpec | None = None,
                      weights_path: str | Path | None = None) -> Path:
    """Write an HF-format drafter directory (config, fp32 safetensors, tokenizer files).
    A spec without a weights file (an early exit) reads nothing but the target."""
    import torch
    from safetensors.torch import load_file, save_file

    target_dir, out_dir = Path(target_dir), Path(out_dir)
    spec = spec or load_drafter_spec()
    target_cfg = json.loads((target_dir / "config.json").read_text())
    extra: dict[str, torch.Tensor] = {}
    if spec.needs_weights or weights_path is not None:
        weights = Path(weights_path) if weights_path is not None else DATA_DIR / spec.weights_file
        if not weights.is_file():
            raise FileNotFoundError(f"drafter weights not found: {weights} "
                                    "(run scripts/train_drafter.py)")
        if spec.sha256 and file_sha256(weights) != spec.sha256:
            raise ValueError(f"{weights}: sha256 does not match the drafter spec "
                             "(stale or corrupt file)")
        extra = {k: v.to(torch.float32) for k, v in load_file(str(weights)).items()}
    state = drafter_state_from_target(_load_target_state(target_dir), spec, extra)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(drafter_config(target_cfg, spec), indent=2)
                                         + "\n")
    for name in TOKENIZER_FILES:
        if (target_dir / name).is_file():
            shutil.copy2(target_dir / name, out_dir / name)
    return out_dir
