"""Merge an outer-loop fusion over fewer outer loops when its own depth fails.

The scheduler fuses nodes over every outer loop they share (the fusion depth).
The C++ kernels must then agree on those levels, and none may vector-tile
one of them.  When a kernel's good tiling lies on the last shared level, the
kernels cannot merge there: stock falls back to separate nests, and
re-tiling that kernel (outer_loop/retile.py) may leave it scalar, which
its cost guard refuses.  One level up the conflict is gone: the level is no
longer fused, so the kernel keeps its tiling inside the shared outer loops.

Example: an RMS norm followed by RoPE on interleaved pairs (``stack`` of the
rotated halves, then ``flatten``; upstream's
test_qknorm_interleaved_rope_fusion).  Fused over (B, H, S), the RoPE
kernel loses its 2-D tile over S and the pair index, and its stride-2 loads
and stores along the pair index alone exceed upstream's non-contiguous
threshold: scalar.  Over (B, H) it keeps the tile, and the norm's statistics
of a (B, H) block are read back from cache by the RoPE pass: one nest
instead of two.

Each shallower depth, deepest first, is tried as a re-tiling attempt (the
same acceptance: levels agree, parallelism and vector-work guards), only
where its outer loops give every thread a balanced share, and only for a
node whose loops pass the parallelism guard at the scheduler's depth (a
node refused for its long inner loops keeps stock's parallel inner loops).
Kernels that do not merge at any depth go on to the next fallback (0012's
regroup, then stock's separate nests).

Flag: ``config.cpp.outer_loop_shallower_fusion``
(TORCHINDUCTOR_CPP_OUTER_LOOP_SHALLOWER_FUSION).  Merges are counted in
``metrics.cpp_outer_loop_retiled`` and logged under ``TORCH_LOGS="+fusion"``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..costs import balances_over_threads
from .retile import OuterLoopRetile, log_retile, size_hint

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from torch._inductor.codegen.cpp import CppKernelProxy, OuterLoopFusedSchedulerNode


class ShallowerFusion(OuterLoopRetile):
    """A re-tiling attempt at a depth below the scheduler's (its own class so
    that its merges can be told from 0002's; the attempts are made only at
    depths whose fused loop balances over the threads)."""


def shallower_attempts(
    node: OuterLoopFusedSchedulerNode,
    stock_proxies: Sequence[CppKernelProxy],
    vectorized: list[bool],
) -> Iterator[tuple[OuterLoopFusedSchedulerNode, ShallowerFusion]]:
    """The node at each shallower depth worth trying, with its attempt.

    ``stock_proxies`` are the kernels of the failed attempt at the
    scheduler's depth, and ``vectorized`` says which of them stock's
    attempt vectorized: what the vector-work guard compares against.
    """
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    members = list(node.get_outer_nodes())
    if len(stock_proxies) != len(members):
        return  # stock's attempt stopped before its loop-level check
    if not OuterLoopRetile(node, vectorized).keeps_parallelism(stock_proxies):
        # The inner loops are better parallelized at the scheduler's depth;
        # a shallower one only adds those loops' work below the fused loop.
        return
    for depth in range(node.outer_loop_fusion_depth - 1, 0, -1):
        outer = _outer_iterations(node, depth)
        if not balances_over_threads(outer):
            # Stock's kernels parallelize their own, longer merged loops; the
            # shorter fused loop must still feed every thread evenly, and
            # shallower depths only have fewer outer iterations.
            break
        shallow = OuterLoopFusedSchedulerNode(node.scheduler, members, depth)
        log_retile(node, "retrying at depth %d (%d outer iterations)", depth, outer)
        attempt = ShallowerFusion(shallow, vectorized)
        if not attempt.refused_before_codegen(stock_proxies):
            yield shallow, attempt


def _outer_iterations(node: OuterLoopFusedSchedulerNode, depth: int) -> int:
    """Iterations of the node's first ``depth`` loops (shared by its members)."""
    _, (sizes, _) = node.get_outer_nodes()[0].group
    return math.prod(size_hint(size) for size in sizes[:depth])

