"""Provenance names the commit of ccoverlap's own source tree, never that of the repository the
working directory (or an unpacked copy of the package) happens to sit in."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from ccoverlap.gpu import provenance

GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(autouse=True)
def _no_override_or_outer_repository(monkeypatch, tmp_path):
    monkeypatch.delenv("CCOVERLAP_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git looks no higher than tmp_path


@pytest.fixture
def other_repo(tmp_path) -> tuple[Path, str]:
    """A fresh repository with one commit of its own: (its path, its HEAD)."""
    repo = tmp_path / "other"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("another project\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "theirs")
    return repo, git(repo, "rev-parse", "HEAD")


def copy_package(dest: Path) -> Path:
    """ccoverlap's source copied to dest/ccoverlap (importable with dest on PYTHONPATH)."""
    shutil.copytree(provenance.PACKAGE_DIR, dest / "ccoverlap", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "ccoverlap"


def provenance_in_subprocess(pythonpath: Path, cwd: Path) -> dict:
    """commit and version as a fresh interpreter importing ccoverlap from `pythonpath` records them."""
    code = ("import json, ccoverlap.gpu.provenance as p; "
            "print(json.dumps({'file': p.__file__, 'commit': p.source_commit(), 'version': p.package_version()}))")
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_from_the_real_tree_the_commit_is_its_head_whatever_the_working_directory(other_repo, monkeypatch):
    try:
        head = subprocess.run(["git", "-C", str(provenance.PACKAGE_DIR), "rev-parse", "HEAD"],
                              check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError:
        pytest.skip("ccoverlap's source is not a git checkout here")
    repo, theirs = other_repo
    monkeypatch.chdir(repo)
    assert provenance.source_commit() == head != theirs


def test_a_copy_inside_another_repository_is_not_that_repositorys_commit(other_repo):
    repo, theirs = other_repo
    vendor = repo / "vendor"
    copy_package(vendor)
    got = provenance_in_subprocess(vendor, cwd=repo)
    assert Path(got["file"]).is_relative_to(vendor)  # the copy ran, not the installed package
    assert got["commit"] == "unknown" and got["version"] == metadata.version("ccoverlap")


def test_a_copy_the_other_repository_tracks_is_its_commit(other_repo):
    repo, _ = other_repo
    copy = copy_package(repo / "vendor")
    git(repo, "add", "vendor")
    git(repo, "commit", "-q", "-m", "vendor ccoverlap")
    assert provenance.source_commit(copy) == git(repo, "rev-parse", "HEAD")


def test_outside_any_repository_the_commit_is_unknown_and_the_version_is_recorded(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    copy = copy_package(plain)
    monkeypatch.chdir(plain)
    assert provenance.source_commit(copy) == "unknown"
    record = provenance.collect(backend="test")
    assert record["version"] == metadata.version("ccoverlap") and record["backend"] == "test"


def test_the_override_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("CCOVERLAP_COMMIT", "abc1234")
    assert provenance.source_commit(copy_package(tmp_path)) == "abc1234"
