"""The package's shape: one import name on disk, layers whose arrows point down, no import cycles,
one version, and a calibration file that a plain simulator config can use.

Imports are read from the source (``ast``), module-level and function-level alike: a lazy import
inside a function is still an arrow."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"psdlab": "psdlab", "analysis": "psdlab.analysis", "sim": "psdlab.sim",
           "runtime": "psdlab.runtime", "validation": "psdlab.validation",
           "paper_figs": "psdlab.paper_figs"}
# what each layer may import (besides itself)
ALLOWED = {
    "psdlab.analysis": set(),
    "psdlab.sim": {"psdlab.analysis"},
    "psdlab.runtime": {"psdlab.analysis"},
    "psdlab.validation": {"psdlab.analysis", "psdlab.sim", "psdlab.runtime"},
    "psdlab.paper_figs": {"psdlab.analysis", "psdlab.sim", "psdlab.runtime", "psdlab.validation"},
}
OLD_NAMES = ("analysis", "sim", "runtime", "validation", "paper_figs")


def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The psdlab modules ``name`` imports (``from a import b`` counts a.b when it is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    got: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            got.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")
                up = up[:len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            got.add(base)
            got.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return {g for g in got if g == "psdlab" or g.startswith("psdlab.")
            or g.split(".")[0] in OLD_NAMES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else mod


def test_no_module_imports_the_old_top_level_names():
    bad = {m: sorted(i for i in imps if i.split(".")[0] in OLD_NAMES)
           for m, imps in GRAPH.items()}
    assert not {m: v for m, v in bad.items() if v}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_arrows_point_down(layer):
    wrong = {}
    for mod, imps in GRAPH.items():
        if _layer(mod) != layer:
            continue
        up = sorted(i for i in imps if _layer(i) != layer and _layer(i) not in ALLOWED[layer])
        if up:
            wrong[mod] = up
    assert not wrong, f"{layer} imports above or beside itself: {wrong}"


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    got = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            got.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            got.add(node.module)
            got.update(f"{node.module}.{a.name}" for a in node.names)
    return got


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph(imports: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {i for i in imps if i in MODULES and i != m and not m.startswith(i + ".")}
            for m, imps in imports.items()}


def test_no_import_cycles():
    """No cycle at all, lazy (function-level) imports included: there is no whitelist."""
    assert _cycles(_graph(GRAPH)) == []
    eager = {m: _module_level_imports(p) for m, p in MODULES.items()}
    assert _cycles(_graph(eager)) == []


def test_the_cycle_finder_finds_the_old_engine_loop_cycle():
    graph = _graph(GRAPH)
    controller, step_loop = "psdlab.runtime.controller", "psdlab.runtime.step_loop"
    graph[controller] = graph[controller] | {step_loop}
    graph[step_loop] = graph[step_loop] | {controller}
    assert frozenset({"psdlab.runtime.controller", "psdlab.runtime.step_loop"}) in _cycles(graph)


def test_the_import_reader_sees_a_cycle_and_an_upward_arrow(tmp_path):
    """The checks above are only as good as `_imports`: it must see a lazy import inside a
    function and resolve relative imports."""
    src = tmp_path / "mod.py"
    src.write_text("def f():\n    from psdlab.runtime.step_loop import _Loop\n"
                   "from .base import CostModel\n")
    MODULES_BEFORE = dict(MODULES)
    try:
        MODULES["psdlab.sim.costs.base"] = src
        got = _imports("psdlab.sim.costs.x", src)
    finally:
        MODULES.clear()
        MODULES.update(MODULES_BEFORE)
    assert {"psdlab.runtime.step_loop", "psdlab.sim.costs.base"} <= got


def test_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    from psdlab import __version__
    from psdlab.analysis.version import __version__ as bottom
    assert project["version"] == __version__ == bottom


def test_a_config_naming_a_calibration_file_simulates_with_it(tmp_path):
    """`psdlab simulate` on a config whose costs name a `psdlab calibrate` model file, in a fresh
    interpreter that never imports validation: the simulated verification passes take the
    calibrated model's times."""
    from psdlab.sim.costs import make_cost_model
    doc = {"format": "psdlab.cost-fit", "version": 1, "meta": {}, "roles": {
        "target": {"kind": "affine", "coef": {"base": 0.02, "per_seq": 0.001,
                                              "per_token": 0.0005, "per_context": 0.0}},
        "drafter": {"kind": "affine", "coef": {"base": 0.004, "per_seq": 0.0,
                                               "per_token": 0.0001, "per_context": 0.0}}}}
    model = tmp_path / "model.json"
    model.write_text(json.dumps(doc))
    cfg = tmp_path / "cal.toml"
    trace = tmp_path / "cal.trace.jsonl"
    cfg.write_text(f"""seed = 0
requests = 6
[server]
mode = "sd-sep"
k = 3
m = 3
[target]
name = "t"
cost = {{ name = "calibrated", path = "{model}", role = "target", overhead = 0.003 }}
[drafter]
name = "d"
cost = {{ name = "calibrated", path = "{model}", role = "drafter" }}
[acceptance]
name = "geometric"
alpha = 0.6
[workload]
name = "offline"
prompt = {{ name = "fixed", value = 8 }}
output = {{ name = "fixed", value = 10 }}
[trace]
path = "{trace}"
level = "step"
""")
    probe = ("import sys; from psdlab.cli import main; rc = main(['simulate', sys.argv[1]]); "
             "print('VALIDATION' if any(m.startswith('psdlab.validation') for m in sys.modules)"
             " else 'CLEAN'); sys.exit(rc)")
    run = subprocess.run([sys.executable, "-c", probe, str(cfg)], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "CLEAN"
    from psdlab.analysis.trace import read_trace
    steps = read_trace(trace).steps
    want = make_cost_model({"name": "calibrated", "path": str(model), "role": "target",
                            "overhead": 0.003})
    verify = [(p.seqs, p.tokens, p.end - p.start) for s in steps for p in s.phases
              if p.kind == "verify"]
    assert verify
    for seqs, tokens, dt in verify:
        assert dt == pytest.approx(float(want.forward_time(seqs, tokens, 1)), rel=0.05,
                                   abs=0.004)
