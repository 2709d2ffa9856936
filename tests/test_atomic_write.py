"""Results files are written whole or not at all (analysis/atomic_write.py)."""
from __future__ import annotations

import json
import os
import stat

import pytest

from psdlab.analysis.atomic_write import write_json_and_markdown, write_text


def test_json_and_markdown_land_side_by_side_readable_by_all(tmp_path):
    path = str(tmp_path / "deep" / "r.json")
    got = write_json_and_markdown({"a": 1}, path, "# r\n")
    assert got == (path, str(tmp_path / "deep" / "r.md"))
    assert json.loads(open(path).read()) == {"a": 1}
    assert open(got[1]).read() == "# r\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert sorted(os.listdir(tmp_path / "deep")) == ["r.json", "r.md"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "r.json")
    write_text(path, "old")
    with pytest.raises(TypeError):
        write_text(path, 123)            # type: ignore[arg-type]
    assert open(path).read() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_write_all_is_every_file_or_none_and_errors_name_the_file_asked_for(tmp_path):
    from psdlab.analysis.atomic_write import write_all
    (tmp_path / "a.csv").write_text("old")

    def fine(p):
        with open(p, "w") as fh:
            fh.write("new")

    def broken(p):
        with open(p, "w") as fh:
            fh.write("half")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        write_all({str(tmp_path / "a.csv"): fine, str(tmp_path / "b.csv"): broken})
    assert os.listdir(tmp_path) == ["a.csv"] and (tmp_path / "a.csv").read_text() == "old"
    (tmp_path / "afile").write_text("")
    target = str(tmp_path / "afile" / "x.json")
    with pytest.raises(NotADirectoryError) as err:
        write_text(target, "x", make_folders=False)
    assert err.value.filename == target
