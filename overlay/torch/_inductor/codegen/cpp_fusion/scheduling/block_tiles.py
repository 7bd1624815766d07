"""Outer-block fusion over tiles of the innermost loop (CPU).

Softmax and log_softmax over the channels of an NCHW image read a few
channels per pixel: the statistics kernel loops over (N, H*W) and its
consumer over (N, C, H*W).  scheduling/block_fusion.py fuses them over N, a
block per image, when one image fits its cache budget.  An image of three
256x256 channels (768 KiB) does not, so stock's two loop nests stay, and the
consumer reads back from memory what the first nest wrote.

Every read between the two kernels stays at its own pixel: the consumer
reads, at pixel p, only what the producer wrote at pixel p.  Tiling the
pixel loop into (P/T, T) and moving the tile index out to the shared outer
loops, (N, C, P) -> (N, P/T, C, T), keeps that true of every tile, so the
pair becomes an outer-block fusion over (N, P/T) whose block, C*T pixels,
fits in cache.  Each kernel still walks T contiguous pixels in its inner
loop, vectorized.

softmax reaches the same shape another way: its exponentials and its
quotients are two pointwise kernels over the same (N, C, P) loops, and the
quotient at (c, p) reads the exponentials of every channel at p.  Their deps
agree only image by image, so they may fuse neither element by element nor
over all the loops they share (stock's CppScheduling would do one or the
other); ``same_loops_block_depth`` gives the backend the deepest depth at
which every read stays in its block, over N, and the pair is tiled as above
where an image exceeds the budget.  A tile's block is then C runs of T
pixels, not one dense range: ``same_digit_block`` checks such blocks for
scheduling/block_fusion.py.

log_softmax over many channels reaches it a third way: its maximum, sum
and log merge into one outer-loop fused node over all of (N, H, W), which
scheduling/block_fusion.py does not extend.  Merged to (N, P) and tiled,
the statistics loop over (N, P/T, T), fused over (N, P/T), and the tiled
output joins them there (``_fused_statistics_depth``).  Where no tile's
block fits in L1 (150 channels), the smallest tile keeps it in L2.

The tiling is speculative: it is applied inside ``Scheduler.can_fuse``
(whose tracker rolls loop mutations back when the fusion is refused), only
where scheduling/block_fusion.py refused the pair for its cache budget alone,
and it is undone at once unless scheduling/block_fusion.py accepts the tiled
pair: its legality checks (every read in its block, on the tiled index
expressions) decide, as for any other block fusion.

Flag: ``config.cpp.outer_block_tiles`` (TORCHINDUCTOR_CPP_OUTER_BLOCK_TILES).
"""

from __future__ import annotations

import itertools
import math

import sympy
import torch
from torch._inductor import dependencies
from torch._inductor.loop_body import LoopBody
from torch._inductor.scheduler import (
    FusedSchedulerNode,
    SchedulerNode,
    _LoopStateSnapshot,
    refresh_group_node_dependencies,
)
from torch._inductor.virtualized import V

from .. import costs, flag_requirements
from ..costs import (
    BLOCK_BYTES_IN_CACHE,
    TILE_BYTES_IN_CACHE,
    feeds_every_thread,
    min_tile,
    tile_lanes,
)
from ..nodes import is_outer_loop_fused, static_sizes, under_rollback_scope
from .block_fusion import (
    block_fusion_refused_for_size,
    block_fusion_score_at,
    buffers_shared_by_block,
    bytes_read,
    index_bounds,
    outer_block_fusion_score,
    reads_by_block,
    remembers_refusals,
)
from .loop_ordering import fused_node_group, merge_loops_below

fusion_log = torch._logging.getArtifactLogger(__name__, "fusion")

@remembers_refusals
def tiled_block_fusion_score(scheduler, node1, node2) -> int:
    """Bytes shared by an outer-block fusion of the pair over tiles of the
    innermost loop, with the tiling applied; 0 (and nothing changed) if none."""
    if not flag_requirements.enabled("outer_block_tiles"):
        return 0
    score = _tiled_statistics_score(scheduler, node1, node2)
    if score:
        return score
    if not _tile_possible_at_some_depth(node1, node2):
        return 0  # before the depth's analysis, which reads every access
    depth = _fused_statistics_depth(scheduler, node1, node2)
    extends_outer_fusion = depth is not None
    if depth is None:
        depth = block_fusion_refused_for_size(scheduler, node1, node2)
    if depth is None and _reads_by_block_alone(scheduler, node1, node2):
        depth = 0  # the pixel tiles become the only shared outer loop
    if depth is None or _pointwise_pair_stays_cached(node1, node2):
        return 0
    if extends_outer_fusion and _pair_stays_cached(node1, node2):
        return 0
    if not _tile_possible(node1, node2, depth):
        return 0  # known before the merge, which rebuilds both loop bodies
    leaves1, leaves2 = leaves_of_one_space(node1), leaves_of_one_space(node2)
    if leaves1 is None or leaves2 is None:
        return 0
    pair = ((node1, leaves1), (node2, leaves2))
    if not under_rollback_scope(leaves1 + leaves2):
        return 0  # outside can_fuse's rollback scope: never mutate
    saved = _LoopStateSnapshot.create((node1, node2))
    tile = _merge_loops_and_pick_tile(pair, depth, extends_outer_fusion)
    if extends_outer_fusion and not _fuse_merged_pixels(node1, depth):
        tile = None
    score = 0
    if tile is not None:
        for node, leaves in pair:
            apply_loop_bodies(node, leaves, lambda body: _tiled_body(body, depth, tile))
        if extends_outer_fusion:
            score = _extended_fusion_score(scheduler, node1, node2, depth + 1)
        else:
            score = outer_block_fusion_score(scheduler, node1, node2)
    if score > 0:
        if extends_outer_fusion:
            node1.tiled_statistics = True  # asked again when the pair fuses
        fusion_log.debug(
            "outer-block tiles: %s -> %s fused over tiles of %d of the innermost loop",
            node1.get_name(),
            node2.get_name(),
            tile,
        )
        return score
    saved.restore()
    return 0


def _tile_possible(node1, node2, depth: int) -> bool:
    """Whether merging each node's loops below ``depth`` could leave an
    innermost extent that ``_tile_size`` tiles: two tiles of at least
    ``min_tile`` elements.  Merging multiplies loops together, so the product
    of the loops below ``depth`` bounds that extent; a pair of small or
    symbolic loops (a model's ten-element vectors) is refused without the
    merge, as ``_tile_size`` would refuse it after."""
    fewest = min_tile(_narrowest_itemsize(node1, node2))
    for node in (node1, node2):
        sizes = static_iter_sizes(node)
        if not sizes or len(sizes) <= depth:
            return False
        if math.prod(sizes[depth:]) < 2 * fewest:
            return False
    return True


def _tile_possible_at_some_depth(node1, node2) -> bool:
    """Whether ``_tile_possible`` could hold at any depth: the loops below
    a depth multiply to at most the largest product of a node's last loops,
    and no dtype is wider than complex128's 16 bytes (so no dtype is read,
    for a pair that may read buffers no dtype is registered for)."""
    fewest = min_tile(16)
    for node in (node1, node2):
        sizes = static_iter_sizes(node)
        if not sizes:
            return False
        if max(math.prod(sizes[d:]) for d in range(len(sizes))) < 2 * fewest:
            return False
    return True


def _pointwise_pair_stays_cached(node1, node2) -> bool:
    """Whether a pair of pointwise kernels over the same loops (softmax's
    exponentials and quotients) touches no more than the last-level cache
    holds.

    Tiled or not, the exponentials go to a global buffer (0011's local
    buffers take only dense blocks), so the tiles save only the quotient's
    re-read of that buffer, which comes from the last-level cache where the
    pair fits in it; the tiled walk then cost more than it saved.  A
    statistics kernel and its consumer over more loops (log_softmax's) gain
    in cache too: the consumer re-reads the input from L1.
    """
    _, (_, reduction_sizes) = node1.group
    if node1.group != node2.group or reduction_sizes:
        return False
    return _pair_stays_cached(node1, node2)


def _pair_stays_cached(node1, node2) -> bool:
    """Whether the buffers the pair reads and writes fit in the last-level
    cache together."""
    touched = 0
    for name in _buffers_of(node1, node2):
        numel = V.graph.get_numel(name)
        if not isinstance(numel, (int, sympy.Integer)):
            return False
        touched += int(numel) * V.graph.get_dtype(name).itemsize
    return touched <= costs.last_level_cache_bytes()


def _fused_statistics_depth(scheduler, node1, node2) -> int | None:
    """The outer loops a consumer shares with an outer-loop fused node of
    statistics, if tiling the statistics' last loop lets it join them.

    log_softmax's maximum, sum and log over (N, H, W) merge into one nest
    fused over all its loops (an element-wise outer-loop fusion), while its
    output loops over (N, C, H, W) and reads them pixel by pixel.  Merged
    and tiled, the statistics loop over (N, P/T, T), fused over (N, P/T),
    which the tiled output shares: it joins as a third member.
    scheduling/block_fusion.py does not extend element-wise outer fusions,
    for a failed merge in codegen would unfuse all their members; 0012's
    regroup (required here) then generates the statistics fused, and the
    output on its own.  Where the pair's buffers fit in the last-level cache
    the tiled walk costs more than the re-read it saves (LayerNorm over the
    channels of a small feature map): such pairs are left alone.  Returns
    the loops shared before tiling (N's).
    """
    if not _outer_fused_producer_and_consumer(node1, node2):
        return None
    sizes1, sizes2 = static_iter_sizes(node1), static_iter_sizes(node2)
    if sizes1 is None or sizes2 is None or node1.outer_loop_fusion_depth != len(sizes1):
        return None  # the statistics' pixel loops must be fused, to be tiled
    if len(sizes2) <= len(sizes1):
        return None  # the output has a loop more: the channels
    depth = 0
    while depth < len(sizes1) and sizes1[depth] == sizes2[depth]:
        depth += 1
    pixels = sizes1[depth:]
    if depth < 1 or not pixels or sizes2[-len(pixels) :] != pixels:
        return None  # not (outer..., pixels) against (outer..., C, pixels)
    if not buffers_shared_by_block(scheduler, node1, node2, depth):
        return None
    return depth


def _tiled_statistics_score(scheduler, node1, node2) -> int:
    """Bytes shared by a consumer joining statistics tiled as above, still
    fused over all their loops but the tile's lanes (the scheduler asks
    again for the tiled pair when it fuses it); 0 for any other pair, such
    as an outer-loop fusion stock made over fewer than all its loops."""
    if not _outer_fused_producer_and_consumer(node1, node2):
        return 0
    if not node1.tiled_statistics:
        return 0
    sizes = static_iter_sizes(node1)
    depth = node1.outer_loop_fusion_depth
    if sizes is None or depth != len(sizes) - 1 or depth < 1:
        return 0
    return _extended_fusion_score(scheduler, node1, node2, depth)


def _outer_fused_producer_and_consumer(node1, node2) -> bool:
    """Whether node1 is an outer-loop fused node that node2 consumes."""
    if not is_outer_loop_fused(node1):
        return False
    return bool(node1.get_operation_names() & node2.ancestors)


def _fuse_merged_pixels(node, depth: int) -> bool:
    """Keep the merged statistics fused over all their loops, now ``depth``
    shared ones and the pixels; False if the merge left another shape."""
    sizes = static_iter_sizes(node)
    if sizes is None or len(sizes) != depth + 1:
        return False
    node.outer_loop_fusion_depth = depth + 1
    return True


def _extended_fusion_score(scheduler, node1, node2, depth: int) -> int:
    """Bytes shared by the tiled consumer joining the tiled outer-loop fused
    node over ``depth`` loops, where the backend fuses them over as many."""
    backend = scheduler.get_backend(node1.get_device())
    if backend.outer_loop_fusion_depth(node1, node2) != depth:
        return 0
    return block_fusion_score_at(scheduler, node1, node2, depth)


def _reads_by_block_alone(scheduler, node1, node2) -> bool:
    """Whether node2 reads node1's outputs away from the elements written,
    asked where no block fusion over the pair's own loops holds.  Such a
    pair is one image's: its statistics loop over (P) and its output over
    (C, P) (no shared loop), or its two pointwise kernels over (C, P) (the
    quotient at (c, p) reads every channel at p).  Tiling the pixel loop
    gives it a shared outer loop, (P/T)."""
    if not (node1.get_operation_names() & node2.ancestors):
        return False
    return reads_by_block(node1.get_nodes(), node2)


def _merge_loops_and_pick_tile(pair, depth: int, statistics: bool) -> int | None:
    """Merge each node's loops (loop ordering after fusion leaves H and W
    apart), then pick the tile; None if the merge changed the shared outer
    loops or split a node's members apart.  ``statistics``: node1 is an
    outer-loop fused node of statistics; only the loops after the shared
    ones merge (a pointwise member would merge N with the pixels, away from
    its reduction members)."""
    outer = [static_iter_sizes(node) for node, _ in pair]
    for node, leaves in pair:
        if statistics:
            for sn in leaves:
                merge_loops_below(sn, depth)
            _regroup(node, leaves)
        else:
            apply_loop_bodies(node, leaves, lambda body: body.merge_loops())
    (node1, _), (node2, _) = pair
    for (node, _), before in zip(pair, outer):
        after = (
            static_iter_sizes(node) if leaves_of_one_space(node) is not None else None
        )
        if before is None or after is None or after[:depth] != before[:depth]:
            return None
    return _tile_size(node1, node2, depth, in_l2=statistics)


def leaves_of_one_space(node) -> list[SchedulerNode] | None:
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    if type(node) not in (
        SchedulerNode,
        FusedSchedulerNode,
        OuterLoopFusedSchedulerNode,
    ):
        return None
    leaves = list(node.get_nodes())
    if not all(isinstance(sn, SchedulerNode) for sn in leaves):
        return None
    sizes = {tuple(sn.get_ranges()[0]) for sn in leaves}
    if len(sizes) != 1:
        return None  # members that do not share one iteration space
    return leaves


def static_iter_sizes(node) -> list[int] | None:
    return static_sizes(node.get_nodes()[0].get_ranges()[0])


def _tile_size(node1, node2, depth: int, in_l2: bool) -> int | None:
    """The largest tile of the innermost loop whose block fits in L1; with
    ``in_l2``, else the smallest, if its block fits in L2 (statistics over
    many channels: the tiled consumer reads its input from L2, not memory;
    other pairs ran slower with blocks beyond L1 than untiled).

    Both nodes must end with the same innermost extent, beyond the shared
    outer loops; the tile is whole vectors of the narrowest dtype either node
    moves (no vector tails), spans at least ``min_tile`` elements of each
    row and divides it, and the fused outer loops must feed every thread.
    """
    sizes1, sizes2 = static_iter_sizes(node1), static_iter_sizes(node2)
    if not sizes1 or not sizes2:
        return None
    if len(sizes1) <= depth or len(sizes2) <= depth or sizes1[-1] != sizes2[-1]:
        return None
    extent, outer = sizes1[-1], math.prod(sizes1[:depth])
    read_per_element = bytes_read(node2) / (outer * extent)
    itemsize = _narrowest_itemsize(node1, node2)
    lanes, fewest = tile_lanes(itemsize), min_tile(itemsize)
    middles = (_middle_extent(sizes1, depth), _middle_extent(sizes2, depth))
    tiles = [
        tile
        for tile in range(extent // 2 // lanes * lanes, fewest - 1, -lanes)
        if extent % tile == 0 and tile not in middles  # one more shared loop
    ]
    fit_l1 = [t for t in tiles if t * read_per_element <= TILE_BYTES_IN_CACHE]
    fit_l2 = [t for t in tiles[-1:] if t * read_per_element <= BLOCK_BYTES_IN_CACHE]
    picks = fit_l1[:1] or (fit_l2 if in_l2 else [])
    if not picks or not feeds_every_thread(outer * (extent // picks[0])):
        return None
    return picks[0]


def _narrowest_itemsize(node1, node2) -> int:
    return min(V.graph.get_dtype(name).itemsize for name in _buffers_of(node1, node2))


def _buffers_of(node1, node2) -> set[str]:
    """The buffers either node reads or writes."""
    return {
        dep.name
        for node in (node1, node2)
        for dep in node.read_writes.reads | node.read_writes.writes
    }


def _middle_extent(sizes: list[int], depth: int) -> int | None:
    """The extent that follows the tile index once the loop is tiled."""
    return sizes[depth] if len(sizes) > depth + 1 else None


def apply_loop_bodies(node, leaves, transform) -> None:
    """Give every leaf of node the loop body transform(body), and node (and
    the fused nodes an outer-loop fused node holds) the leaves' new group."""
    for sn in leaves:
        sn.apply_loop_body(transform(sn.loop_body))
    _regroup(node, leaves)


def _regroup(node, leaves) -> None:
    """The groups of leaves whose loops changed, and of the nodes fusing them."""
    for sn in leaves:
        device = sn.get_device()
        backend = sn.scheduler.get_backend(device)
        sn.group = (device, backend.group_fn(sn.get_ranges()))
    members = node.get_outer_nodes() if is_outer_loop_fused(node) else []
    for fused in [*members, node]:
        if isinstance(fused, FusedSchedulerNode):
            fused.group = fused_node_group(fused)
            refresh_group_node_dependencies(fused)


def _tiled_body(body: LoopBody, depth: int, tile: int) -> LoopBody:
    """body over (outer..., P/T, middle..., T) for its (outer..., middle..., P)."""
    iter_sizes, reduce_sizes = body.sizes
    *lead, last = iter_sizes
    new_sizes = [*lead[:depth], last // tile, *lead[depth:], sympy.Integer(tile)]
    (iter_vars, reduce_vars), var_ranges = dependencies.index_vars_no_squeeze(
        new_sizes, list(reduce_sizes), prefix="t"
    )

    def tiled(*indices):
        index = [*itertools.chain.from_iterable(indices)]
        it, red = index[: len(new_sizes)], index[len(new_sizes) :]
        outer, tile_index, middle, lane = (
            it[:depth],
            it[depth],
            it[depth + 1 : -1],
            it[-1],
        )
        return body([*outer, *middle, tile_index * tile + lane], list(red))

    inner = LoopBody(
        tiled, (iter_vars, reduce_vars), var_ranges, iter_vars, reduce_vars
    )
    (iter_vars2, reduce_vars2), var_ranges2 = dependencies.index_vars_no_squeeze(
        new_sizes, list(reduce_sizes), prefix="p"
    )
    return LoopBody(
        inner, (iter_vars2, reduce_vars2), var_ranges2, iter_vars2, reduce_vars2
    )


def same_loops_block_depth(scheduler, node1, node2) -> int:
    """Outer depth of a block fusion of two pointwise nodes over the same loops.

    Softmax over a few channels is two pointwise kernels over (N, C, P): the
    exponentials, then their sum over the channels at each pixel and the
    quotient.  Their deps agree only image by image, so an element-wise
    fusion is illegal, and stock fuses such nodes over all the loops they
    share, where the consumer reads outside its block.  Returns the deepest
    depth at which every read of node1's outputs stays in its block (0: none,
    or not such a pair); the backend then fuses the pair over that many
    outer loops, never element by element.
    """
    if not flag_requirements.enabled("outer_block_tiles"):
        return 0
    if type(node1) not in (SchedulerNode, FusedSchedulerNode):
        return 0
    if type(node2) not in (SchedulerNode, FusedSchedulerNode):
        return 0
    _, (vars1, reduce1) = node1.group
    _, (vars2, reduce2) = node2.group
    if vars1 != vars2 or reduce1 or reduce2 or len(vars1) < 2:
        return 0
    if not (node1.get_operation_names() & node2.ancestors):
        return 0
    if not reads_by_block(node1.get_nodes(), node2):
        return 0
    for depth in range(len(vars1) - 1, 0, -1):
        if buffers_shared_by_block(scheduler, node1, node2, depth):
            return depth
    return 0


def same_digit_block(write, read) -> bool:
    """Whether ``read`` stays in the block that ``write`` fills, where the
    block is not one dense range: with the pixel loop tiled, the block of
    (n, tile) is C runs of T pixels, one per channel.

    The write's index must be a sum of loop variables times strides that
    never overlap (a mixed-radix number whose digits are the loops); the
    read must share the outer digits and compose its inner part of the
    write's inner digits, each within its loop's range.  Such a read names
    an element the producer writes in the same outer iteration.  One of
    ``CppScheduling.outer_block_checks()`` under ``config.cpp.outer_block_tiles``,
    and only while the flags it requires are on too.
    """
    if not flag_requirements.enabled("outer_block_tiles"):
        return False
    if not (write.linear_in_outer and read.linear_in_outer):
        return False
    if write.outer_sizes != read.outer_sizes or write.outer_coeffs != read.outer_coeffs:
        return False
    inner = _digits(write.inner, write.inner_ranges)
    if inner is None:
        return False
    outer = [
        (int(c), int(n)) for c, n in zip(write.outer_coeffs, write.outer_sizes) if n > 1
    ]
    if not _non_overlapping(inner + outer):
        return False
    return _composed_of(read.inner, read.inner_ranges, inner)


def _digits(expr, ranges) -> list[tuple[int, int]] | None:
    """(stride, range) of each loop variable of ``expr`` = sum(stride * var)."""
    digits, seen = [], set()
    for term in sympy.Add.make_args(expr) if expr != 0 else ():
        coeff, var = term.as_coeff_Mul()
        if var not in ranges or var in seen or not coeff.is_Integer or coeff <= 0:
            return None
        seen.add(var)
        digits.append((int(coeff), int(ranges[var])))
    return digits


def _non_overlapping(digits: list[tuple[int, int]]) -> bool:
    """Whether distinct digit values give distinct sums (an injective index)."""
    reach = 1  # one more than the largest sum of the digits taken so far
    for stride, size in sorted(d for d in digits if d[1] > 1):
        if stride < reach:
            return False
        reach += stride * (size - 1)
    return True


def _composed_of(expr, ranges, digits: list[tuple[int, int]]) -> bool:
    """Whether expr = sum(stride * q) over ``digits`` with 0 <= q < range."""
    by_stride = sorted(digits, reverse=True)
    parts: dict[int, sympy.Expr] = {}
    for term in sympy.Add.make_args(expr) if expr != 0 else ():
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer:
            return False
        if rest == 1:  # a constant: split it into digits, largest first
            value = int(coeff)
            for stride, _ in by_stride:
                parts[stride] = parts.get(stride, 0) + value // stride
                value %= stride
            if value:
                return False
            continue
        divisors = [s for s, _ in by_stride if int(coeff) % s == 0]
        if not divisors:
            return False
        stride = divisors[0]
        parts[stride] = parts.get(stride, 0) + (int(coeff) // stride) * rest
    sizes = dict(digits)
    for stride, part in parts.items():
        bounds = index_bounds(sympy.sympify(part), ranges)
        if bounds is None or bounds.lower < 0 or bounds.upper > sizes[stride] - 1:
            return False
    return True
