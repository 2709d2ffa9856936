"""Sizes a newcomer can read: no package module over 400 lines, no function over 80 (issue 44).
Counts every tracked .py file outside tests/ (the package's layers, the command, benchmarks and
scripts)."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.py"], capture_output=True,
                         text=True, check=True).stdout.split()
    return [ROOT / f for f in out if not f.startswith("tests/") and (ROOT / f).is_file()]


def test_no_module_is_over_400_lines():
    big = {str(p.relative_to(ROOT)): n for p in _sources()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert big == {}


def test_no_function_is_over_80_lines():
    long = {}
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}
