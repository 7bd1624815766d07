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
import math
from typing import TYPE_CHECKING, cast

import sympy
import torch
from torch._inductor import metrics
from torch._inductor.codegen.cpp import CppScheduling, CppVecKernel, TilingSelect
from torch._inductor.virtualized import V

from ..costs import (
    INNER_TO_OUTER,
    SMALL_KERNEL_ITERATIONS,
    VECTOR_LANES,
    balances_over_threads,
    refetches_code,
    rows_feed_every_thread,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch._inductor.codegen.cpp import CppKernelProxy, OuterLoopFusedSchedulerNode


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
        indices = super()._select_tiling_indices(fn_list, var_sizes_list, tiling_factor)
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


def _outer_levels(proxy: CppKernelProxy, depth: int):
    loops = proxy.loop_nest.loops if proxy.loop_nest else None
    return list(loops[:depth]) if loops and len(loops) >= depth else None


def _same_outer_loops(proxies: Sequence[CppKernelProxy], depth: int, attrs) -> bool:
    """Whether all kernels agree on ``attrs`` of every level above ``depth``."""
    levels = [_outer_levels(p, depth) for p in proxies]
    if any(lv is None for lv in levels):
        return False
    first = levels[0]
    return all(
        getattr(a, attr) == getattr(b, attr)
        for other in levels[1:]
        for a, b in zip(first, other)
        for attr in attrs
    )


def tiles_a_fused_outer_level(proxies: Sequence[CppKernelProxy], depth: int) -> bool:
    """Whether a kernel vector-tiles one of the loop levels to be fused.

    Outer-loop local buffers hold the data of one outer iteration: they are
    sized and indexed by the levels below the fusion depth.  When a fused outer
    level is tiled, one iteration covers ``steps`` outer indices, which all
    write the same buffer slots; the consumer then reads the last one back for
    every index (stock 2.13.0 miscompiles upstream's
    test_outer_loop_local_buffer_with_tiled_outer_dim this way).  The caller
    drops that attempt; the re-tiled attempt then fuses with untiled outer
    levels.
    """
    return any(
        level.steps != 1
        for proxy in proxies
        for level in (_outer_levels(proxy, depth) or ())
    )


def is_vectorized(proxy: CppKernelProxy) -> bool:
    return any(isinstance(kernel, CppVecKernel) for kernel in proxy.kernels)


def size_hint(size) -> int:
    return V.graph.sizevars.optimization_hint(
        sympy.sympify(size), fallback=_UNKNOWN_SIZE_HINT
    )


def _first_inner_range(proxy: CppKernelProxy, depth: int) -> int:
    """Range of the kernel's first loop below the fusion depth (0 if none)."""
    ranges = proxy.call_ranges or ()
    return size_hint(ranges[depth]) if len(ranges) > depth else 0


def _vector_iterations_below(proxy: CppKernelProxy, depth: int) -> float:
    """Iterations of the kernel's loops below the fusion depth, counted in
    vectors of its tiling (scalar kernels count each element)."""
    ranges = proxy.call_ranges or ()
    elements = math.prod(size_hint(size) for size in ranges[depth:])
    lanes = max(
        (k.tiling_factor for k in proxy.kernels if isinstance(k, CppVecKernel)),
        default=1,
    )
    return elements / lanes


def _ops(member) -> int:
    """Loop-body ops of an outer-loop fused node's member (its code size)."""
    return sum(sum(sn.loop_body.op_counts.values()) for sn in member.get_nodes())


def _iterations(proxy: CppKernelProxy) -> int:
    """Number of scalar iterations of the kernel's loop body (its work)."""
    return math.prod(size_hint(size) for size in proxy.call_ranges or ())


def _fused_for_block_reuse(node: OuterLoopFusedSchedulerNode) -> bool:
    """Whether the node was fused for the cache reuse of each outer block
    (the backend's ``CppScheduling.fused_for_block_reuse``)."""
    backend = node.scheduler.get_backend(node.get_device())
    return cast(CppScheduling, backend).fused_for_block_reuse(node)


class OuterLoopRetile:
    """One re-tiling attempt for a node whose stock outer-loop fusion failed.

    It replaces stock's acceptance test (``check_outer_fusion_loop_level_attr``)
    for the attempt with three checks: the outer levels agree, the fused outer
    loop is still the one worth parallelizing, and little vectorized work turns
    scalar.  The thresholds (INNER_TO_OUTER, ...) are the cost model's,
    costs.py.
    """

    def __init__(self, node: OuterLoopFusedSchedulerNode, vectorized_before):
        self.node = node
        self.depth = node.outer_loop_fusion_depth
        self.vectorized_before: list[bool] = vectorized_before

    @classmethod
    def for_failed_attempt(
        cls,
        node: OuterLoopFusedSchedulerNode,
        proxies: Sequence[CppKernelProxy],
        vectorized: list[bool],
    ) -> OuterLoopRetile | None:
        """Return an attempt when re-tiling could repair the failed merge.
        ``vectorized``: whether stock's attempt vectorized each kernel (the
        proxies are stock's, or first_attempt.py's with stock's record)."""
        depth = node.outer_loop_fusion_depth
        if len(proxies) != len(node.get_outer_nodes()):
            return None  # stock attempt did not reach the loop-level check
        if not _same_outer_loops(proxies, depth, ("var", "size", "offset")):
            log_retile(node, "not attempted: outer loop ranges differ")
            return None
        retile = cls(node, vectorized)
        return None if retile.refused_before_codegen(proxies) else retile

    def refused_before_codegen(self, stock_proxies: Sequence[CppKernelProxy]) -> bool:
        """Whether the vector-work guard refuses the attempt whatever its kernels.

        A kernel that stock vectorized and that has no loop level below the
        fusion depth is scalar in the attempt, whatever ``select_tiling``
        decides (``InnerLevelTilingSelect`` offers it no level).  That lower
        bound of the lost work decides the guard whenever it already refuses,
        and then generating the attempt's kernels only to drop them is
        skipped: a per-element epilogue fused to short row reductions, as a
        small ``Linear``'s bias add, is refused this way.
        """
        work = [_iterations(p) for p in stock_proxies]
        lost = sum(
            w
            for w, before, proxy in zip(work, self.vectorized_before, stock_proxies)
            if before and len(proxy.call_ranges or ()) <= self.depth
        )
        if self._loses_vector_work(lost, sum(work)):
            log_retile(
                self.node,
                "not attempted: cost guard: %d of %d iterations or more turn scalar",
                lost,
                sum(work),
            )
            return True
        return False

    def prepare(self, proxy: CppKernelProxy) -> None:
        """Restrict the proxy's vector tiling to the levels below the fusion depth."""
        proxy.tiling_select_cls = functools.partial(
            InnerLevelTilingSelect, self.depth
        )

    def accepts(self, proxies: Sequence[CppKernelProxy]) -> bool:
        """Decide whether the re-tiled kernels are merged (else: stock fallback)."""
        if not _same_outer_loops(
            proxies, self.depth, ("var", "size", "offset", "steps")
        ):
            log_retile(self.node, "rejected: outer levels still differ after re-tiling")
            return False
        if not self.keeps_parallelism(proxies):
            log_retile(self.node, "rejected: the inner loops are better parallelized")
            return False
        if not self._keeps_vector_work(proxies):
            return False
        if self.refetches_code(proxies):
            return False
        log_retile(self.node, "merged with re-tiled kernels (depth %d)", self.depth)
        metrics.cpp_outer_loop_retiled += 1
        return True

    def keeps_parallelism(self, proxies: Sequence[CppKernelProxy]) -> bool:
        """Parallelism guard: the fused outer loop must be worth splitting.

        ``omp for`` splits only the fused outer loop.  Like stock, we refuse
        when a kernel's first inner loop is more than INNER_TO_OUTER times
        longer than the outer loops (it is better parallelized on its own),
        unless the outer loop still gives every thread an equal share or
        enough iterations to balance and either the whole node is small
        enough that splitting the inner loop would not pay for itself, or
        every thread gets ROWS_PER_THREAD rows that each stay in cache
        between the passes (GroupNorm(8, 64) over (8, 64, 64, 64), 64 groups
        of 32768 elements: 3 nests -> 1).
        A fusion chosen for the cache reuse of each outer block
        (``CppScheduling.fused_for_block_reuse``) only has to balance: parallel inner
        loops would give that reuse up.
        """
        levels = _outer_levels(proxies[0], self.depth) or ()
        outer = math.prod(size_hint(level.size) for level in levels)
        inner_heavy = any(
            _first_inner_range(p, self.depth) > outer * INNER_TO_OUTER for p in proxies
        )
        if not inner_heavy:
            return True
        balanced = balances_over_threads(outer)
        if _fused_for_block_reuse(self.node):
            return balanced
        iterations = max(_iterations(p) for p in proxies)
        if iterations <= SMALL_KERNEL_ITERATIONS:
            return balanced
        return rows_feed_every_thread(outer, iterations // max(outer, 1))

    def _keeps_vector_work(self, proxies: Sequence[CppKernelProxy]) -> bool:
        """Cost guard: the merge must not lose more vector work than it is worth.

        A kernel that was vectorized and is now scalar costs about VECTOR_LANES
        times more per iteration.  We accept when that extra scalar work stays
        within one vectorized pass over the fused node's total work, which the
        merge saves at least once (the per-row results are reloaded from cache
        instead of memory).  Per-row kernels like LayerNorm's mean pass easily.
        """
        work = [_iterations(p) for p in proxies]
        lost = sum(
            w
            for w, before, proxy in zip(work, self.vectorized_before, proxies)
            if before and not is_vectorized(proxy)
        )
        if self._loses_vector_work(lost, sum(work)):
            log_retile(
                self.node,
                "rejected by cost guard: %d of %d iterations would turn scalar",
                lost,
                sum(work),
            )
            return False
        return True

    def refetches_code(self, proxies: Sequence[CppKernelProxy]) -> bool:
        """Code guard: the merged body must not be fetched for a few vectors.

        Merged, every outer iteration runs each kernel's loops below the
        depth once, and then the next kernel's.  Where the kernels' code
        together overflows the instruction cache, each outer iteration
        fetches all of it again, and a kernel that runs one or two vector
        iterations per outer iteration spends more time fetching its code
        than running it.  Stock's separate nests keep each kernel's code hot
        over all its iterations; a shallower depth (0018) gives each kernel
        more work per fetch.  The iterations are averaged over the kernels
        weighted by their ops: a per-row kernel of a few ops (LayerNorm's
        mean) runs once per row whatever the depth, and costs little code.
        (TorchBench's turbulent_kinetic_energy merges 26 kernels over
        columns of 26 floats.)
        """
        ops = [_ops(member) for member in self.node.get_outer_nodes()]
        iterations = [_vector_iterations_below(p, self.depth) for p in proxies]
        # each kernel's code runs its iterations per fetch of that code
        mean = sum(o * i for o, i in zip(ops, iterations)) / max(sum(ops), 1)
        if refetches_code(sum(ops), mean):
            log_retile(
                self.node,
                "rejected: a body of %d ops is fetched for %.1f vector "
                "iterations per kernel",
                sum(ops),
                mean,
            )
            return True
        return False

    @staticmethod
    def _loses_vector_work(lost: int, work: int) -> bool:
        return lost * VECTOR_LANES > work


def log_retile(node: OuterLoopFusedSchedulerNode, msg: str, *args) -> None:
    fusion_log.debug("outer-loop retile %s: " + msg, node.get_name(), *args)
