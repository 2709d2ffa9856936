"""One package on disk: the wheel built from the tracked files installs `psdlab` and nothing else
at the top level, with every module of the layout folders and their data under it; after the
set-up the old top-level names (`runtime`, `sim`, ...) do not import from outside the checkout."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = {"psdlab": "psdlab", "analysis": "psdlab/analysis", "sim": "psdlab/sim",
          "runtime": "psdlab/runtime", "validation": "psdlab/validation",
          "paper_figs": "psdlab/paper_figs"}
DATA = (".toml", ".json", ".jsonl", ".csv", ".safetensors")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    src = tmp_path_factory.mktemp("src")
    for rel in _tracked():
        path = ROOT / rel
        if path.is_symlink():                 # psdlab/<layer> -> ../<layer>, src/psdlab
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).symlink_to(os.readlink(path))
        elif path.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / rel)
    out = tmp_path_factory.mktemp("wheel")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "-q", "-w", str(out), str(src)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    (whl,) = out.glob("psdlab-*.whl")
    return whl


def _old_names_do_not_import(cwd: Path, site: Path | None = None) -> None:
    """From ``cwd`` (outside the checkout), optionally with ``site`` first on the path, none of
    the layout folders' old top-level names imports."""
    prefix = "import sys; sys.path.insert(0, sys.argv[1]); " if site else ""
    for old in ("runtime", "sim", "analysis", "validation", "paper_figs"):
        bad = subprocess.run([sys.executable, "-c", f"{prefix}import {old}",
                              *([str(site)] if site else [])],
                             capture_output=True, text=True, cwd=cwd, timeout=300)
        assert bad.returncode != 0 and "ModuleNotFoundError" in bad.stderr, (old, bad.stderr)


def test_psdlab_is_the_wheels_only_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"psdlab"}
    level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    if level:                         # setuptools writes it; the list must agree
        assert zipfile.ZipFile(wheel).read(level[0]).decode().split() == ["psdlab"]


def test_every_tracked_module_and_data_file_is_in_the_wheel_under_psdlab(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    want = set()
    for rel in _tracked():
        folder, _, rest = rel.partition("/")
        if folder in LAYOUT and rest and rel.endswith((".py",) + DATA):
            want.add(f"{LAYOUT[folder]}/{rest}")
    assert want and not sorted(want - names)
    assert "psdlab/runtime/data/drafter.safetensors" in names
    assert "psdlab/sim/configs/psd_offline.toml" in names


def test_the_wheel_imports_from_outside_the_checkout_and_the_old_names_do_not(wheel, tmp_path):
    target = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                          "--target", str(target), str(wheel)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import psdlab, psdlab.analysis.trace, "
             "psdlab.sim.sim_config, psdlab.sim.costs; from psdlab.runtime.prompts import "
             "load_prompts; assert psdlab.__file__.startswith(sys.argv[1]), psdlab.__file__; "
             "assert load_prompts(); print('ok')")
    ok = subprocess.run([sys.executable, "-c", probe, str(target)], capture_output=True,
                        text=True, cwd=tmp_path, timeout=300)
    assert ok.returncode == 0 and ok.stdout.strip() == "ok", ok.stderr[-2000:]
    _old_names_do_not_import(tmp_path, site=target)


def test_the_set_up_installs_no_old_top_level_name(tmp_path):
    """In the set-up's environment (an editable install), from outside the checkout."""
    _old_names_do_not_import(tmp_path)
    ok = subprocess.run([sys.executable, "-c", "import psdlab.runtime.prompts, psdlab.cli"],
                        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_every_layer_is_a_committed_link_and_found_by_path():
    """psdlab/<layer> links to the layer's folder and src/psdlab to psdlab (committed links),
    so a package found under src/ is a folder on disk: no package-dir map, no import hook."""
    import tomllib
    tracked = set(_tracked())
    for folder, pkg in LAYOUT.items():
        if folder != "psdlab":
            assert pkg in tracked and (ROOT / pkg).is_symlink(), pkg
            assert (ROOT / pkg).resolve() == (ROOT / folder).resolve()
    assert "src/psdlab" in tracked and (ROOT / "src/psdlab").resolve() == ROOT / "psdlab"
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in cfg and cfg["packages"] == {"find": {"where": ["src"],
                                                                       "include": ["psdlab*"]}}


def _psdlab_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if n == "psdlab" or n.startswith("psdlab.")}


def _resolves_by_path(name: str) -> bool | None:
    """True: a module file or package folder; None: an attribute of one (from m import x);
    False: nothing on disk."""
    base = ROOT.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
        return True
    parent = ROOT.joinpath(*name.split(".")[:-1])
    if parent.with_suffix(".py").is_file() or (parent / "__init__.py").is_file():
        return None
    return False


def test_every_psdlab_import_in_the_repo_is_a_file_by_path():
    """What an editor or any import graph needs: each `psdlab.x.y` imported anywhere in the
    checkout is psdlab/x/y.py (or a package folder) on disk, from the checkout's root."""
    unresolved, modules = [], 0
    for rel in _tracked():
        if rel.endswith(".py") and (ROOT / rel).is_file():
            for name in _psdlab_imports(ROOT / rel):
                found = _resolves_by_path(name)
                modules += found is True
                if found is False:
                    unresolved.append(f"{rel}: {name}")
    assert modules > 500 and not unresolved, unresolved[:10]


def test_plain_pytest_skips_the_registered_e2e_marker_and_m_e2e_runs_it(tmp_path):
    """pyproject registers the `e2e` marker and its addopts deselect e2e tests, so plain
    `pytest` is the fast set and `pytest -m e2e` (CI, .ci/run) the end-to-end one."""
    import tomllib
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(m.split(":")[0].strip() == "e2e" for m in ini["markers"]), ini["markers"]
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\n@pytest.mark.e2e\ndef test_long():\n    pass\n\n"
        "def test_short():\n    pass\n")

    def collected(*args: str) -> list[str]:
        run = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
                              "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
                              "--strict-markers", "--co", *args, str(tmp_path)],
                             capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        return sorted(line.split("::")[-1] for line in run.stdout.splitlines() if "::" in line)

    assert collected() == ["test_short"]            # addopts: -m 'not e2e'
    assert collected("-m", "e2e") == ["test_long"]
