"""`psdlab plan --backend ray`: the same CSV as the local backend, byte for byte; a failing
configuration retried once, then one line and nothing written.  Skipped where Ray is not
installed (it is an optional extra: pip install 'psdlab[ray]')."""
from __future__ import annotations

import logging

import pytest
from plan_util import FAULTY, attempts, fault_env, small_plan

from psdlab.cli import main
from psdlab.sim.sweep_backends import FAULT_ENV

ray = pytest.importorskip("ray", reason="ray is not installed (extra: pip install "
                                        "'psdlab[ray]')")

pytestmark = pytest.mark.e2e      # a Ray cluster takes seconds to start on 2 cores


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (the plan reuses a running one and leaves it up)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def local_csv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    assert main(["plan", str(small_plan(tmp)), "--csv", str(tmp / "p.csv"), "--no-png"]) == 0
    return (tmp / "p.csv").read_bytes()


def test_ray_starts_and_stops_its_own_cluster(local_csv, tmp_path):
    """(First in the file: no cluster runs yet.)  Without a running cluster the plan starts a
    local one (--jobs CPUs) and shuts it down after the sweep."""
    assert not ray.is_initialized()
    assert main(["plan", str(small_plan(tmp_path)), "--csv", str(tmp_path / "p.csv"),
                 "--backend", "ray", "--jobs", "2", "--no-png"]) == 0
    assert not ray.is_initialized()
    assert (tmp_path / "p.csv").read_bytes() == local_csv


HEAD = """
import logging, sys, ray
ctx = ray.init(num_cpus=1, include_dashboard=False, logging_level=logging.ERROR)
print(ctx.address_info["address"], flush=True)
sys.stdin.read()
ray.shutdown()
"""


def test_ray_address_uses_a_running_cluster(local_csv, tmp_path, monkeypatch):
    """--address: the tasks run on a cluster another process started (and leaves running);
    connecting to an explicit address with token authentication takes RAY_AUTH_MODE=token
    (Ray's rule).  (Not tested here: an address nobody listens on, where Ray retries for
    minutes before it gives up.)"""
    import subprocess
    import sys
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        address = head.stdout.readline().strip()
        assert address
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        assert main(["plan", str(small_plan(tmp_path)), "--csv", str(tmp_path / "p.csv"),
                     "--backend", "ray", "--address", address, "--no-png"]) == 0
        assert not ray.is_initialized()
        assert (tmp_path / "p.csv").read_bytes() == local_csv
    finally:
        head.stdin.close()
        head.wait(timeout=120)


def test_ray_gives_the_local_csv(cluster, local_csv, tmp_path):
    assert main(["plan", str(small_plan(tmp_path)), "--csv", str(tmp_path / "p.csv"),
                 "--backend", "ray"]) == 0
    assert (tmp_path / "p.csv").read_bytes() == local_csv
    assert (tmp_path / "p.png").stat().st_size > 0


def test_ray_retries_a_failure_once(cluster, local_csv, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, fault_env(marks, fail=1))
    assert main(["plan", str(small_plan(tmp_path)), "--csv", str(tmp_path / "p.csv"),
                 "--backend", "ray", "--no-png"]) == 0
    assert attempts(marks) == 2
    assert (tmp_path / "p.csv").read_bytes() == local_csv


def test_ray_second_failure_is_one_line_and_nothing_written(cluster, tmp_path, monkeypatch,
                                                            capsys):
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, fault_env(marks, fail=5))
    out = tmp_path / "o"
    out.mkdir()
    assert main(["plan", str(small_plan(tmp_path)), "--csv", str(out / "p.csv"),
                 "--backend", "ray"]) == 2
    err = capsys.readouterr().err
    assert attempts(marks) == 2
    assert err.count("\n") == 1 and FAULTY in err and "psdlab plan: error:" in err
    assert list(out.iterdir()) == []
