"""tools/series_repo.py: the series as a git history and back."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fusion_overlay.patchset import DEFAULT_PATCHES_DIR, load_series
from tools import series_repo


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("series") / "repo"
    series_repo.export(repo)
    return repo


def patches_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "patches"
    shutil.copytree(DEFAULT_PATCHES_DIR, copy)
    return copy


def git(repo: Path, *args: str) -> str:
    return series_repo.git(repo, *args)


def test_export_has_the_pristine_commit_then_one_commit_per_patch(exported):
    subjects = git(exported, "log", "--reverse", "--format=%s").splitlines()
    names = [p.name for p in load_series().patches]
    assert subjects == [series_repo.pristine_subject(load_series().release), *names]


def test_import_of_an_unchanged_export_keeps_every_patch_byte_for_byte(
    exported, tmp_path
):
    copy = patches_copy(tmp_path)
    series_repo.import_(exported, copy)
    for path in filter(Path.is_file, DEFAULT_PATCHES_DIR.iterdir()):
        assert (copy / path.name).read_bytes() == path.read_bytes(), path.name


def test_an_edit_in_one_commit_moves_the_hunks_of_the_later_patches(
    exported, tmp_path
):
    repo = tmp_path / "edited"
    subprocess.run(["git", "clone", "--quiet", str(exported), str(repo)], check=True)
    names = [p.name for p in load_series().patches]
    tip = git(repo, "rev-parse", "HEAD").strip()
    commits = git(repo, "rev-list", "--reverse", tip).split()[1:]
    cpp_rel = "torch/_inductor/codegen/cpp.py"
    first = next(
        i for i, c in enumerate(commits)
        if cpp_rel in git(repo, "show", "--name-only", "--format=", c).split()
    )  # fmt: skip
    # three lines at the top of cpp.py, added by the first patch that touches it
    git(repo, "checkout", "--quiet", commits[first])
    cpp = repo / cpp_rel
    cpp.write_text("# one\n# two\n# three\n" + cpp.read_text())
    git(repo, "commit", "--quiet", "--amend", "--all", "--no-edit")
    for commit in commits[first + 1 :]:
        git(repo, "cherry-pick", "--quiet", "--allow-empty", commit)
    copy = patches_copy(tmp_path)
    series_repo.import_(repo, copy)
    assert "+# one\n+# two\n+# three\n" in (copy / names[first]).read_text()
    changed = [
        n for n in names[first + 1 :]
        if (copy / n).read_text() != (DEFAULT_PATCHES_DIR / n).read_text()
    ]  # fmt: skip
    assert changed  # later cpp.py hunks start three lines further down
    # the rewritten series applies with no fuzz, and ends where the edit left it
    again = tmp_path / "again"
    series_repo.export(again, copy)
    assert (again / cpp_rel).read_text() == cpp.read_text()


def test_a_history_that_is_not_an_export_is_refused(tmp_path):
    repo = tmp_path / "other"
    repo.mkdir()
    git(repo, "init", "--quiet")
    (repo / "f").write_text("x\n")
    git(repo, "add", "f")
    git(repo, "commit", "--quiet", "-m", "something else")
    with pytest.raises(series_repo.SeriesRepoError, match="first commit"):
        series_repo.import_(repo, patches_copy(tmp_path))


def test_a_commit_outside_torch_is_refused(exported, tmp_path):
    repo = tmp_path / "outside"
    subprocess.run(["git", "clone", "--quiet", str(exported), str(repo)], check=True)
    (repo / "notes.txt").write_text("x\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "--quiet", "--amend", "--no-edit")
    with pytest.raises(series_repo.SeriesRepoError, match="outside torch/"):
        series_repo.import_(repo, patches_copy(tmp_path))


def _next_release(tmp_path: Path, exported: Path, drift: str) -> Path:
    """A site-packages of a made-up release 9.9.9: the pristine files of the
    export with `drift` prepended to each (upstream moved on)."""
    root, _ = series_repo.history_root(exported)
    site = tmp_path / "site-packages"
    for rel in git(exported, "ls-tree", "-r", "--name-only", root).split():
        text = git(exported, "show", f"{root}:{rel}")
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(drift + text)
    (site / "torch" / "version.py").write_text("__version__ = '9.9.9+cpu'\n")
    return site


def test_rebase_replays_the_history_onto_the_next_release(exported, tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(exported), str(repo)], check=True)
    site = _next_release(tmp_path, repo, "# upstream moved on\n" * 3)
    assert series_repo.rebase(repo, "9.9.9", site)
    assert git(repo, "branch", "--show-current").strip() == "torch-9.9.9"
    out = tmp_path / "9.9.9"
    names = series_repo.import_(repo, out)
    assert names == [p.name for p in load_series().patches]
    # the pins come from the new root's files, and the series applies to them
    pins = (out / "upstream-sha256.txt").read_text()
    for rel, digest in load_series(out).manifest.items():
        assert series_repo.sha256_bytes((site / rel).read_bytes()) == digest, rel
    assert "torch 9.9.9" in pins
    again = tmp_path / "again"
    series_repo.export(again, out, [site])
    assert git(again, "rev-parse", "HEAD:torch") == git(repo, "rev-parse", "HEAD:torch")


def test_rebase_refuses_files_of_another_release(exported, tmp_path):
    site = _next_release(tmp_path, exported, "")
    with pytest.raises(series_repo.SeriesRepoError, match="not 9.9.8"):
        series_repo.rebase(exported, "9.9.8", site)
