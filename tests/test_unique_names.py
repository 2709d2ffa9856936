"""Issue 44: a public name (module-level class or function) is defined once across the package,
so a name says which thing it is wherever it is read.  The exceptions are module protocols: a
family of modules that each define the same functions for a registry or a dispatcher to call
(commands' ``register``/``run``, trace formats' ``sniff``/``read``, figures' ``units``/``make``,
entry points' ``main``); each is allowed only inside its family's folder."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("analysis", "sim", "runtime", "validation", "paper_figs")

#: name -> the folders (repo-relative prefixes) whose modules implement that protocol
PROTOCOLS: dict[str, tuple[str, ...]] = {
    "register": ("psdlab/commands/",),
    "run": ("psdlab/commands/",),
    "sniff": ("analysis/formats/",),
    "read": ("analysis/formats/",),
    "read_all": ("analysis/formats/",),
    "read_workload": ("analysis/formats/",),
    "units": ("paper_figs/fig_",),
    "make": ("paper_figs/fig_",),
    "main": ("psdlab/cli.py", "paper_figs/cli.py", "runtime/vllm_ext/vllm_cli.py"),
}


def package_modules() -> list[Path]:
    """Every module of the package, once (``psdlab/<layer>`` are links to the layer folders)."""
    files = [p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")]
    files += [p for p in (ROOT / "psdlab").rglob("*.py")
              if not any(part in LAYERS for part in p.relative_to(ROOT / "psdlab").parts)]
    return sorted(files)


def public_definitions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_")]


def duplicated_names(modules: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    """Names defined in two or more modules, with their modules (repo-relative), other than a
    protocol's names inside its family."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in modules:
        rel = path.relative_to(root).as_posix()
        for name in public_definitions(path):
            where[name].append(rel)
    out = {}
    for name, paths in where.items():
        if len(paths) < 2:
            continue
        family = PROTOCOLS.get(name)
        if family is None or not all(p.startswith(family) for p in paths):
            out[name] = paths
    return out


def test_the_scan_sees_the_whole_package_once():
    modules = package_modules()
    rel = {p.relative_to(ROOT).as_posix() for p in modules}
    assert len(rel) == len(modules) > 200
    assert {"sim/capacity.py", "runtime/controller.py", "psdlab/cli.py",
            "analysis/formats/azure.py"} <= rel


def test_every_public_name_is_defined_once_outside_module_protocols():
    assert duplicated_names(package_modules()) == {}


def test_the_check_finds_a_collision(tmp_path):
    """The scan would fail on a second definition of a name, and on a protocol name outside
    its family."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("class Workload:\n    pass\n\ndef run():\n    pass\n")
    b.write_text("def Workload():\n    pass\n\ndef _private():\n    pass\n")
    assert duplicated_names([a, b], tmp_path) == {"Workload": ["a.py", "b.py"]}
    b.write_text("def run():\n    pass\n")
    assert duplicated_names([a, b], tmp_path) == {"run": ["a.py", "b.py"]}
    commands = tmp_path / "psdlab" / "commands"
    commands.mkdir(parents=True)
    c, d = commands / "c.py", commands / "d.py"
    c.write_text("def run():\n    pass\n")
    d.write_text("def run():\n    pass\n")
    assert duplicated_names([c, d], tmp_path) == {}
