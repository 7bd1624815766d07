"""Split a consumer's outer loop so that it shares the outer loops of its producer.

Outer-loop fusion on the C++ backend needs both nodes to start with the same
loop ranges.  Normalizations produce chains whose ranges only agree after a
split: GroupNorm's statistics loop over ``(N*G, C/G*H*W)`` while its affine
output loops over ``(N*C, H*W)``.  Splitting ``N*C`` into ``(N*G, C/G)`` gives the
output ``(N*G, C/G, H*W)``, which shares the outer ``N*G`` loop, so the whole
normalization becomes one loop over groups.

A split reindexes the consumer's iteration space into another factorization of
the same flat index (``LoopBody.reindex_iter_loops``): the visiting order and
therefore every memory access order stay as they were.  We only split where the
producer's outer extent ends inside one level of the consumer, so the inner
loop variables keep affine index expressions (only the outer variable, which
is fixed inside an outer iteration, appears under division or modulo).

The mutation happens inside ``Scheduler.can_fuse``, whose loop-mutation tracker
rolls it back when the fusion is rejected.

Flag: ``config.cpp.outer_loop_split`` (TORCHINDUCTOR_CPP_OUTER_LOOP_SPLIT).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import sympy
import torch
from torch._inductor.scheduler import (
    FusedSchedulerNode,
    SchedulerNode,
    refresh_group_node_dependencies,
)

from ..costs import SMALL_CONSUMER_RATIO, strided_inner_bytes
from ..nodes import static_sizes, under_rollback_scope

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch._inductor.scheduler import BaseSchedulerNode


fusion_log = torch._logging.getArtifactLogger(__name__, "fusion")


def shared_outer_levels(
    sizes1: Sequence[sympy.Expr], sizes2: Sequence[sympy.Expr]
) -> int:
    """Number of leading loop levels with the same range in both nodes.

    Compared one by one: symbolic ranges have no order, only equality.
    """
    shared = 0
    for a, b in zip(sizes1, sizes2):
        if a != b:
            break
        shared += 1
    return shared


def split_for_outer_extent(
    sizes: Sequence[int], outer: Sequence[int]
) -> list[int] | None:
    """Refactor ``sizes`` so that it starts with ``outer``, or return None.

    The split is exact when the outer extent ends inside one level ``i``:
    ``prod(sizes[:i])`` divides it and the rest of it divides ``sizes[i]``.
    Levels before ``i`` and the split-off part of level ``i`` become the outer
    loops; the remainder of level ``i`` and all later levels stay as they
    were, so the inner loop variables keep their affine index expressions.
    ``(2, 16), (4,)`` gives ``(4, 8)``; ``(32, 1024), (4,)`` gives
    ``(4, 8, 1024)``; ``(6, 10), (4,)`` has no exact split.
    """
    target = math.prod(outer)
    before = 1
    for i, size in enumerate(sizes):
        if target % before == 0 and size % (target // before) == 0:
            remainder = size // (target // before)
            new_sizes = [
                *outer,
                *([remainder] if remainder > 1 else []),
                *sizes[i + 1 :],
            ]
            return None if new_sizes == list(sizes) else new_sizes
        before *= size
        if before > target:
            return None
    return None


def _outer_sizes_of(node: BaseSchedulerNode, depth: int | None) -> list[int] | None:
    """The outer loop ranges a consumer of ``node`` has to share."""
    _, (iter_sizes, reduce_sizes) = node.group
    sizes = static_sizes(iter_sizes)
    if not sizes or not reduce_sizes:
        # Producers without a reduction fuse with their consumers directly.
        return None
    return sizes[:depth] if depth is not None else sizes


def _leaf_nodes(node: BaseSchedulerNode) -> list[SchedulerNode] | None:
    if not isinstance(node, (SchedulerNode, FusedSchedulerNode)):
        return None
    leaves = node.get_nodes()
    if not all(isinstance(sn, SchedulerNode) for sn in leaves):
        return None
    return list(leaves)  # type: ignore[arg-type]


def _worth_splitting(
    producer: BaseSchedulerNode, old: Sequence[int], new: Sequence[int]
) -> bool:
    """Cost guard: keep the innermost extent unless the consumer is
    SMALL_CONSUMER_RATIO times smaller than its producer."""
    if old[-1] == new[-1]:
        return True
    _, (iter_sizes, reduce_sizes) = producer.group
    producer_work = math.prod(static_sizes([*iter_sizes, *reduce_sizes]) or [0])
    return math.prod(new) * SMALL_CONSUMER_RATIO <= producer_work


def _planned_split(
    producer: BaseSchedulerNode, consumer: BaseSchedulerNode
) -> tuple[list[SchedulerNode], list[int], list[int]] | None:
    """(consumer leaves, old sizes, new sizes) of a worthwhile split, or None."""
    depth = getattr(producer, "outer_loop_fusion_depth", None)
    outer = _outer_sizes_of(producer, depth)
    leaves = _leaf_nodes(consumer)
    if outer is None or leaves is None:
        return None
    _, (iter_sizes, reduce_sizes) = consumer.group
    sizes = static_sizes(iter_sizes)
    if reduce_sizes or not sizes:
        return None
    if any(
        tuple(sn.get_ranges()[0]) != tuple(iter_sizes) or sn.get_ranges()[1]
        for sn in leaves
    ):
        return None  # members do not share one iteration space
    new_sizes = split_for_outer_extent(sizes, outer)
    if new_sizes is None or not _worth_splitting(producer, sizes, new_sizes):
        return None
    if _reduces_across_strided_memory(producer):
        return None
    return leaves, sizes, new_sizes


def _reduces_across_strided_memory(producer: BaseSchedulerNode) -> bool:
    """Cost guard: the producer's reduction must walk contiguous memory.

    A reduction over a strided dimension (LayerNorm over the channels of an
    NCHW tensor) is vectorized across its outer loop instead.  Fusing more
    kernels into that tiled outer loop makes the ConvNeXt-style LayerNorm
    slower than stock's separate loop nests.
    """
    return any(
        strided_inner_bytes(sn) > 0
        for sn in producer.get_nodes()
        if isinstance(sn, SchedulerNode) and sn.is_reduction()
    )


def _apply_split(
    consumer: BaseSchedulerNode, leaves: Sequence[SchedulerNode], new_sizes
) -> None:
    for sn in leaves:
        sn.apply_loop_reindexing([sympy.Integer(s) for s in new_sizes])
        # CPU deps are compared in normalized form (canonical var names).
        sn.refresh_dependencies(normalize=True, need_clear_tiling_cache=False)
    if isinstance(consumer, FusedSchedulerNode):
        consumer.group = leaves[0].group
        refresh_group_node_dependencies(consumer)


def split_for_outer_loop_fusion(
    scheduling, producer: BaseSchedulerNode, consumer: BaseSchedulerNode
) -> bool:
    """Whether ``consumer`` can share ``producer``'s outer loops after a split.

    Inside ``Scheduler.can_fuse`` the split is applied (and rolled back by the
    scheduler if the fusion is rejected); elsewhere, e.g. when fusion pairs
    are ranked, this only answers whether the split would apply.
    """
    from torch._inductor import config

    if not config.cpp.outer_loop_split:
        return False
    plan = _planned_split(producer, consumer)
    if plan is None:
        return False
    leaves, sizes, new_sizes = plan
    if not under_rollback_scope(leaves):
        return True
    _apply_split(consumer, leaves, new_sizes)
    fusion_log.debug(
        "outer-loop split: %s reindexed %s -> %s to share the outer loops of %s",
        consumer.get_name(),
        sizes,
        new_sizes,
        producer.get_name(),
    )
    return scheduling.outer_loop_fusion_depth(producer, consumer) >= 1
