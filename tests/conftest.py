"""Fixtures shared by the test modules: the quick end-to-end demo on tiny random models (real
runtime runs, calibration, replay and report), built once per session for the demo tests and
the diagnostic scripts' tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory):
    from runtime_engine_util import prompts, tiny_pair
    from psdlab.validation.demo import demo
    root = tmp_path_factory.mktemp("demo")
    pair = tiny_pair(root / "models")
    out = root / "report"
    return demo(str(out), quick=True, target=str(pair["target"]), draft=str(pair["noisy"]),
                prompt_ids=prompts(12, seed=3), progress=False, quiet=True, seeds=(0, 1)), out
