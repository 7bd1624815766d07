"""Reductions over an outer or middle dim on CPU, in blocks of rows.

``x.sum(1)`` over ``(N, R, C)`` contiguous memory, a softmax over dim 1,
or a global average pool over channels-last maps reduce along a dim whose
stride is a whole row, while the output's innermost dim is contiguous.  The
C++ backend vectorizes the output dim and runs the reduction innermost: a
column walk, one vector of ``C`` down all ``R`` rows, then the next vector
down all rows again.  Each step of the walk lands a row stride (kilobytes)
further, in a new page every row or two, which the hardware prefetcher does
not follow; ATen instead adds whole rows into a row of accumulators, and
ran faster than the compiled reductions.

Inductor already knows how to break a reduction into two levels
(``Reduction.create_multilayer``, used on GPUs): the first reduces blocks of
consecutive reduction indices into a buffer of partial results, the second
reduces the partials.  On CPU its split count is always 1.  Here, for an
outer reduction, the split makes blocks of ``OUTER_REDUCTION_BLOCK_ROWS``
rows: the first level's kernel walks one block's rows (a few tens of
kilobytes, in L1) for every vector of the row, then the next block, so the
input streams through once in address order; the partials are 1/16 of the
input and read back from cache.  Both levels usually fuse into one kernel
over the outer dims.

An outer reduction here: every read of the reduced input that varies with
the reduction walks it with a stride other than 1, and is contiguous along
one of the output's dims of at least ``OUTER_REDUCTION_MIN_ROW`` elements
(what the backend vectorizes).  Only associative reductions that combine
partials of their own kind (sum, prod, max, min, any); Welford and arg
reductions keep stock's form.  The sum's order of additions changes (16
rows, then the blocks), as it does between ATen's kernels.

Behind ``config.cpp.outer_reduction_blocks``; the hook in ``ir.py``'s
``Reduction.create`` asks ``split_for_outer_reduction`` after stock's
``num_splits`` chose no split; it returns 1 (stock) when the flag (or
``config.split_reductions``) is off, the device is not the CPU, the CPU
backend is not the C++ one, a size is symbolic, the reduction is not an
outer one, the slab that the column walk re-reads (the rows under one
output index) is too small to leave the cache (``OUTER_REDUCTION_MIN_BYTES``),
or the reduction is one of a chain (a
softmax's max and sum of exps, ``in_a_reduction_chain``) over an input too
large to stay in the last-level cache (``chain_stays_cached_bytes``) or
whose rows lie too close for the column walk to leave a page
(``OUTER_REDUCTION_CHAIN_MIN_ROW_STRIDE_BYTES``).
"""

from __future__ import annotations

import unittest.mock

import sympy
from torch._inductor import config
from torch._inductor.virtualized import V

from .. import costs
from ..costs import (
    OUTER_REDUCTION_BLOCK_ROWS,
    OUTER_REDUCTION_CHAIN_FRACTION,
    OUTER_REDUCTION_CHAIN_MIN_ROW_STRIDE_BYTES,
    OUTER_REDUCTION_MIN_BYTES,
    OUTER_REDUCTION_MIN_ROW,
)

# Reductions whose partial results combine by the same reduction.
SPLITTABLE = frozenset({"sum", "prod", "max", "min", "any"})


def split_for_outer_reduction(
    device, src_dtype, inner_fn, ranges, reduction_ranges, reduction_type
) -> int:
    """The number of blocks to reduce an outer reduction in, or 1 (no split)."""
    if not (
        config.cpp.outer_reduction_blocks
        and config.split_reductions
        and device.type == "cpu"
        and config.cpu_backend == "cpp"
        and reduction_type in SPLITTABLE
    ):
        return 1
    sizes = [*ranges, *reduction_ranges]
    if not all(isinstance(s, (int, sympy.Integer)) for s in sizes):
        return 1
    rows = int(sympy.prod(reduction_ranges))
    input_bytes = int(sympy.prod(sizes)) * src_dtype.itemsize
    if rows < 2 * OUTER_REDUCTION_BLOCK_ROWS or input_bytes < OUTER_REDUCTION_MIN_BYTES:
        return 1
    row_stride = outer_reduction_row_stride(inner_fn, ranges, reduction_ranges)
    if row_stride is None:
        return 1
    if rows * row_stride * src_dtype.itemsize < OUTER_REDUCTION_MIN_BYTES:
        return 1  # the column walk's slab stays in cache
    if in_a_reduction_chain() and not chain_gains_from_blocks(
        input_bytes, row_stride * src_dtype.itemsize
    ):
        return 1
    return -(-rows // block_rows(rows))


def chain_gains_from_blocks(input_bytes: int, row_stride_bytes: int) -> bool:
    """Whether a reduction of a chain gains from blocks: its input stays in
    the last-level cache for the second reduction's read, and its rows are
    far enough apart that the column walk leaves a page every row or two."""
    return (
        input_bytes <= chain_stays_cached_bytes()
        and row_stride_bytes >= OUTER_REDUCTION_CHAIN_MIN_ROW_STRIDE_BYTES
    )


def chain_stays_cached_bytes() -> int:
    """A softmax's sum of exps needs the whole max first: blocked, it reads
    the input again after all of the max's blocks (the levels of the two
    reductions are separate kernels over every outer index), where the
    unsplit column walks read each strip of columns twice from L1.  In such
    a chain the input must stay in the last-level cache for that second
    read."""
    return costs.last_level_cache_bytes() // OUTER_REDUCTION_CHAIN_FRACTION


# aten ops (decomposed graphs) whose lowering makes two reductions in a row
# (a variance's two-step form sums deviations from the mean it summed first),
# by overload packet name
CHAINED_INSIDE = frozenset(
    {"var_mean", "var", "std", "std_mean", "_softmax", "_log_softmax",
     "logsumexp", "native_layer_norm", "native_group_norm"}
)  # fmt: skip
# ...and every aten op that reduces
REDUCING_OPS = CHAINED_INSIDE | {"sum", "amax", "amin", "mean", "prod", "max", "min"}
# FX edges searched each way for another reduction: a softmax's max and its
# sum of exps are three apart (sub, exp, sum).
CHAIN_HOPS = 4


def in_a_reduction_chain() -> bool:
    """Whether the FX node being lowered reduces twice itself (a variance)
    or another reduction lies within ``CHAIN_HOPS`` edges of it, before or
    after: a reduction that depends on this one or that this one depends
    on, as a softmax's sum of exps on its max.  Without the node (lowered
    outside a graph), assume a chain."""
    node = getattr(V.graph, "current_node", None)
    if node is None or _op_name(node) in CHAINED_INSIDE:
        return True
    frontier, seen = [node], {node}
    for _ in range(CHAIN_HOPS):
        frontier = [
            near
            for n in frontier
            for near in (*n.all_input_nodes, *n.users)
            if near not in seen
        ]
        seen.update(frontier)
        if any(_reduces(n) for n in frontier):
            return True
    return False


def _reduces(node) -> bool:
    return _op_name(node) in REDUCING_OPS


def _op_name(node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return getattr(packet, "__name__", "")


def block_rows(rows: int) -> int:
    """Rows per block: the divisor of ``rows`` nearest to
    ``OUTER_REDUCTION_BLOCK_ROWS`` within a factor of two, so that no block
    is masked; otherwise ``OUTER_REDUCTION_BLOCK_ROWS`` and a masked last
    block."""
    want = OUTER_REDUCTION_BLOCK_ROWS
    divisors = [b for b in range(want // 2, 2 * want + 1) if rows % b == 0]
    if not divisors:
        return want
    return min(divisors, key=lambda b: (abs(b - want), b))


def is_outer_reduction(inner_fn, ranges, reduction_ranges) -> bool:
    """Every read that varies with the reduction strides over it, and is
    contiguous along an output dim long enough to vectorize."""
    return outer_reduction_row_stride(inner_fn, ranges, reduction_ranges) is not None


def outer_reduction_row_stride(inner_fn, ranges, reduction_ranges) -> int | None:
    """For an outer reduction (``is_outer_reduction``), the smallest stride
    in elements over which a read walks the reduction; None for any other."""
    from torch._inductor.dependencies import extract_read_writes
    from torch._inductor.ir import FlexibleLayout

    # index realized producers by their layout as it stands, as
    # ComputedBuffer.get_read_writes does
    with unittest.mock.patch.object(FlexibleLayout, "allow_indexing", True):
        rw = extract_read_writes(inner_fn, ranges, reduction_ranges)
    variables, var_ranges = rw.range_vars or [], rw.var_ranges or {}
    out_vars = _symbols(variables[: len(ranges)])
    red_vars = _symbols(variables[len(ranges) :])
    extents = {v: int(var_ranges[v]) for v in out_vars}
    reads = [d for d in rw.reads if hasattr(d, "index")]
    walked = [d.index for d in reads if set(red_vars) & d.index.free_symbols]
    if not walked or not all(
        _strides_rows(index, out_vars, red_vars, extents) for index in walked
    ):
        return None
    sizevars = V.graph.sizevars
    return min(
        abs(s)
        for index in walked
        for s in sizevars.stride_hints(index, red_vars)
        if s != 0
    )


def _symbols(variables) -> list:
    # size-1 dims are squeezed to the integer 0
    return [v for v in variables if isinstance(v, sympy.Symbol)]


def _strides_rows(index, out_vars, red_vars, extents) -> bool:
    sizevars = V.graph.sizevars
    red_strides = sizevars.stride_hints(index, red_vars)
    if any(abs(s) == 1 for s in red_strides):
        return False
    out_strides = sizevars.stride_hints(index, out_vars)
    return any(
        s == 1 and extents[v] >= OUTER_REDUCTION_MIN_ROW
        for v, s in zip(out_vars, out_strides)
    )
