"""`psdlab bench-gpu` without a GPU: its argument errors (one line naming the flag), the
lossless rule's judgement of a departure from AR, and the streaming floor."""
from __future__ import annotations

import pytest

from psdlab.cli import main


@pytest.mark.parametrize("extra, field", [
    (["--sections", "passes,foo"], "--sections"),
    (["--batches", "4,0"], "--batches"),
    (["--batches", "four"], "--batches"),
    (["--controlled-alpha", "1.5"], "--controlled-alpha"),
    (["--k", "0"], "--k"),
    (["--target", "/x"], "--target/--drafter"),
    (["--device", "tpu"], "--device"),
    (["--budget-s", "0"], "--budget-s")])
def test_bad_arguments_name_the_field(capsys, extra, field):
    assert main(["bench-gpu", "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"psdlab bench-gpu: error: {field}"), err


def test_bf16_spacing():
    from psdlab.validation.gpu.lossless import bf16_spacing
    assert bf16_spacing(1.0) == 2 ** -7 and bf16_spacing(3.4) == 2 ** -6
    assert bf16_spacing(-5.0) == 2 ** -5


class _Logits:
    """A stand-in target whose next-token logits are fixed (what `divergences` reads)."""

    def __init__(self, logits):
        self.logits = logits

    def forward_no_cache(self, ids):
        torch = pytest.importorskip("torch")
        return torch.tensor(self.logits, dtype=torch.float32).expand(1, ids.shape[1], -1)


@pytest.mark.parametrize("logits, accepted", [
    ([3.40625, 3.390625, 1.0, 0.0], True),     # tokens 0 and 1 one bf16 spacing apart
    ([3.40625, 3.0, 1.0, 0.0], False),         # a clear margin: a real departure
    ([3.40625, 3.375, 3.4375, 0.0], True),     # a three-way near-tie, token 2 on top
    ([3.40625, 3.390625, 3.90625, 0.0], False)])  # both far below a third token
def test_the_rule_accepts_near_ties_only(logits, accepted):
    pytest.importorskip("torch")
    from psdlab.validation.gpu.lossless import divergences
    got = divergences(_Logits(logits), [[3, 3]], [[2, 0, 1]], [[2, 1, 0]], "cpu")
    assert len(got) == 1 and got[0].position == 1
    assert (got[0].ar_token, got[0].token) == (0, 1)
    assert got[0].accepted is accepted
    assert divergences(_Logits(logits), [[3]], [[2, 0]], [[2, 0]], "cpu") == []


def test_floor_counts_weights_and_kv():
    pytest.importorskip("torch")
    from psdlab.runtime.model_config import ModelConfig
    from psdlab.validation.gpu.bench_gpu import hf_config
    from psdlab.validation.gpu.passes import floor_ms, hardware_bandwidth
    cfg = ModelConfig.from_hf(hf_config("1.3b", 32000, 512))
    assert floor_ms(cfg, 8, 128, 2, None) is None
    one = floor_ms(cfg, 1, 1, 2, 1000.0)
    more = floor_ms(cfg, 8, 129, 2, 1000.0)
    assert one is not None and more is not None and more > one
    assert 2.4 < one < 2.6            # ~1.26B parameters x 2 bytes at 1000 GB/s
    assert hardware_bandwidth("NVIDIA H200") == ("h200", 4800)
    assert hardware_bandwidth("cpu") == (None, None)
