"""A stored producer joins the kernel of its consumers (CPU).

GroupNorm over groups small enough for stock to unroll its reduction (at
most ``config.unroll_reductions_threshold`` elements) lowers to pointwise
kernels: the statistics over (groups,), reading their group's elements at
``S*g + k``, and the normalization over (groups, S).  Stock fuses them over
the group loop, element by element.  A reused erf or exp before the norm is
stored by a kernel of its own (an op too costly to recompute in each
consumer, see costs.py), whose output the statistics read a
group block at a time, so no dep matches element by element.
scheduling/block_fusion.py would fuse it block by block, but the scheduler
takes the element-wise pair first (a larger shared-data score), and an
outer-loop fusion that merges element by element is never extended
block-wise: one loop nest more than with erf inlined.

Here a producer that is not itself an outer-loop fusion may join such a
fusion in front, block by block, over exactly the fusion's depth (so the
members' merge is the one the fusion already makes, plus the producer's
kernel), or join a plain pointwise consumer over that consumer's loops.
Where the producer's loops were merged at lowering, its one loop is split
into those outer loops and the rest (``_split_and_score``, undone unless
the pair fuses).  scheduling/block_fusion.py's checks decide legality (every
read of the producer's output stays in its block, no mutation, no
intermediate node) and its cost guard applies (one outer iteration's reads
fit its budget, the outer loop feeds every thread).

Groups too large to unroll meet the same gap another way: erf over
(N, C, L) against the statistics over (N*G | C/G*L) share no dep as
indexed, and stock reindexes a pointwise producer onto a reduction's loops
only for pairs that already share data.  ``_reindexed_score`` reindexes it
(scheduling/loop_ordering.py's ``try_reindex_pointwise_for_reduction``, applied
only if a dep then matches) and leaves the decision to stock's vertical
fusion rules.

Rollback: if the members then fail to merge in codegen, the producer is
generated alone and the rest as the outer-loop fusion it was before
(``codegen_without_prepended_member``), never stock's fallback of one nest
per member.

Flag: ``config.cpp.outer_block_prepend`` (TORCHINDUCTOR_CPP_OUTER_BLOCK_PREPEND).
"""

from __future__ import annotations

import itertools
import math

import sympy
from torch._inductor import dependencies
from torch._inductor.loop_body import LoopBody
from torch._inductor.scheduler import _LoopStateSnapshot, fusion_log

from .. import flag_requirements
from ..nodes import is_outer_loop_fused, under_rollback_scope
from ..outer_loop.regroup import codegen_alone
from . import loop_ordering
from .block_fusion import (
    block_fusion_score_at,
    members_join_by_block,
    remembers_refusals,
)
from .block_tiles import (
    apply_loop_bodies,
    leaves_of_one_space,
    static_iter_sizes,
)


@remembers_refusals
def prepend_fusion_score(scheduler, node1, node2) -> int:
    """Bytes shared when node1 joins node2, an element-wise outer-loop
    fusion, in front and block by block; else 0."""
    if not _joins_in_front(scheduler, node1, node2):
        return 0
    if is_outer_loop_fused(node2):
        depth = node2.outer_loop_fusion_depth
        if _fusion_depth(scheduler, node1, node2) == depth:
            return block_fusion_score_at(scheduler, node1, node2, depth)
        outer = static_iter_sizes(node2.get_outer_nodes()[0])
        outer = outer[:depth] if outer is not None else None
    elif node2.is_reduction():
        return _reindexed_score(scheduler, node1, node2)
    else:
        # 0009 refused the pair as it is: node2's loops as the outer ones
        outer = static_iter_sizes(node2)
    if not outer:
        return 0
    return _split_and_score(scheduler, node1, node2, outer)


def _reindexed_score(scheduler, node1, node2) -> int:
    """Reindex node1 onto the reduction node2's loops when their deps then
    match, and score the pair as stock does; 0 (and nothing changed) if not.

    Stock reindexes a pointwise producer onto a reduction's loops only for
    pairs that already share data; a stored producer whose loops were kept
    apart at lowering ((N, C, L) against GroupNorm's (N*G | C/G*L)) shares
    none as indexed, so the pair never gets there: erf stored by its own
    loop nest where stock, inlining it, has none."""
    leaves = leaves_of_one_space(node1)
    if leaves is None or node1.is_reduction():
        return 0
    if not under_rollback_scope(leaves):
        return 0  # outside can_fuse's rollback scope: never mutate
    saved = _LoopStateSnapshot.create((node1,))
    if loop_ordering.try_reindex_pointwise_for_reduction(scheduler, node1, node2):
        score = scheduler.score_fusion_memory(node1, node2)
        if score > 0:
            return score
    saved.restore()
    return 0


def _fusion_depth(scheduler, node1, node2) -> int:
    backend = scheduler.get_backend(node1.get_device())
    return backend.outer_loop_fusion_depth(node1, node2)


def _split_and_score(scheduler, node1, node2, outer: list[int]) -> int:
    """Split node1's single loop into ``outer`` loops and the rest, and
    score the pair over ``outer``; 0 (and nothing changed) if that does not
    fuse.

    A pointwise producer's loops are merged at lowering ((N, C, L) -> N*C*L
    when contiguous), so the fusion's outer loops over (N, groups) are
    inside its one loop, not its first levels."""
    leaves = leaves_of_one_space(node1)
    sizes = static_iter_sizes(node1)
    if leaves is None or sizes is None or node1.is_reduction():
        return 0
    depth = len(outer)
    blocks = math.prod(outer)
    if math.prod(sizes) % blocks or math.prod(sizes) == blocks:
        return 0
    if not under_rollback_scope(leaves):
        return 0  # outside can_fuse's rollback scope: never mutate
    saved = _LoopStateSnapshot.create((node1,))
    apply_loop_bodies(node1, leaves, lambda body: body.merge_loops())
    score = 0
    # every member must have merged to one loop: one whose loads stride
    # differently keeps several, which the split cannot index
    merged = (
        static_iter_sizes(node1) if leaves_of_one_space(node1) is not None else None
    )
    if merged is not None and len(merged) == 1:
        inner = merged[0] // blocks
        apply_loop_bodies(node1, leaves, lambda body: _split_body(body, outer, inner))
        if _fusion_depth(scheduler, node1, node2) == depth:
            score = block_fusion_score_at(scheduler, node1, node2, depth)
    if score > 0:
        fusion_log.debug(
            "outer-block prepend: %s split over the outer loops %s of %s",
            node1.get_name(),
            outer,
            node2.get_name(),
        )
        return score
    saved.restore()
    return 0


def _split_body(body: LoopBody, outer: list[int], inner: int) -> LoopBody:
    """body over (*outer, inner) for its one loop of prod(outer) * inner."""
    new_sizes = [*map(sympy.Integer, outer), sympy.Integer(inner)]
    reduce_sizes = list(body.sizes[1])

    def split(*indices):
        index = [*itertools.chain.from_iterable(indices)]
        flat = sympy.Integer(0)
        for var, size in zip(index[: len(new_sizes)], new_sizes):
            flat = flat * size + var
        return body([flat], index[len(new_sizes) :])

    return _as_loop_body(split, new_sizes, reduce_sizes, "t")


def _as_loop_body(fn, sizes, reduce_sizes, prefix: str) -> LoopBody:
    (iter_vars, reduce_vars), var_ranges = dependencies.index_vars_no_squeeze(
        sizes, reduce_sizes, prefix=prefix
    )
    inner = LoopBody(fn, (iter_vars, reduce_vars), var_ranges, iter_vars, reduce_vars)
    (iter_vars2, reduce_vars2), var_ranges2 = dependencies.index_vars_no_squeeze(
        sizes, reduce_sizes, prefix="p"
    )
    return LoopBody(
        inner, (iter_vars2, reduce_vars2), var_ranges2, iter_vars2, reduce_vars2
    )


def _joins_in_front(scheduler, node1, node2) -> bool:
    if not flag_requirements.enabled("outer_block_prepend"):
        return False
    if is_outer_loop_fused(node1):
        return False
    if is_outer_loop_fused(node2) and members_join_by_block(
        node2.get_outer_nodes()
    ):
        return False  # a block fusion: scheduling/block_fusion.py extends it
    device = node1.get_device()
    if device is None or device.type != "cpu" or node2.get_device() != device:
        return False
    return bool(node1.get_operation_names() & node2.ancestors)


def codegen_without_prepended_member(scheduling, node) -> bool:
    """Generate ``node`` as its first member alone, then the rest fused,
    when the first member joined it in front block by block; else False
    (nothing generated)."""
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    members = list(node.get_outer_nodes())
    rest = members[1:]
    if not rest or not _prepended(members):
        return False
    fusion_log.debug(
        "outer-loop fusion %s failed to merge: generating %s on its own",
        node.get_name(),
        members[0].get_name(),
    )
    codegen_alone(scheduling, members[0])
    if len(rest) == 1:
        codegen_alone(scheduling, rest[0])
    else:
        scheduling.codegen_outer_loop_node(
            OuterLoopFusedSchedulerNode(
                node.scheduler, rest, node.outer_loop_fusion_depth
            )
        )
    return True


def _prepended(members) -> bool:
    """Whether the first member joins by block the others, which agree
    element by element among themselves."""
    return members_join_by_block(members) and not members_join_by_block(members[1:])
