"""Models from their config.json (sim/costs/hf_config.py) and GPUs from their datasheets
(sim/costs/hardware.toml): a config.json gives the same shape and price as the catalog entry
of the same model, MoE passes read the experts a batch touches, quantised configs read fewer
weight bytes, and bad files or GPU tables fail with one line naming the field."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.cli import main
from psdlab.sim.costs import get_hardware, get_model, hardware_catalog, make_cost_model
from psdlab.sim.costs.catalog import model_catalog
from psdlab.sim.costs.check_report import one_pass
from psdlab.sim.costs.gpu import engine_presets
from psdlab.sim.costs.public_check import borrowed_efficiencies
from psdlab.sim.costs.roofline import expected_experts_touched
from psdlab.sim.model_specs import CostSpec

DATA = Path(__file__).parent / "data" / "hf_configs"
CATALOGUED = ("llama-3.2-1b", "llama-3.2-3b", "qwen3-30b-a3b", "mixtral-8x7b")
#: what a config.json cannot say (the catalog's provenance and advertised sizes)
NOT_IN_CONFIG = {"name", "hf_id", "source", "params_b", "active_params_b"}


def shape(m) -> dict:
    return {k: v for k, v in dataclasses.asdict(m).items() if k not in NOT_IN_CONFIG}


def config(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def write(tmp_path: Path, cfg: dict, name: str = "m.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def gpu(model, hardware="h100-sxm", engine="vllm-cudagraph", **kw):
    return make_cost_model({"name": "gpu", "model": model, "hardware": hardware,
                            "engine": engine, **kw})


# ---------------------------------------------------------------------------- config = catalog

@pytest.mark.parametrize("name", CATALOGUED)
def test_config_json_gives_the_catalog_entry_and_its_price(name):
    path = str(DATA / f"{name}.json")
    from_file, entry = get_model(path), model_catalog()[name]
    assert shape(from_file) == shape(entry)
    assert from_file.name == name and from_file.total_params() == entry.total_params()
    s, t, c = np.array([1, 16, 64]), np.array([1, 80, 4096]), np.array([0, 6880, 10**5])
    hw = "h200"
    assert np.array_equal(gpu(path, hw).forward_time(s, t, c), gpu(name, hw).forward_time(s, t, c))
    assert CostSpec.unchecked({"name": "gpu", "model": path}, "cost").max_model_len \
        == entry.max_model_len


def test_a_folder_holding_config_json_is_the_same_model(tmp_path):
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "qwen3-30b-a3b.json").read_text())
    m = get_model(str(folder))
    assert m.name == "Qwen3-30B-A3B" and shape(m) == shape(model_catalog()["qwen3-30b-a3b"])


def test_catalog_names_win_over_paths_and_unknown_names_still_fail():
    assert get_model("Qwen/Qwen3-8B") is model_catalog()["qwen3-8b"]
    with pytest.raises(ValueError, match=r"^cost\.model: unknown 'qwen9'"):
        get_model("qwen9")


def test_head_dim_kv_heads_tied_and_dtype_defaults(tmp_path):
    cfg = config("mixtral-8x7b")            # no head_dim: hidden / heads
    assert get_model(str(DATA / "mixtral-8x7b.json")).head_dim == 4096 // 32
    dense = {k: v for k, v in config("llama-3.2-1b").items()
             if k not in ("num_key_value_heads", "tie_word_embeddings", "torch_dtype")}
    m = get_model(write(tmp_path, dense))
    assert m.kv_heads == m.heads == 32 and not m.tied_embeddings and m.weight_dtype == ""
    gemma = get_model(write(tmp_path, {**dense, "model_type": "gemma", "torch_dtype": "float16"},
                            "g.json"))
    assert gemma.tied_embeddings and gemma.weight_dtype == "fp16"
    nested = get_model(write(tmp_path, {"model_type": "gemma3", "text_config": cfg}, "n.json"))
    assert shape(nested) == shape(model_catalog()["mixtral-8x7b"])


# ---------------------------------------------------------------------------- MoE

@settings(deadline=None, max_examples=200)
@given(e=st.integers(1, 512), data=st.data())
def test_touched_experts_properties(e, data):
    k = data.draw(st.integers(1, e))
    t = data.draw(st.integers(1, 100_000))
    dt = data.draw(st.integers(1, 10_000))
    touched = expected_experts_touched(e, k, float(t))
    assert expected_experts_touched(e, k, 1.0) == pytest.approx(k)        # one token: its K
    assert k - 1e-9 <= touched <= e + 1e-9                                  # never above E
    assert expected_experts_touched(e, k, float(t + dt)) >= touched - 1e-9  # monotone in T
    assert expected_experts_touched(e, k, 0.0) == 0.0
    vec = expected_experts_touched(e, k, np.array([1.0, float(t)]))
    assert vec[0] == pytest.approx(k) and vec[1] == pytest.approx(touched)


def test_moe_pass_reads_the_experts_a_batch_touches():
    m = model_catalog()["qwen3-30b-a3b"]
    cost = make_cost_model({"name": "roofline", "model": "qwen3-30b-a3b", "hardware": "h100"})
    bw = get_hardware("h100-sxm").memory_bw
    expert_bytes = m.layers * m.expert_params * 2.0 / bw            # one expert in every layer
    mem = {t: cost.breakdown(t, t, 0)["memory"] for t in (1, 2, 16, 4096)}
    per_tok = cost._c["mem_tok"]
    for t in (2, 16):   # the memory added beyond one token: the newly touched experts + tokens
        extra = expected_experts_touched(128, 8, float(t)) - 8
        assert mem[t] - mem[1] == pytest.approx(extra * expert_bytes + (t - 1) * per_tok)
    # one token reads the weights it touches (the embedding table only by its row)
    assert mem[1] == pytest.approx(2.0 * (m.active_params() - m.embedding_params) / bw, rel=0.05)
    assert mem[4096] > 2.0 * m.total_params() / bw                  # all 128 experts read


def test_shared_experts_and_dense_layers_are_read_every_pass(tmp_path):
    base = {**config("qwen3-30b-a3b"), "num_hidden_layers": 8}
    plain = get_model(write(tmp_path, base, "plain.json"))
    deepseek_style = {**base, "first_k_dense_replace": 2, "n_shared_experts": 2}
    mixed = get_model(write(tmp_path, deepseek_style, "mixed.json"))
    assert (mixed.dense_layers, mixed.moe_layers, mixed.shared_expert_intermediate) == (2, 6, 1536)
    qwen2_style = {**base, "decoder_sparse_step": 2, "mlp_only_layers": [1],
                   "shared_expert_intermediate_size": 1536}
    q2 = get_model(write(tmp_path, qwen2_style, "q2.json"))
    assert q2.moe_layers == 3 and q2.dense_layers == 5       # layers 3, 5, 7 are MoE
    h = 2048
    dense_mlp, expert, shared = 3 * h * 6144, 3 * h * 768, 3 * h * 1536
    assert mixed.total_params() - plain.total_params() == (
        2 * dense_mlp - 2 * (128 * expert + 128 * h) + 6 * shared)
    one = {}
    for tag, path in (("plain", "plain.json"), ("mixed", "mixed.json")):
        one[tag] = make_cost_model({"name": "roofline", "model": str(tmp_path / path),
                                    "hardware": "h100"}).breakdown(1, 1, 0)["memory"]
    bw = get_hardware("h100").memory_bw
    weights = 2.0 * (2 * dense_mlp - 2 * (8 * expert + 128 * h) + 6 * shared) / bw
    assert one["mixed"] - one["plain"] == pytest.approx(weights, rel=0.02)   # + activations


# ---------------------------------------------------------------------------- quantised

def test_a_quantised_config_reads_fewer_weight_bytes():
    awq, bf16 = str(DATA / "mixtral-8x7b-awq.json"), str(DATA / "mixtral-8x7b.json")
    assert get_model(awq).weight_dtype == "w4a16"
    q, full = gpu(awq, "h100", tp=2), gpu(bf16, "h100", tp=2)
    assert q.roofline.dtype == "w4a16" and full.roofline.dtype == "bf16"
    assert q.roofline.weight_bytes_per_gpu() == pytest.approx(
        full.roofline.weight_bytes_per_gpu() / 4)
    read_q = q.roofline.breakdown(1, 1, 0)["memory"]             # a decode pass's bytes
    read_full = full.roofline.breakdown(1, 1, 0)["memory"]
    assert 0.25 * read_full < read_q < 0.3 * read_full
    assert q.forward_time(64, 64, 64 * 500) < full.forward_time(64, 64, 64 * 500)
    # an explicit dtype is a what-if over the config's format
    assert gpu(awq, "h100", tp=2, dtype="bf16").forward_time(1, 1, 0) == pytest.approx(
        full.forward_time(1, 1, 0))
    out = one_pass(model=awq, hardware="h100", tp=2, dtype=None, engine="vllm-cudagraph",
                   link=None, seqs=1, tokens=1, context=0)
    assert out.dtype == "w4a16"


@pytest.mark.parametrize("quant, dtype", [
    ({"quant_method": "gptq", "bits": 8}, "w8a16"), ({"quant_method": "GPTQ", "bits": 4}, "w4a16"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8")])
def test_quantisation_formats(tmp_path, quant, dtype):
    m = get_model(write(tmp_path, {**config("llama-3.2-1b"), "quantization_config": quant}))
    assert m.weight_dtype == dtype
    with pytest.raises(ValueError, match=r"^cost\.dtype: a100-80gb has no fp8") if dtype == "fp8" \
            else _nothing():
        gpu(str(tmp_path / "m.json"), "a100-80gb")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------- bad config.json

def _drop(name, key):
    cfg = config(name)
    del cfg[key]
    return cfg


@pytest.mark.parametrize("cfg, field", [
    (_drop("llama-3.2-1b", "num_hidden_layers"), "num_hidden_layers"),
    (_drop("llama-3.2-1b", "vocab_size"), "vocab_size"),
    (_drop("qwen3-30b-a3b", "num_experts_per_tok"), "num_experts_per_tok"),
    ({**config("llama-3.2-1b"), "hidden_size": 0}, "hidden_size"),
    ({**config("llama-3.2-1b"), "num_attention_heads": -4}, "num_attention_heads"),
    ({**config("llama-3.2-1b"), "intermediate_size": "8192"}, "intermediate_size"),
    ({**config("llama-3.2-1b"), "head_dim": 64.5}, "head_dim"),
    ({**config("llama-3.2-1b"), "num_key_value_heads": 5}, "num_key_value_heads"),
    ({**config("llama-3.2-1b"), "tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ({**config("llama-3.2-1b"), "torch_dtype": "int3"}, "torch_dtype"),
    ({**config("qwen3-30b-a3b"), "num_experts_per_tok": 129}, "num_experts_per_tok"),
    ({**config("qwen3-30b-a3b"), "mlp_only_layers": [48]}, "mlp_only_layers"),
    ({**config("llama-3.2-1b"), "quantization_config": {"quant_method": "bitsandbytes"}},
     "quantization_config.quant_method"),
    ({**config("llama-3.2-1b"), "quantization_config": {"quant_method": "awq", "bits": 3}},
     "quantization_config.bits"),
    ({**config("llama-3.2-1b"), "kv_lora_rank": 512}, "kv_lora_rank"),
])
def test_bad_config_json_names_the_field(tmp_path, cfg, field):
    path = write(tmp_path, cfg)
    with pytest.raises(ValueError) as err:
        get_model(path)
    msg = str(err.value)
    assert msg.startswith(f"cost.model.{field}: ") and "\n" not in msg and path in msg


def test_unreadable_config_json_is_one_line(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    for path, why in ((str(bad), "is not JSON"), (str(tmp_path / "absent.json"), "no config")):
        with pytest.raises(ValueError, match=rf"^cost\.model: .*{why}") as err:
            get_model(path)
        assert "\n" not in str(err.value)


def test_cost_command_reads_a_config_json_and_names_a_bad_field(tmp_path, capsys):
    args = ["cost", "--hardware", "h100", "--engine", "vllm-eager", "--seqs", "16", "--tokens",
            "16", "--context", "4096"]
    assert main(args + ["--model", str(DATA / "qwen3-30b-a3b.json")]) == 0
    assert capsys.readouterr().out.startswith("qwen3-30b-a3b on 1x h100-sxm (bf16, vllm-eager)")
    path = write(tmp_path, _drop("llama-3.2-1b", "hidden_size"))
    assert main(args + ["--model", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: --model.hidden_size: missing" in err


# ---------------------------------------------------------------------------- GPUs

ADDED = ("b200", "h20", "l40s", "l4", "a10g", "mi300x", "rtx-4090", "rtx-6000-ada")


@pytest.mark.parametrize("name", ADDED)
def test_added_gpus_have_sources_and_price_like_their_inline_table(name):
    hw = hardware_catalog()[name]
    assert len(hw.source) > 40 and "http" in hw.source
    table = {f.name: getattr(hw, f.name) for f in dataclasses.fields(hw)
             if f.name not in ("name", "aliases") and getattr(hw, f.name) is not None}
    inline = gpu("llama-3.2-1b", table)
    assert inline.roofline.hardware == dataclasses.replace(hw, name="custom", aliases=())
    assert inline.forward_time(16, 80, 6880) == gpu("llama-3.2-1b", name).forward_time(16, 80, 6880)


def test_datasheet_orderings_the_entries_must_keep():
    hw = hardware_catalog()
    bandwidths = [hw[n].memory_bw for n in ("b200", "h200", "h20", "h100-sxm")]
    assert bandwidths == sorted(bandwidths, reverse=True) and len(set(bandwidths)) == 4
    assert hw["h20"].peak_tflops_bf16 < 0.2 * hw["h100-sxm"].peak_tflops_bf16     # export-capped
    assert hw["l40s"].peak_tflops_bf16 == pytest.approx(2 * hw["l40"].peak_tflops_bf16, rel=0.01)
    assert hw["l40s"].memory_bw_gbs == hw["l40"].memory_bw_gbs
    assert hw["a10g"].peak_tflops_fp8 is None                             # Ampere: no fp8
    pcie = ("l4", "l40s", "a10g", "rtx-4090", "rtx-6000-ada")
    assert {hw[n].interconnect for n in pcie} == {"pcie"}
    assert get_hardware("H100") is hw["h100-sxm"] and get_hardware("4090") is hw["rtx-4090"]


@pytest.mark.parametrize("change, field, why", [
    ({"memory_bw_gbs": None}, "memory_bw_gbs", "missing"),
    ({"memory_bw_gbs": 0}, "memory_bw_gbs", "must be > 0"),
    ({"memory_gb": -48}, "memory_gb", "must be > 0"),
    ({"peak_tflops_bf16": "fast"}, "peak_tflops_bf16", "expected a number"),
    ({"peak_tflops_fp8": 0}, "peak_tflops_fp8", "must be > 0"),
    ({"hbm": 3}, "hbm", "unknown field"),
])
def test_bad_gpu_table_names_the_field(change, field, why):
    table = {"memory_gb": 48, "memory_bw_gbs": 864, "interconnect_bw_gbs": 64,
             "peak_tflops_bf16": 362.05, "peak_tflops_fp16": 362.05, "interconnect": "pcie"}
    table.update(change)
    table = {k: v for k, v in table.items() if v is not None}
    with pytest.raises(ValueError) as err:
        gpu("llama-3.2-1b", table)
    msg = str(err.value)
    assert msg.startswith(f"cost.hardware.{field}: {why}") and "\n" not in msg


def test_a_part_without_a_preset_fit_says_whose_efficiencies_it_borrows(capsys):
    presets = engine_presets()
    assert borrowed_efficiencies(presets["vllm-cudagraph"], "h100-sxm") == ""     # fitted there
    note = borrowed_efficiencies(presets["vllm-cudagraph"], "b200")
    assert note == ("no vllm-cudagraph fit on b200: its efficiencies are borrowed from its fit "
                    "on h100-sxm")
    assert "from its fit on l40" in borrowed_efficiencies(presets["vllm-eager"], "mi300x")
    args = ["cost", "--model", "llama-3.1-8b", "--seqs", "1", "--tokens", "1", "--context", "0",
            "--engine", "vllm-cudagraph"]
    assert main(args + ["--hardware", "b200"]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"({note})")
    assert main(args + ["--hardware", "h100-sxm", "--json"]) == 0
    assert "borrowed" not in json.loads(capsys.readouterr().out)           # fitted: as before
    assert main(args + ["--hardware", "l4", "--json"]) == 0
    assert "h100-sxm" in json.loads(capsys.readouterr().out)["borrowed"]


def test_fixtures_are_real_format_config_files():
    for name in os.listdir(DATA):
        if name.endswith(".json"):
            cfg = json.loads((DATA / name).read_text())
            assert cfg["architectures"][0].endswith("ForCausalLM") and "model_type" in cfg


# ---------------------------------------------------------------------------- config tables

_SIM = """seed = 0
requests = 6
[server]
mode = "sd"
k = 2
m = 4
[target]
name = "qwen3-30b-a3b"
cost = {{ name = "gpu", model = "{target}", hardware = "h100", engine = "vllm-cudagraph" }}
[drafter]
name = "llama-3.2-1b"
cost = {{ name = "gpu", model = "{drafter}", hardware = "l4", engine = "vllm-cudagraph" }}
[acceptance]
name = "geometric"
alpha = 0.7
[workload]
name = "offline"
prompt = {{ name = "fixed", value = 64 }}
output = {{ name = "fixed", value = 16 }}
"""


def test_a_config_table_names_config_json_files_relative_to_itself(tmp_path, monkeypatch):
    from psdlab.sim.sim_config import load_config
    (tmp_path / "qwen3-30b-a3b.json").write_text((DATA / "qwen3-30b-a3b.json").read_text())
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text((DATA / "llama-3.2-1b.json").read_text())
    cfg_path = tmp_path / "sim.toml"
    cfg_path.write_text(_SIM.format(target="qwen3-30b-a3b.json", drafter="draft"))
    monkeypatch.chdir(tmp_path.parent)                  # not the config's folder
    cfg = load_config(cfg_path)
    assert cfg.target.cost_spec.max_model_len == 40960
    by_name = load_config_text(tmp_path, _SIM.format(target="qwen3-30b-a3b",
                                                     drafter="llama-3.2-1b"))
    for role in ("target", "drafter"):
        a, b = getattr(cfg, role).cost_spec.model(), getattr(by_name, role).cost_spec.model()
        assert a.forward_time(4, 12, 400) == b.forward_time(4, 12, 400)
    assert main(["simulate", str(cfg_path), "--trace", str(tmp_path / "t.jsonl")]) == 0


def load_config_text(tmp_path: Path, text: str):
    from psdlab.sim.sim_config import load_config
    path = tmp_path / "by_name.toml"
    path.write_text(text)
    return load_config(path)
