"""Fixtures shared by the test modules: the quick end-to-end demo on tiny random models (real
runtime runs, calibration, replay and report), built once per session for the demo tests and
the diagnostic scripts' tests."""
from __future__ import annotations

import os

# numpy's many small BLAS calls run ten times slower with two threads on a busy 2-core machine;
# the tests' results do not depend on the thread count. Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory):
    from runtime_engine_util import prompts, tiny_pair
    from psdlab.validation.demo.run_demo import demo
    root = tmp_path_factory.mktemp("demo")
    pair = tiny_pair(root / "models")
    out = root / "report"
    return demo(str(out), quick=True, target=str(pair["target"]), draft=str(pair["noisy"]),
                prompt_ids=prompts(12, seed=3), progress=False, quiet=True, seeds=(0, 1)), out


@pytest.hookimpl(tryfirst=True)       # before `-m` deselects
def pytest_collection_modifyitems(items):
    """Every test of the quick demo (the fixture above: real runtime runs end to end) is `e2e`:
    plain `pytest` skips them, CI runs them (`pytest tests -m e2e`)."""
    for item in items:
        if "quick_demo" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
