"""One model-file writer for `psdlab calibrate` and the demo: the same traces give the same file;
each trace file is opened once per command; the command modules parse and print only."""
from __future__ import annotations

import ast
import builtins
import json
import os
from collections import Counter
from pathlib import Path

from psdlab.analysis.trace import write_trace
from psdlab.cli import main
from psdlab.validation.acceptance.pool import POOL_FILE, write_pool
from psdlab.validation.demo.measurement_plan import Measured
from psdlab.validation.demo.run_order import RunSpec
from psdlab.validation.demo.run_demo import calibrate_runs
from test_calibrate import make_trace

ROOT = Path(__file__).resolve().parents[1]


def _demo_folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """A demo-like folder: two small SD traces in traces/ and an acceptance pool beside."""
    trace_dir = tmp_path / "demo" / "traces"
    trace_dir.mkdir(parents=True)
    names = []
    for k, seed in ((2, 1), (4, 2)):
        name = f"sd_k{k}_m2.jsonl"
        write_trace(trace_dir / name, make_trace(k, m=2, n_steps=60, seed=seed))
        names.append(name)
    write_pool(str(tmp_path / "demo" / POOL_FILE), {"100": ".1101.", "101": ".0010111."})
    return trace_dir, names


def test_calibrate_and_the_demo_write_the_same_model_file(tmp_path, monkeypatch, capsys):
    trace_dir, names = _demo_folder(tmp_path)
    measured = [Measured(RunSpec(n[:-6], "sd-sep", k, 2), str(trace_dir / n), 0.0)
                for n, k in zip(names, (2, 4))]
    demo_model = calibrate_runs(measured, str(tmp_path / "demo"),
                                pool={"100": ".1101.", "101": ".0010111."})
    monkeypatch.chdir(trace_dir)
    out = tmp_path / "cli.json"
    assert main(["calibrate", *names, "-o", str(out)]) == 0
    assert "acceptance for new prompts" in capsys.readouterr().out
    assert out.read_bytes() == Path(demo_model.path).read_bytes()
    doc = json.loads(out.read_text())
    transfer = doc["meta"]["acceptance_transfer"]
    assert doc["meta"]["acceptance"]["default"] == "fitted"
    assert doc["meta"]["acceptance"]["fitted"] == transfer["spec"]
    assert {"100", "101"} <= set(transfer["prompts"])        # the pool beside the traces


def test_without_selection_the_file_is_the_plain_calibration(tmp_path, monkeypatch):
    trace_dir, names = _demo_folder(tmp_path)
    monkeypatch.chdir(trace_dir)
    out = tmp_path / "plain.json"
    assert main(["calibrate", *names, "-o", str(out), "--no-acceptance-selection"]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert "acceptance_transfer" not in meta and "fitted" not in meta["acceptance"]
    assert meta["acceptance"]["default"] != "fitted"


def _count_opens(monkeypatch, paths: list[str]) -> Counter:
    counts: Counter = Counter()
    real = builtins.open
    watched = {os.path.abspath(p) for p in paths}

    def counting(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.abspath(file) in watched:
            counts[os.path.abspath(file)] += 1
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    return counts


def test_each_trace_file_is_opened_once_per_calibrate(tmp_path, monkeypatch, capsys):
    trace_dir, names = _demo_folder(tmp_path)
    paths = [str(trace_dir / n) for n in names]
    counts = _count_opens(monkeypatch, paths)
    assert main(["calibrate", *paths, "-o", str(tmp_path / "m.json"),
                 "--no-acceptance-selection"]) == 0
    assert counts == Counter({os.path.abspath(p): 1 for p in paths})


def test_the_demo_calibrates_on_traces_it_already_read(tmp_path, monkeypatch):
    from psdlab.validation.demo.run_demo import load_runs
    trace_dir, names = _demo_folder(tmp_path)
    measured = [Measured(RunSpec(n[:-6], "sd-sep", k, 2), str(trace_dir / n), 0.0)
                for n, k in zip(names, (2, 4))]
    counts = _count_opens(monkeypatch, [m.path for m in measured])
    loaded = load_runs(measured)
    assert sum(counts.values()) == 2
    calibrate_runs(measured, str(tmp_path / "out"), traces=loaded)
    assert sum(counts.values()) == 2                    # no trace file opened again


def _run_body(module: Path) -> tuple[set[str], ast.FunctionDef]:
    tree = ast.parse(module.read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    return set(funcs), funcs["run"]


def _top_level_logic(module: Path) -> list[str]:
    """What a command module holds beyond its docstring, imports, literal constants (argparse
    defaults and choices) and the functions `register` and `run`."""
    found = []
    for i, node in enumerate(ast.parse(module.read_text()).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue                                            # the docstring
        if isinstance(node, ast.FunctionDef) and node.name in ("register", "run"):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            try:
                ast.literal_eval(node.value)
                continue
            except ValueError:
                pass
        found.append(f"line {node.lineno}: {type(node).__name__} "
                     f"{getattr(node, 'name', '')}".rstrip())
    return found


def test_command_modules_parse_arguments_and_print_only():
    """Issue 44: commands parse arguments and print, and nothing else.  Every module of
    psdlab.commands defines `register` (the parser) and `run` (one-line argument checks, one
    call into the package, the printing) and nothing more -- no helpers, classes or computed
    constants: computations, configs built from the options, files and report formatting live
    in the layers (options that two commands share: psdlab.cli_options).  `psdlab calibrate`
    and `psdlab demo`, stricter: a `run` that calls one validation function and prints its
    lines -- no branches or formatting at all."""
    from psdlab.commands import COMMANDS

    folder = ROOT / "psdlab" / "commands"
    modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    assert {p.stem for p in modules} == {c.replace("-", "_") for c in COMMANDS}
    for module in modules:
        defined, _ = _run_body(module)
        assert defined == {"register", "run"}, module.name
        assert not _top_level_logic(module), (module.name, _top_level_logic(module))
    logic = (ast.If, ast.IfExp, ast.JoinedStr, ast.ListComp, ast.DictComp, ast.SetComp,
             ast.GeneratorExp, ast.While, ast.Try, ast.Raise)
    for name in ("calibrate", "demo"):
        defined, run = _run_body(ROOT / "psdlab" / "commands" / f"{name}.py")
        found = [type(n).__name__ for n in ast.walk(run) if isinstance(n, logic)]
        assert not found, (name, found)
        sources = {n.module for n in ast.walk(run) if isinstance(n, ast.ImportFrom)}
        assert len(sources) == 1 and next(iter(sources)).startswith("psdlab.validation."), name
