"""tools/hooks.py: docs/hooks.md, where upstream calls each overlay module."""

from __future__ import annotations

from pathlib import Path

import torch._inductor

from tools import hooks

INDUCTOR = Path(torch._inductor.__file__).parent


def test_the_hooks_page_is_current():
    assert hooks.main(["--check"]) == 0, "run: python -m tools.hooks --write"


def test_call_sites_name_the_upstream_methods_that_call_a_module():
    sites = hooks.call_sites(INDUCTOR)
    assert "cpp.py: CppScheduling.codegen_outer_loop_node" in sites["outer_loop.retile"]
    assert "cpp.py: CppVecKernel.store" in sites["emitters.streaming_stores"]
    assert "ir.py: Reduction.create" in sites["lowering.outer_reduction_blocks"]
    # regroup is reached through the fallbacks, never from upstream directly
    assert "outer_loop.regroup" not in sites


def test_each_module_row_names_its_patches_and_their_flags():
    row = next(
        line for line in hooks.render(INDUCTOR).splitlines()
        if line.startswith("| `outer_loop.fallbacks` |")
    )  # fmt: skip
    assert "0002, 0012, 0018, 0020" in row
    assert "`outer_loop_regroup`" in row and "`outer_block_prepend`" in row
