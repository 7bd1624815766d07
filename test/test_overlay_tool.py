"""The overlay tool on throwaway torch trees (no compiles, a few seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RELEASE, REPO_ROOT, snapshot

from fusion_overlay import overlay as tool
from fusion_overlay.patchset import (
    DEFAULT_PATCHES_DIR,
    SERIES_NAME,
    load_overlay_files,
    load_series,
    parse_file_changes,
    patches_dir_for,
    supported_releases,
)
from fusion_overlay.target import TargetError, resolve_target

CONFIG = "torch/_inductor/config.py"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fusion_overlay.overlay", *args],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip


def apply(
    root: Path, patches: Path = DEFAULT_PATCHES_DIR, overlay_dir: Path | None = None
) -> str:
    overlay = tool.load_overlay(patches, overlay_dir or tool.DEFAULT_OVERLAY_DIR)
    return tool.apply(resolve_target(root), overlay)


def copy_series(tmp_path: Path, names: list[str] | None = None) -> Path:
    """A private patches dir holding (a prefix of) the real series."""
    patches = tmp_path / "patches"
    shutil.copytree(DEFAULT_PATCHES_DIR, patches)
    if names is not None:
        (patches / SERIES_NAME).write_text("".join(f"{n}\n" for n in names))
    return patches


def series_names() -> list[str]:
    return [p.name for p in load_series().patches]


# --------------------------------------------------------------------------


def test_apply_then_revert_is_byte_identical(site_packages):
    before = snapshot(site_packages)
    apply(site_packages)
    applied = snapshot(site_packages)
    assert applied[CONFIG] != before[CONFIG]
    assert b"outer_loop_fusion_retile" in applied[CONFIG]
    for rel in tool.load_overlay().modules:
        assert rel in applied
    tool.revert(resolve_target(site_packages))
    assert snapshot(site_packages) == before
    assert not (site_packages / tool.STATE_DIR).exists()


def test_apply_twice_is_a_noop(site_packages):
    apply(site_packages)
    files = snapshot(site_packages)
    mtimes = {p: p.stat().st_mtime_ns for p in site_packages.rglob("*") if p.is_file()}
    assert "already applied" in apply(site_packages)
    assert snapshot(site_packages) == files
    assert {
        p: p.stat().st_mtime_ns for p in site_packages.rglob("*") if p.is_file()
    } == mtimes


def test_wrong_upstream_file_is_refused_and_nothing_changes(site_packages):
    (site_packages / CONFIG).write_bytes(
        (site_packages / CONFIG).read_bytes() + b"# local\n"
    )
    before = snapshot(site_packages)
    result = run_cli("apply", "--target", str(site_packages))
    assert result.returncode == 1
    assert CONFIG in result.stderr
    pinned = load_series(patches_dir_for(RELEASE)).manifest[CONFIG]
    assert f"expected sha256 {pinned}" in result.stderr and "actual" in result.stderr
    assert snapshot(site_packages) == before
    assert run_cli("verify", "--target", str(site_packages)).returncode == 1


def test_wrong_torch_version_is_refused(tmp_path):
    from conftest import write_pristine_torch

    root = write_pristine_torch(tmp_path / "sp", version="2.12.1")
    before = snapshot(root)
    result = run_cli("apply", "--target", str(root))
    assert (
        result.returncode == 1
        and "2.12.1" in result.stderr
        and "version.py" in result.stderr
    )
    # the message names every release the overlay supports
    for release in supported_releases():
        assert release in result.stderr, result.stderr
    assert snapshot(root) == before


def test_apply_takes_the_series_of_the_targets_release(site_packages):
    assert run_cli("apply", "--target", str(site_packages)).returncode == 0
    state = tool.read_state(site_packages)
    expected = load_series(patches_dir_for(RELEASE))
    assert [p["name"] for p in state["patches"]] == [p.name for p in expected.patches]


def test_another_releases_version_over_these_files_is_refused(tmp_path):
    from conftest import write_pristine_torch

    others = [r for r in supported_releases() if r != RELEASE]
    root = write_pristine_torch(tmp_path / "sp", version=f"{others[0]}+cpu")
    before = snapshot(root)
    result = run_cli("apply", "--target", str(root))
    assert result.returncode == 1
    assert f"is not the pristine torch {others[0]} file" in result.stderr
    assert snapshot(root) == before


def test_a_tree_without_a_version_gets_the_series_its_pins_match(tmp_path):
    from conftest import write_pristine_torch

    root = write_pristine_torch(tmp_path / "sp", version=None)
    overlay = tool.overlay_for(resolve_target(root))
    assert overlay.series.release == RELEASE


def test_failing_patch_leaves_target_untouched(site_packages, tmp_path):
    patches = copy_series(tmp_path, series_names() + ["9999-broken.patch"])
    (patches / "9999-broken.patch").write_text(
        "Description: a patch whose context is not in config.py\n---\n"
        f"--- a/{CONFIG}\n+++ b/{CONFIG}\n"
        "@@ -1,2 +1,3 @@\n this line is not in config.py\n+added\n"
        " and neither is this one\n"
    )
    before = snapshot(site_packages)
    with pytest.raises(
        tool.OverlayError, match=f"9999-broken.patch does not apply to {CONFIG}"
    ):
        apply(site_packages, patches)
    assert snapshot(site_packages) == before


def test_failure_midway_through_the_swap_rolls_back(site_packages, monkeypatch):
    before = snapshot(site_packages)
    real_write, swapped = tool.atomic_write, []

    def write_then_fail(path, data):
        if ".fusion_overlay" not in path.parts:
            swapped.append(path)
            if len(swapped) == 2:  # backups, state and one target file are in
                raise OSError("disk full (simulated)")
        real_write(path, data)

    monkeypatch.setattr(tool, "atomic_write", write_then_fail)
    with pytest.raises(OSError, match="simulated"):
        apply(site_packages)
    assert snapshot(site_packages) == before
    assert not (site_packages / tool.STATE_DIR).exists()


def test_dirty_install_is_refused(site_packages):
    apply(site_packages)
    (site_packages / CONFIG).write_bytes(
        (site_packages / CONFIG).read_bytes() + b"# hand edit\n"
    )
    with pytest.raises(tool.OverlayError, match=f"dirty install.*\n.*{CONFIG}"):
        apply(site_packages)
    with pytest.raises(tool.OverlayError, match="dirty install"):
        tool.revert(resolve_target(site_packages))
    assert run_cli("verify", "--target", str(site_packages)).returncode == 1
    tool.revert(resolve_target(site_packages), force=True)
    assert (
        run_cli("verify", "--pristine", "--target", str(site_packages)).returncode == 0
    )


def test_changed_series_is_reapplied_from_the_backups(site_packages, tmp_path):
    from conftest import write_pristine_torch

    before = snapshot(site_packages)
    first_patch_only = copy_series(tmp_path, series_names()[:1])
    apply(site_packages, first_patch_only, overlay_dir=tmp_path / "no-overlay")
    assert apply(site_packages).startswith("re-applied")  # now the full series

    reference = write_pristine_torch(tmp_path / "reference")
    apply(reference)
    assert snapshot(site_packages) == snapshot(reference)
    tool.revert(resolve_target(site_packages))
    assert snapshot(site_packages) == before


def test_reinstalled_torch_under_an_applied_tree_is_reapplied(site_packages):
    before = snapshot(site_packages)
    apply(site_packages)
    for rel, data in before.items():  # pip install --force-reinstall torch
        (site_packages / rel).write_bytes(data)
    assert "pristine again" in tool.status(
        resolve_target(site_packages), tool.load_overlay()
    )
    assert apply(site_packages).startswith("re-applied")
    tool.revert(resolve_target(site_packages))
    assert snapshot(site_packages) == before


def test_source_checkout_target(checkout):
    target = resolve_target(checkout)
    assert (target.kind, target.version) == ("source", RELEASE)
    before = snapshot(checkout)
    assert run_cli("apply", "--target", str(checkout)).returncode == 0
    status = run_cli("status", "--target", str(checkout / "torch"))
    assert "(source)" in status.stdout and "applied, current, clean" in status.stdout
    assert run_cli("verify", "--target", str(checkout)).returncode == 0
    assert run_cli("revert", "--target", str(checkout)).returncode == 0
    assert snapshot(checkout) == before


def test_target_must_hold_torch(tmp_path):
    with pytest.raises(TargetError, match="no torch/ package"):
        resolve_target(tmp_path)


def test_empty_overlay_dir_is_fine(site_packages, tmp_path):
    before = snapshot(site_packages)
    (tmp_path / "overlay").mkdir()
    assert "0 overlay module(s)" in apply(
        site_packages, overlay_dir=tmp_path / "overlay"
    )
    tool.revert(resolve_target(site_packages))
    assert snapshot(site_packages) == before


def test_removed_hunk_line_starting_with_dashes_is_not_a_file_header():
    patch = (
        "--- a/torch/x.py\n+++ b/torch/x.py\n@@ -1,2 +1,1 @@\n keep\n"
        "--- a/torch/not_a_file.py\n"  # a removed line "-- a/torch/..."
    )
    assert [c.path for c in parse_file_changes(patch, "t")] == ["torch/x.py"]


def test_every_patch_has_a_dep3_header():
    for patch in load_series().patches:
        header = patch.data.decode().split("\n---", 1)[0]
        assert "Description:" in header or "Subject:" in header, patch.name


# --------------------------------------------------------------------------
# make build: refusals, and the apply step on a fake checkout


def make_build(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    make = ["make", "--no-print-directory", "-C", str(REPO_ROOT), "build"]
    return subprocess.run(
        [*make, f"PYTHON={sys.executable}", *args],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda tmp: None, "set PYTORCH_SRC"),
        (lambda tmp: tmp / "missing", "is not a directory"),
        (lambda tmp: tmp, "is not a PyTorch checkout (no setup.py)"),
    ],
    ids=["unset", "not-a-dir", "not-a-checkout"],
)
def test_make_build_refuses_a_bad_pytorch_src(tmp_path, setup, message):
    src = setup(tmp_path)
    result = make_build(*([f"PYTORCH_SRC={src}"] if src is not None else []))
    assert result.returncode != 0 and message in result.stderr


def test_make_build_refuses_another_version(checkout):
    (checkout / "version.txt").write_text("2.12.0a0\n")
    before = snapshot(checkout)
    result = make_build(f"PYTORCH_SRC={checkout}")
    assert result.returncode != 0 and "says 2.12.0a0" in result.stderr
    assert snapshot(checkout) == before


def test_make_build_applies_to_the_checkout(checkout):
    # BUILD_PYTHON=true stands in for the hours-long `pip install -e .`.
    result = make_build(f"PYTORCH_SRC={checkout}", "BUILD_PYTHON=true", "MAX_JOBS=1")
    assert result.returncode == 0, result.stderr
    assert "applied to" in result.stdout and "USE_CUDA=0 MAX_JOBS=1" in result.stdout
    assert b"outer_loop_fusion_retile" in (checkout / CONFIG).read_bytes()
    for rel, data in load_overlay_files().items():  # the overlay modules land
        assert (checkout / rel).read_bytes() == data, rel
    # PyTorch's documented steps, in order: deps (cmake, ninja), then the build.
    steps = [
        "true -m pip install -r requirements.txt",
        "fusion_overlay.overlay apply",
        "true -m pip install --no-build-isolation -v -e .",
    ]
    at = [result.stdout.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), result.stdout


def test_make_build_refuses_uninitialized_submodules(checkout):
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(checkout), *args], check=True)

    git("init", "--quiet")
    (checkout / ".gitmodules").write_text(
        '[submodule "third_party/x"]\n\tpath = third_party/x\n\turl = ../x\n'
    )
    git("update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},third_party/x")
    before = snapshot(checkout)
    result = make_build(f"PYTORCH_SRC={checkout}", "BUILD_PYTHON=true")
    assert result.returncode != 0 and "uninitialized submodules" in result.stderr
    assert snapshot(checkout) == before


# --------------------------------------------------------------------------
# flags


def test_the_readme_flag_table_is_the_registry():
    from fusion_overlay import flags

    text = flags.README.read_text()
    assert flags.readme_with_table(text) == text, (
        "README's flag table differs from fusion_overlay/flags.py: "
        "python -m fusion_overlay.flags --readme"
    )
    assert text.count("| `cpp.") >= len(flags.FLAGS)


def test_every_requirement_names_a_flag_of_an_earlier_patch():
    from fusion_overlay import flags

    for flag in flags.FLAGS:
        for name in flag.requires:
            assert name in flags.BY_NAME, (flag.name, name)
            assert flags.BY_NAME[name].patch < flag.patch, (flag.name, name)


def test_status_warns_about_a_flag_whose_requirement_is_off(site_packages):
    apply(site_packages)
    env = {"TORCHINDUCTOR_CPP_HOIST_INVARIANT_LOADS": "0",
           "TORCHINDUCTOR_CPP_OUTER_BLOCK_FUSION": "0",
           "TORCHINDUCTOR_CPP_OUTER_BLOCK_PREPEND": "0"}  # fmt: skip
    warnings = tool.flag_warnings(env)
    assert warnings == [
        "cpp.block_local_buffers is on but does nothing: it requires "
        "cpp.outer_block_fusion (off)",
        "cpp.outer_block_tiles is on but does nothing: it requires "
        "cpp.outer_block_fusion (off)",
        "cpp.softmax_reciprocal is on but does nothing: it requires "
        "cpp.hoist_invariant_loads (off)",
    ]
    status = subprocess.run(
        [sys.executable, "-m", "fusion_overlay.overlay", "status", "--target",
         str(site_packages)], cwd=REPO_ROOT, capture_output=True, text=True,
        env={**os.environ, **env},
    ).stdout  # fmt: skip
    assert "warning: cpp.softmax_reciprocal is on but does nothing" in status
    assert tool.flag_warnings({}) == []  # the defaults: every flag on


def test_every_relative_link_of_the_readme_and_docs_resolves():
    import re

    broken = [
        (str(page.relative_to(REPO_ROOT)), link)
        for page in [REPO_ROOT / "README.md", *REPO_ROOT.glob("docs/**/*.md")]
        for link in re.findall(r"\]\(([^)#\s]+)", page.read_text())
        if not link.startswith("http") and not (page.parent / link).exists()
    ]
    assert not broken
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) <= 250


# --------------------------------------------------------------------------
# the installed tool


def tracked_files(tmp_path: Path) -> Path:
    """The checkout's tracked files, as `pip install git+<repo>` clones them:
    setuptools' build/lib of an earlier build in the checkout would leak
    modules that are no longer in the overlay into the wheel."""
    src = tmp_path / "src"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True, capture_output=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (REPO_ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, src / rel)
    return src


def test_the_installed_tool_applies_verifies_and_reverts_without_the_checkout(
    site_packages, tmp_path
):
    """`pip install .` (as `pip install git+<repo>` does): the wheel carries
    the series and the overlay's modules, the dev tooling stays out, and
    `fusion-overlay` run outside the checkout applies, verifies, reports and
    reverts on a torch tree of the release under test."""
    import zipfile

    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--no-build-isolation", "-w", str(dist), str(tracked_files(tmp_path))],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (built,) = dist.glob("inductor_fusion_overlay-*.whl")
    names = zipfile.ZipFile(built).namelist()
    for release in supported_releases():  # every release's series
        folder = f"fusion_overlay/patches/{release}/"
        assert f"{folder}series" in names and f"{folder}upstream-sha256.txt" in names
        patches = [n for n in names if n.startswith(f"{folder}0")]
        assert len(patches) == len(load_series(patches_dir_for(release)).patches)
    modules = {n.removeprefix("fusion_overlay/torch_overlay/") for n in names
               if n.startswith("fusion_overlay/torch_overlay/")}  # fmt: skip
    assert modules == set(tool.load_overlay().modules)
    assert not [n for n in names if n.startswith("tools/")]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", str(built)],
        check=True, capture_output=True,
    )  # fmt: skip
    before = snapshot(site_packages)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [str(venv / "bin" / "fusion-overlay"), *args, "--target",
             str(site_packages)],
            cwd=tmp_path, capture_output=True, text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    cli("verify")
    cli("apply")
    assert "applied, current, clean" in cli("status")
    assert "ok: overlay applied" in cli("verify")
    cli("revert")
    assert snapshot(site_packages) == before
