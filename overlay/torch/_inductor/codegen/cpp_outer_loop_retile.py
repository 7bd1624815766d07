"""Re-tile the kernels of an outer-loop fused node so that their outer loops merge.

The C++ backend generates every kernel of an ``OuterLoopFusedSchedulerNode`` on its
own and then merges the loop levels above the fusion depth, but only when all
kernels agree on them (``check_outer_fusion_loop_level_attr``).  A kernel whose
vector tiling landed on one of those outer levels breaks the agreement and the
whole group falls back to separate loop nests.  LayerNorm is the common case: its
``mean = sum / N`` kernel has a single loop over rows, which is vectorized with
step 16, while the reductions around it loop over rows with step 1.

This module drives a second attempt: every kernel is generated again with vector
tiling restricted to the levels below the fusion depth (an inner level, or none
for a kernel that has nothing below it).  The attempt is kept only when the outer
levels then agree and the cost guard accepts the new tiling; otherwise the
caller rolls back to stock codegen.

Flag: ``config.cpp.outer_loop_fusion_retile`` (TORCHINDUCTOR_CPP_OUTER_LOOP_RETILE).
Counter: ``metrics.cpp_outer_loop_retiled``.  Decisions are logged under
``TORCH_LOGS="+fusion"``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import sympy

import torch

from .. import metrics
from ..virtualized import V
from .cpp import CppVecKernel, TilingSelect


if TYPE_CHECKING:
    from collections.abc import Sequence

    from .cpp import CppKernelProxy, OuterLoopFusedSchedulerNode


fusion_log = torch._logging.getArtifactLogger(__name__, "fusion")

# Fallback iteration count for symbolic sizes that have no hint.
_UNKNOWN_SIZE_HINT = 8192


class InnerLevelTilingSelect(TilingSelect):
    """Tiling selection that never vectorizes a loop level above ``min_level``.

    When upstream's choice lies on an outer level, the innermost level below
    ``min_level`` is offered instead; ``select_tiling``'s own heuristics may
    still decline it (non-contiguous accesses), which leaves the kernel scalar.
    """

    def __init__(self, min_level: int) -> None:
        super().__init__()
        self.min_level = min_level

    def _select_tiling_indices(self, fn_list, var_sizes_list, tiling_factor):
        indices = super()._select_tiling_indices(
            fn_list, var_sizes_list, tiling_factor
        )
        num_levels = _num_levels(var_sizes_list)
        indices = [i + num_levels if i < 0 else i for i in indices]
        inner = [i for i in indices if i >= self.min_level]
        if inner or not indices:
            return inner
        innermost = num_levels - 1
        return [innermost] if innermost >= self.min_level else []


def _num_levels(var_sizes_list) -> int:
    group, reduction_group = max(var_sizes_list, key=lambda sizes: len(sizes[1]))
    return len(group) + len(reduction_group)


def _has_tiled_outer_level(proxy: CppKernelProxy, depth: int) -> bool:
    loops = proxy.loop_nest.loops if proxy.loop_nest else None
    return bool(loops) and any(loop.steps != 1 for loop in loops[:depth])


def _is_vectorized(proxy: CppKernelProxy) -> bool:
    return any(isinstance(kernel, CppVecKernel) for kernel in proxy.kernels)


def _iterations(proxy: CppKernelProxy) -> int:
    """Number of scalar iterations of the kernel's loop body (its work)."""
    total = 1
    for size in proxy.call_ranges or ():
        total *= V.graph.sizevars.optimization_hint(
            sympy.sympify(size), fallback=_UNKNOWN_SIZE_HINT
        )
    return total


class OuterLoopRetile:
    """One re-tiling attempt for a node whose stock outer-loop fusion failed."""

    # Vector lanes of the widest float ISA we target; scalar work that replaces
    # vector work costs roughly this much more per element.
    VECTOR_LANES = 16

    def __init__(self, node: OuterLoopFusedSchedulerNode, vectorized_before):
        self.node = node
        self.depth = node.outer_loop_fusion_depth
        self.vectorized_before: list[bool] = vectorized_before

    @classmethod
    def for_failed_attempt(
        cls, node: OuterLoopFusedSchedulerNode, proxies: Sequence[CppKernelProxy]
    ) -> OuterLoopRetile | None:
        """Return an attempt when re-tiling could repair the failed merge."""
        depth = node.outer_loop_fusion_depth
        if len(proxies) != len(node.get_outer_nodes()):
            return None  # stock attempt did not reach the loop-level check
        if not any(_has_tiled_outer_level(p, depth) for p in proxies):
            fusion_log.debug(
                "outer-loop retile: %s not attempted, the outer levels differ "
                "in more than vector tiling",
                node.get_name(),
            )
            return None
        return cls(node, [_is_vectorized(p) for p in proxies])

    def prepare(self, proxy: CppKernelProxy) -> None:
        """Restrict the proxy's vector tiling to the levels below the fusion depth."""
        proxy.tiling_select_cls = functools.partial(  # type: ignore[attr-defined]
            InnerLevelTilingSelect, self.depth
        )

    def accepts(self, proxies: Sequence[CppKernelProxy]) -> bool:
        """Cost guard: the merge must not lose more vector work than it is worth.

        A kernel that was vectorized and is now scalar costs about VECTOR_LANES
        times more per iteration.  We accept when that extra scalar work stays
        within one vectorized pass over the fused node's total work, which the
        merge saves at least once (the outer loop and the reloads of per-row
        results disappear).  Per-row kernels like LayerNorm's mean pass easily.
        """
        work = [_iterations(p) for p in proxies]
        lost = sum(
            w
            for w, before, proxy in zip(work, self.vectorized_before, proxies)
            if before and not _is_vectorized(proxy)
        )
        accepted = lost * self.VECTOR_LANES <= sum(work)
        fusion_log.debug(
            "outer-loop retile: %s %s (depth %d, scalarized work %d of %d)",
            self.node.get_name(),
            "merged" if accepted else "rejected by cost guard",
            self.depth,
            lost,
            sum(work),
        )
        if accepted:
            metrics.cpp_outer_loop_retiled += 1
        return accepted
