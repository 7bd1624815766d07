"""make rebase-check (tools/rebase_check.py) on drifted copies of the pinned files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT, snapshot

from fusion_overlay.patchset import load_series
from tools.rebase_check import check_series, report

CPP = "torch/_inductor/codegen/cpp.py"


def drift(root: Path, *edits: tuple[str, str], prepend: str = "") -> None:
    path = root / CPP
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(prepend + text)


def statuses(root: Path) -> dict[str, str]:
    return {r.name[:4]: r.status for r in check_series(root, load_series())}


def test_pinned_files_take_every_patch_at_its_line(site_packages):
    assert set(statuses(site_packages).values()) == {"clean"}


def test_moved_lines_are_an_offset_and_the_tree_is_not_changed(site_packages):
    drift(site_packages, prepend="# upstream moved on\n" * 5)
    before = snapshot(site_packages)
    results = check_series(site_packages, load_series())
    assert snapshot(site_packages) == before
    by_name = {r.name[:4]: r for r in results}
    assert by_name["0002"].status == "offset"
    assert {h.offset for h in by_name["0002"].hunks} == {5}
    assert by_name["0001"].status == "clean"  # config.py did not move


def leading_context_line(patch_number: str, path: str, pristine: str) -> str:
    """The first context line of one of the patch's hunks in `path` that
    appears once in the pristine file (what GNU patch's fuzz may drop)."""
    patch = next(p for p in load_series().patches if p.name.startswith(patch_number))
    in_file, lines = False, patch.data.decode().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("+++ "):
            in_file = line.startswith(f"+++ b/{path}")
        elif in_file and line.startswith("@@ "):
            first = lines[i + 1]
            if first.startswith(" ") and pristine.count(first[1:]) == 1:
                return first[1:]
    raise AssertionError(f"no {patch_number} hunk in {path} has a unique first line")


def test_a_changed_context_line_needs_fuzz(site_packages):
    line = leading_context_line("0002", CPP, (site_packages / CPP).read_text())
    drift(site_packages, (line, line.rstrip("\n") + "  # upstream edited this\n"))
    assert statuses(site_packages)["0002"] == "fuzz"


def test_a_changed_old_line_is_a_conflict_reported_with_its_hunk(site_packages):
    drift(site_packages, (
        "            tiling_select = TilingSelect()\n",
        "            tiling_select = TilingSelect(kernel_group)\n",
    ))  # fmt: skip
    results = check_series(site_packages, load_series())
    by_name = {r.name[:4]: r for r in results}
    assert by_name["0002"].status == "conflict"
    assert by_name["0003"].status == "clean"  # the other hunks of 0002 stayed
    text = report(results, fuzz=2)
    assert f"0002-cpp-outer-loop-retile.patch: {CPP} hunk #2" in text
    assert "    -            tiling_select = TilingSelect()" in text


def test_missing_upstream_file_is_reported(site_packages):
    (site_packages / "torch/_inductor/lowering.py").unlink()
    assert statuses(site_packages)["0004"] == "missing file"


def test_cli_exit_status(site_packages, tmp_path):
    def run(root: Path) -> int:
        return subprocess.run(
            [sys.executable, "-m", "tools.rebase_check", str(root)],
            cwd=REPO_ROOT, capture_output=True,
        ).returncode  # fmt: skip

    assert run(site_packages) == 0
    assert run(tmp_path / "nowhere") == 2
    drift(site_packages, ("            tiling_select = TilingSelect()\n", "\n"))
    assert run(site_packages) == 1
