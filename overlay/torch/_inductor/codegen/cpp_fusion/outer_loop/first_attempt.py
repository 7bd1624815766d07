"""Generate an outer-loop fusion's kernels once where stock's attempt would fail.

Stock generates every member of an ``OuterLoopFusedSchedulerNode`` with its
own vector tiling and merges the kernels when they agree on the fused outer
levels.  When one member's tiling lies on such a level and its neighbour's
does not, the merge fails, and 0002's re-tile (retile.py) generates every
member again with the tiling kept below the fusion depth.  The kernels of
the failed attempt are dropped: generating them is most of what a failed
merge costs the compile.

In this first attempt every member's selection is made both ways, stock's
and the re-tile's (``InnerLevelTilingSelect``, which changes only a choice
that lies above the depth), before its vector kernels are generated:

- where the two agree, the kernel is the same either way;
- where they differ, the member gets stock's tiling while stock's kernels
  may still merge, and the re-tile's once the members selected so far show
  two neighbours that differ on a fused level: stock's check compares
  neighbours level by level, so it fails for certain.

Then ``accepts``: kernels that all got stock's tiling are stock's attempt,
and stock's check decides as before.  Kernels that got the re-tile's tiling
wherever it differs are the re-tile's attempt, and its checks decide.  A
member that got stock's tiling before the failure was known leaves neither:
the fallbacks go on as after stock's failed attempt.  The generated code is
the one either attempt generates; only kernels generated to be dropped are
not.  On with ``config.cpp.outer_loop_fusion_retile``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import sympy
from torch._inductor.codegen.cpp import TilingSelect

from .. import flag_requirements
from .retile import InnerLevelTilingSelect, OuterLoopRetile

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch._inductor.codegen.cpp import CppKernelProxy, OuterLoopFusedSchedulerNode


@dataclasses.dataclass
class StockTiling:
    """One member's record: stock's tiling, and which tiling its kernel got
    (none for a kernel that selects no tiling, no vector ISA or no loops:
    scalar either way)."""

    proxy: CppKernelProxy
    changed: bool = False  # the re-tile's selection differs from stock's
    restricted: bool = False  # ... and the kernel got the re-tile's
    factors: tuple[int, ...] = ()
    indices: tuple[int, ...] = ()

    def stock_levels(self, depth: int):
        """The fused levels of stock's kernel as (var, size, offset, steps),
        None where the kernel has fewer loops.  Var and size do not depend on
        tiling; a tiled level has offset 0 and the factor as its steps
        (``LoopLevel.tile``)."""
        loops = self.proxy.loop_nest.loops if self.proxy.loop_nest else None
        if not loops or len(loops) < depth:
            return None
        levels, count = loops[:depth], len(loops)
        tiled = {i % count for i in self.indices}
        factor = sympy.Integer(self.factors[0]) if self.factors else sympy.S.One
        return [
            (
                level.var,
                level.size,
                sympy.S.Zero if i in tiled else level.offset,
                factor if i in tiled else level.steps,
            )
            for i, level in enumerate(levels)
        ]


class _StockIndices(TilingSelect):
    """Keeps the indices stock's heuristic picks, before any restriction."""

    stock_indices: list[int] | None = None

    def _select_tiling_indices(self, fn_list, var_sizes_list, tiling_factor):
        self.stock_indices = super()._select_tiling_indices(
            fn_list, var_sizes_list, tiling_factor
        )
        return self.stock_indices


class _GivenIndices(TilingSelect):
    """Stock's selection from indices its heuristic already picked (the
    indices take a trace of every loop body to find)."""

    def __init__(self, indices: list[int]) -> None:
        super().__init__()
        self.indices = indices

    def _select_tiling_indices(self, fn_list, var_sizes_list, tiling_factor):
        return list(self.indices)


class RecordingTilingSelect(InnerLevelTilingSelect, _StockIndices):
    """One member's selection in the first attempt (see the module's text)."""

    def __init__(self, attempt: FirstAttempt, record: StockTiling) -> None:
        super().__init__(attempt.depth)
        self.attempt = attempt
        self.record = record

    def _select_tiling_indices(self, fn_list, var_sizes_list, tiling_factor):
        indices = super()._select_tiling_indices(fn_list, var_sizes_list, tiling_factor)
        self.record.changed = indices != self.stock_indices
        return indices

    def select_tiling(self, fn_list, var_sizes_list):
        restricted = super().select_tiling(fn_list, var_sizes_list)
        record = self.record
        if not record.changed:
            record.factors, record.indices = map(tuple, restricted[:2])
            return restricted
        # select_tiling's later heuristics depend on the indices: stock's
        # outcome is known only by selecting again from stock's
        assert self.stock_indices is not None
        stock = _GivenIndices(self.stock_indices).select_tiling(
            fn_list, var_sizes_list
        )
        record.factors, record.indices = map(tuple, stock[:2])
        record.restricted = self.attempt.stock_fails()
        return restricted if record.restricted else stock


def first_attempt(node: OuterLoopFusedSchedulerNode) -> FirstAttempt | None:
    """The first attempt for ``node``: None (stock's) with the re-tile off."""
    if not flag_requirements.enabled("outer_loop_fusion_retile"):
        return None
    return FirstAttempt(node)


class FirstAttempt:
    """What ``try_outer_loop_fusion_with_local_buf`` takes as ``retile`` in
    its first attempt: ``prepare`` each member's proxy, then ``accepts``."""

    def __init__(self, node: OuterLoopFusedSchedulerNode) -> None:
        self.node = node
        self.depth = node.outer_loop_fusion_depth
        self.records: list[StockTiling] = []
        self.retile_decided = False  # the re-tile's checks ran on the kernels

    def prepare(self, proxy: CppKernelProxy) -> None:
        record = StockTiling(proxy)
        self.records.append(record)
        proxy.tiling_select_cls = functools.partial(RecordingTilingSelect, self, record)

    def stock_fails(self) -> bool:
        """Whether stock's kernels of the members selected so far fail stock's
        loop-level check for certain: two neighbours differ on a fused level
        (``check_outer_fusion_loop_level_attr`` compares neighbours level by
        level, and refuses at the first difference)."""
        levels = [record.stock_levels(self.depth) for record in self.records]
        if any(lv is None for lv in levels):
            return False  # not certain: stock's attempt decides
        return any(
            left != right
            for a, b in zip(levels, levels[1:])
            for left, right in zip(a, b)
        )

    def accepts(self, proxies: Sequence[CppKernelProxy]) -> bool:
        if not any(record.restricted for record in self.records):
            # the kernels are stock's: stock's check; its failure goes on to
            # the fallbacks as stock's attempt did
            return self.node.check_outer_fusion_loop_level_attr(proxies, self.depth)
        if any(r.changed and not r.restricted for r in self.records):
            # stock fails, but a member selected before that was known got
            # stock's tiling: the fallbacks' re-tile generates every kernel
            return False
        self.retile_decided = True
        retile = OuterLoopRetile.for_failed_attempt(
            self.node, proxies, self.stock_vectorized()
        )
        return retile is not None and retile.accepts(proxies)

    def stock_vectorized(self) -> list[bool]:
        """Whether stock's attempt vectorizes each member's kernel."""
        return [bool(record.indices) for record in self.records]
