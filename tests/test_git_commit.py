"""The one reader of the git commit (analysis/version.git_commit), on a real throwaway repo."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from psdlab.analysis.version import git_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _repo(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True,
                              capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("a")
    git("add", "sub/a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return git


def test_commit_and_clean_tree(tmp_path):
    git = _repo(tmp_path)
    got = git_commit(str(tmp_path / "sub"))
    assert got.full == git("rev-parse", "HEAD") and got.full.startswith(got.short)
    assert got.dirty is False


def test_dirty_counts_untracked_unless_told_and_only_its_folder(tmp_path):
    _repo(tmp_path)
    (tmp_path / "new.txt").write_text("n")
    assert git_commit(str(tmp_path)).dirty is True
    assert git_commit(str(tmp_path), untracked=False).dirty is False
    assert git_commit(str(tmp_path / "sub"), only=".").dirty is False
    (tmp_path / "sub" / "a.txt").write_text("changed")
    assert git_commit(str(tmp_path / "sub"), only=".", untracked=False).dirty is True


def test_outside_a_checkout_nothing_is_claimed(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    got = git_commit(str(folder))
    # tmp_path may itself sit inside a checkout on some machines; then git answers for it
    if subprocess.run(["git", "-C", str(folder), "rev-parse"], capture_output=True).returncode:
        assert (got.full, got.short, got.dirty) == (None, None, None)
