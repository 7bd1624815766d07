"""tools/hooks.py: docs/hooks.md, where upstream calls each overlay module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch._inductor

from fusion_overlay import flags
from fusion_overlay.patchset import DEFAULT_RELEASE
from tools import hooks

INDUCTOR = Path(torch._inductor.__file__).parent


def _row(first_cell: str) -> str:
    """The page's row that starts with `first_cell` (a module or a flag)."""
    return next(
        line for line in hooks.render(INDUCTOR).splitlines()
        if line.startswith(f"| `{first_cell}` |")
    )  # fmt: skip


@pytest.mark.skipif(
    flags.RELEASE != DEFAULT_RELEASE,
    reason=f"the page is read from the default release's torch, {DEFAULT_RELEASE}",
)
def test_the_hooks_page_is_current():
    assert hooks.main(["--check"]) == 0, "run: python -m tools.hooks --write"


def test_call_sites_name_the_upstream_methods_that_call_a_module():
    sites = hooks.call_sites(INDUCTOR)
    outer_loop_node = "cpp.py: CppScheduling.codegen_outer_loop_node"
    assert outer_loop_node in sites["outer_loop.fallbacks"]
    assert "cpp.py: CppVecKernel.store" in sites["emitters.streaming_stores"]
    # through a BaseScheduling hook that CppScheduling overrides
    split = "ir.py: Reduction.create (BaseScheduling.outer_reduction_split)"
    assert split in sites["lowering.outer_reduction_blocks"]
    # through a class attribute the override reads
    softmax = sites["lowering.softmax_reciprocal"]
    decompose = "decomposition.py: _backend_decomposition (BaseScheduling.decompose)"
    assert decompose in softmax
    assert "cpp.py: CppScheduling.decompositions" in softmax
    # regroup is reached through the fallbacks, never from upstream directly
    assert "outer_loop.regroup" not in sites


def test_each_module_row_names_its_patches_and_their_flags():
    row = _row("outer_loop.fallbacks")
    assert "0002, 0012, 0018, 0020" in row
    assert "`outer_loop_regroup`" in row and "`outer_block_prepend`" in row


def _functions(*paths: Path) -> set[str]:
    """The names of the functions defined in ``paths``."""
    import ast

    return {
        node.name
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
    }


def test_every_flag_names_tests_that_exist():
    from fusion_overlay.flags import ALL_FLAGS as FLAGS

    for flag in FLAGS:
        assert flag.tests, flag.name
        for test in flag.tests:
            path, _, name = test.partition("::")
            source = hooks.REPO_ROOT / path
            assert source.is_file(), (flag.name, test)
            if name:
                assert name in _functions(source), (flag.name, test)


def test_a_flag_row_leads_to_its_module_hook_tests_and_page():
    row = _row("outer_loop_regroup")
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "0012"
    assert cells[2] == "`outer_loop.fallbacks`, `outer_loop.regroup`"
    assert "`cpp.py: CppScheduling.codegen_outer_loop_node`" in cells[3]
    assert cells[4] == "`test/test_outer_loop_regroup.py`"
    assert cells[5].startswith("[0012](features/0012-")
    page = hooks.PAGE.parent / cells[5].split("(")[1].rstrip(")")
    assert page.is_file()


@pytest.mark.skipif(
    "outer_loop_local_buffer_check" not in flags.NAMES,
    reason="the one flag without a page of its own is not in this release's series",
)
def test_a_flag_without_a_page_of_its_own_links_its_modules_feature():
    row = _row("outer_loop_local_buffer_check")
    assert "[0002](features/0002-" in row


def _features_table_tests() -> set[str]:
    """The files and test functions docs/features/README.md's table names in
    its tests column."""
    import re

    named: set[str] = set()
    page = hooks.REPO_ROOT / "docs" / "features" / "README.md"
    for line in page.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[3] != "tests":
            named.update(re.findall(r"`(test[^`]*)`", cells[3]))
    return named


def test_the_features_table_names_tests_that_exist():
    """The features table's tests column is written by hand, beside the
    registry's checked ``Flag.tests``: each file and test function it
    names exists."""
    functions = _functions(*(hooks.REPO_ROOT / "test").glob("test_*.py"))
    named = _features_table_tests()
    assert len(named) >= 25
    for test in named:
        if test.endswith(".py"):
            assert (hooks.REPO_ROOT / test).is_file(), test
        else:
            assert test in functions, test


def test_the_private_upstream_names_are_listed_with_the_modules_that_read_them():
    row = _row("_LoopStateSnapshot")
    assert "`scheduling.block_tiles`" in row and "rollback" in row
    # the accessors the series adds replaced these
    page = hooks.render(INDUCTOR)
    assert "| `_body` |" not in page
    assert "| `_get_outer_loop_fusion_depth` |" not in page


def test_a_private_upstream_name_without_a_reason_fails_the_page():
    overlay = {
        "torch/_inductor/codegen/cpp_fusion/new.py": (
            b"from torch._inductor.scheduler import _Unlisted\n"
            b"def f(node):\n    return node._body, torch._logging\n"
        )
    }
    assert hooks.private_upstream_names(overlay) == {
        "_Unlisted": ["new"],
        "_body": ["new"],
    }
    with pytest.raises(ValueError, match="_Unlisted"):
        hooks.private_rows(overlay)


def test_call_sites_follow_an_edit_of_an_upstream_file(tmp_path):
    # call_sites keeps its answer per version of the files it walks: an
    # edited file is walked again, even within the same second
    import os
    import shutil

    for rel in {*hooks.UPSTREAM, *hooks.NEUTRAL}:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(INDUCTOR / rel, tmp_path / rel)
    site = "lowering.py: _a_new_caller"
    assert site not in hooks.call_sites(tmp_path)["costs"]
    lowering = tmp_path / "lowering.py"
    mtime = lowering.stat().st_mtime_ns
    with lowering.open("a") as f:
        f.write(
            "\n\ndef _a_new_caller():\n"
            "    from .codegen.cpp_fusion import costs\n\n    return costs\n"
        )
    os.utime(lowering, ns=(mtime, mtime))  # the size alone tells the edit
    assert site in hooks.call_sites(tmp_path)["costs"]
