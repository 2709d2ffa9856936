"""The structural prior of a calibration from speculative runs
(``validation.serving_results.drafter_prior``): the drafter-to-target ratio from two Hugging Face
configs by the matmul-weight rule, and one-line errors for bad values (API and ``psdlab
calibrate``)."""
from __future__ import annotations

import json
import math

import pytest
from bench_synth import write_synth

from psdlab.cli import main
from psdlab.validation.serving_results.calibration import fit_from_bench
from psdlab.validation.serving_results.drafter_prior import (ratio_from_configs, resolve_ratio,
                                                             spec_from_hf_config)

SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
           "num_key_value_heads": 3, "head_dim": 64, "num_hidden_layers": 30,
           "vocab_size": 49152, "tie_word_embeddings": True, "model_type": "llama"}


def _config(folder, name, **over):
    path = folder / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**SMOLLM2, **over}))
    return str(path)


def test_the_ratio_counts_layers_and_the_lm_head_once(tmp_path):
    target = _config(tmp_path, "t")
    same = _config(tmp_path, "same")
    pruned = _config(tmp_path, "d", num_hidden_layers=18)
    assert ratio_from_configs(target, same) == pytest.approx(1.0)
    r = ratio_from_configs(target, str(tmp_path / "d"))       # a folder holding config.json
    assert 18 / 30 < r < 1.0                                   # the shared LM head
    assert r == pytest.approx(ratio_from_configs(target, pruned))
    # with a negligible head the ratio is the layer ratio
    t1 = _config(tmp_path, "t1", vocab_size=1)
    d1 = _config(tmp_path, "d1", vocab_size=1, num_hidden_layers=18)
    assert ratio_from_configs(t1, d1) == pytest.approx(18 / 30, rel=1e-3)
    # tying the embedding does not change the compute: the head is counted once either way
    untied = _config(tmp_path, "u", num_hidden_layers=18, tie_word_embeddings=False)
    assert ratio_from_configs(target, untied) == pytest.approx(r)
    assert spec_from_hf_config(target).kv_heads == 3


@pytest.mark.parametrize("value", [0.0, -0.5, 10.5, math.nan, math.inf])
def test_a_ratio_out_of_range_is_a_one_line_error(value):
    with pytest.raises(ValueError, match=r"^drafter_to_target_ratio: must be in \(0, 10\]"):
        resolve_ratio(value, None, None)


def test_configs_must_come_in_pairs_and_be_readable(tmp_path):
    target = _config(tmp_path, "t")
    with pytest.raises(ValueError, match="give both model configs"):
        resolve_ratio(None, target, None)
    with pytest.raises(ValueError, match="not both"):
        resolve_ratio(0.5, target, target)
    with pytest.raises(ValueError, match="cannot read the model config"):
        resolve_ratio(None, target, str(tmp_path / "missing.json"))
    bad = _config(tmp_path, "bad", num_hidden_layers="many")
    with pytest.raises(ValueError, match=r"bad/config.json: field 'num_hidden_layers'"):
        resolve_ratio(None, target, bad)
    assert resolve_ratio(None, None, None) is None


def test_a_prior_needs_a_speculative_run(tmp_path):
    ar = write_synth(tmp_path, "ar", "ar", 4.0, 10)
    with pytest.raises(ValueError, match="needs a speculative run"):
        fit_from_bench([str(ar)], bootstrap=2, drafter_to_target_ratio=0.5)


def test_calibrate_refuses_a_bad_ratio_in_one_line_and_writes_nothing(tmp_path, capsys):
    sd = write_synth(tmp_path, "sd", "sd", 4.0, 10)
    out = tmp_path / "m.json"
    assert main(["calibrate", str(sd), "-o", str(out), "--drafter-ratio", "11"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdlab calibrate: error: drafter_to_target_ratio: must be in")
    assert err.count("\n") == 1 and not out.exists()
    assert main(["calibrate", str(sd), "-o", str(out), "--target-config",
                 _config(tmp_path, "t")]) == 2
    assert "give both model configs" in capsys.readouterr().err and not out.exists()
