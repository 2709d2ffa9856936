"""The target's catalog context length (``max_model_len`` in sim/costs/models.toml) is the
default refusal limit of a trace file's requests: a longer request is refused with the one-line
count warning, an explicit ``--max-model-len`` overrides it, and a model without a catalog
length refuses nothing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from psdlab.cli import main
from psdlab.sim.model_specs import CostSpec
from psdlab.sim.sim_config import config_from_dict

_CONFIG = """seed = 0
[server]
mode = "ar"
m = 4
[target]
cost = {{ name = "gpu", model = "{model}", hardware = "a100-80gb", tp = {tp}, dtype = "fp16", \
engine = "ideal" }}
[workload]
name = "offline"
"""


def _files(tmp_path: Path, model: str, tp: int = 1) -> tuple[str, str]:
    cfg = tmp_path / "c.toml"
    cfg.write_text(_CONFIG.format(model=model, tp=tp))
    trace = tmp_path / "m.jsonl"
    rows = [(0, 10, 5), (500, 3000, 5), (900, 30, 3)]      # the second: 3005 tokens
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n,
                                         "output_length": m, "hash_ids": [1]}) + "\n"
                             for t, n, m in rows))
    return str(cfg), str(trace)


def _requests(tmp_path: Path) -> int:
    from psdlab.analysis.trace import read_trace
    return len(read_trace(str(tmp_path / "out.jsonl")).requests)


def _run(tmp_path: Path, cfg: str, trace: str, *extra: str) -> int:
    return main(["simulate", cfg, "--workload", trace, "--trace", str(tmp_path / "out.jsonl"),
                 *extra])


def test_the_catalog_length_refuses_longer_requests_with_one_warning(tmp_path, capsys):
    cfg, trace = _files(tmp_path, "vicuna-13b", tp=2)          # max_model_len = 2048
    assert _run(tmp_path, cfg, trace) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if "max_model_len" in x]
    assert len(lines) == 1, lines
    assert "1 of 3 requests are longer than max_model_len=2048" in lines[0]
    assert "refused, as vLLM refuses them" in lines[0]
    assert _requests(tmp_path) == 2


def test_an_explicit_max_model_len_overrides_the_catalog(tmp_path, capsys):
    cfg, trace = _files(tmp_path, "vicuna-13b", tp=2)
    assert _run(tmp_path, cfg, trace, "--max-model-len", "4096") == 0
    assert "max_model_len" not in capsys.readouterr().err
    assert _requests(tmp_path) == 3


def test_a_model_without_a_catalog_length_refuses_nothing(tmp_path, capsys):
    cfg, trace = _files(tmp_path, "llama-2-7b")
    assert _run(tmp_path, cfg, trace) == 0
    assert "max_model_len" not in capsys.readouterr().err
    assert _requests(tmp_path) == 3


@pytest.mark.parametrize("cost, length", [
    ({"name": "gpu", "model": "vicuna-13b"}, 2048),
    ({"name": "roofline", "model": "Qwen/Qwen3-8B"}, 40960),      # by Hugging Face id
    ({"name": "gpu", "model": "qwen3-32b"}, 40960),               # NeMo's Qwen3Config
    ({"name": "gpu", "model": "llama-2-7b"}, None),               # no cited length
    ({"name": "affine", "model": "vicuna-13b"}, None),            # not a catalog cost model
    ({"name": "gpu", "model": {"layers": 2}}, None)])             # inline model
def test_catalog_max_model_len(cost, length):
    assert CostSpec.unchecked(cost, "cost").max_model_len == length


def test_the_specs_are_parsed_once_and_read_as_the_tables_written():
    raw = {"server": {"mode": "sd", "k": 2}, "acceptance": {"name": "geometric", "alpha": 0.7},
           "target": {"cost": {"name": "constant", "time": 0.02}},
           "drafter": {"cost": {"name": "constant", "time": 0.002}},
           "workload": {"name": "poisson", "rate": 2.0}}
    cfg = config_from_dict(raw)
    assert cfg.workload == raw["workload"] and dict(cfg.acceptance) == raw["acceptance"]
    assert repr(cfg.target.cost) == repr(raw["target"]["cost"])
    again = cfg.replace(workload={"name": "poisson", "rate": 3.0})
    assert again.acceptance is cfg.acceptance and again.target is cfg.target
    assert again.acceptance_spec.model() is cfg.acceptance_spec.model()
    assert again.workload_spec.rate == 3.0
    with pytest.raises(ValueError, match=r"^workload.rate: missing"):
        cfg.replace(workload={"name": "poisson"})
