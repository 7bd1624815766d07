"""Outer-loop fusion of nodes whose inner loop orders differ (CPU).

A reduction over a middle dimension and its broadcasting consumer iterate
the same data in different orders: softmax over dim 1 of (N, C, L) reduces
in (N, L | C) order and normalizes in (N, C*L) order.  Their memory deps
never match element by element, so the scheduler finds "no shared data" and
stock 2.13.0 emits 4 loop nests, each streaming the whole tensor.  Loop
reordering cannot help without striding the inner loop (its cost guard
refuses that, see scheduling/loop_ordering.py).

Both nodes do share the outer loop over N, and the C++ backend can fuse
kernels over shared outer loops (OuterLoopFusedSchedulerNode): each outer
iteration runs the producer's inner nest to completion, then the consumer's.
That is legal when, for every outer index o, the consumer reads only what
the producer writes at the same o.  This module checks exactly that on the
nodes' loop bodies (write and read index expressions), and then lets the
scheduler fuse the pair:

- the producer writes block o densely: W = base(o) + w(inner), w a
  bijection onto [0, S);
- the consumer reads R = base(o) + r(inner) with the same base and
  0 <= r(inner) < S (bounded with the inner loops' ranges);
- static sizes only; mutations (WeakDep/StarDep on the shared buffer) are
  refused; deps on other buffers get stock's intermediate-node check.

Not done: re-nesting an outer-loop fused node at fewer loops to take in
such a consumer (LayerNorm over channels computes mean and variance in one
node fused over (N, L), then normalizes in (N, C*L) order).  It is legal,
but when the re-nested node then fails to merge in codegen, stock's
fallback emits every kernel on its own and loses the deeper merge (a fuzzed
program went from 4 loop nests to 6).  For the same reason an outer-loop
fusion that merges element by element is never extended block-wise.

Cost guard: what the consumer reads in one outer iteration must fit in
BLOCK_BYTES_IN_CACHE, so the block the producer left is still in L2 when the
consumer reads it (counting only the re-read data let a large GroupNorm's
normalization, 7 MiB per sample, join its per-channel scale kernel over an
outer loop of 2, and lose its parallel reduction); and the outer loop must
give every thread work.

Flag: ``config.cpp.outer_block_fusion`` (TORCHINDUCTOR_CPP_OUTER_BLOCK_FUSION).
"""

from __future__ import annotations

import functools
import operator

import sympy
import torch
from torch._inductor import config
from torch._inductor.dependencies import MemoryDep
from torch._inductor.scheduler import SchedulerNode
from torch._inductor.virtualized import V
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from .. import speculation
from ..costs import BLOCK_BYTES_IN_CACHE, feeds_every_thread
from ..nodes import is_outer_loop_fused

fusion_log = torch._logging.getArtifactLogger(__name__, "fusion")


def remembers_refusals(score):
    """A pair score that is asked again only once one of its nodes changed.

    The fusion search asks the same pairs over and over, within a round and
    across rounds; most are refused, each time the same way.  A refusal (0)
    leaves both nodes as they were, and the answer is a function of the two
    nodes (their members, an outer-loop fused node's depth) and of their
    members' loop bodies: every loop transformation installs a new body and
    a rollback the old one.  So the refusal is kept, keyed by the nodes and
    the bodies they hold, in the backend's ``loop_body_answers``.  Accepted
    pairs are scored afresh: their score may come with loops rewritten
    (scheduling/block_tiles.py, scheduling/block_prepend.py).  Every block
    score passes here, so here too a graph under the speculation bound
    (speculation.py) gets stock's answer, 0, before any score runs.
    """

    @functools.wraps(score)
    def remembered(scheduler, node1, node2) -> int:
        if not speculation.worth_speculating():
            return 0
        key = _pair_state(score, node1, node2)
        if key is None:
            return score(scheduler, node1, node2)
        answers = scheduler.get_backend(node1.get_device()).loop_body_answers
        if key in answers:
            return 0
        result = score(scheduler, node1, node2)
        if not result:
            answers[key] = 0
        return result

    return remembered


def _pair_state(score, node1, node2) -> tuple | None:
    """The key of the pair's current state; None where a member has no loop
    body (a template or an extern kernel) or the device is not the CPU."""
    device = node1.get_device()
    if device is None or device.type != "cpu":
        return None
    leaves = [*node1.get_nodes(), *node2.get_nodes()]
    if not all(isinstance(sn, SchedulerNode) for sn in leaves):
        return None
    return (
        score.__name__,
        node1,
        node2,
        getattr(node1, "outer_loop_fusion_depth", None),
        getattr(node2, "outer_loop_fusion_depth", None),
        tuple(sn.loop_body for sn in leaves),
    )


@remembers_refusals
def outer_block_fusion_score(scheduler, node1, node2) -> int:
    """Bytes shared by a legal outer-block fusion of node2 into node1, else 0."""
    return block_fusion_score_at(
        scheduler, node1, node2, _outer_depth(scheduler, node1, node2)
    )


def block_fusion_score_at(scheduler, node1, node2, depth: int) -> int:
    """Bytes shared by node2 joining node1 block by block over ``depth``
    outer loops: 0 unless every read stays in its block and the cost guard
    accepts the pair."""
    if depth < 1:
        return 0
    shared = buffers_shared_by_block(scheduler, node1, node2, depth)
    if not shared:
        return 0
    if not _fits_in_cache(node1, node2, depth):
        _log(node1, node2, "rejected: one outer iteration exceeds the cache budget")
        return 0
    _log(node1, node2, "fusable over %d shared outer loop(s)", depth)
    return sum(_buffer_bytes(scheduler, name) for name in shared)


def block_fusion_refused_for_size(scheduler, node1, node2) -> int | None:
    """The shared outer depth at which node2 could join node1 block by block
    but for the cache budget (one outer iteration's data, or too few outer
    iterations for the threads); None otherwise.  Changes nothing."""
    depth = _outer_depth(scheduler, node1, node2)
    if depth < 1 or not buffers_shared_by_block(scheduler, node1, node2, depth):
        return None
    return None if _fits_in_cache(node1, node2, depth) else depth


def is_outer_block_fusion(node) -> bool:
    """Whether an outer-loop fused node joins kernels whose deps only agree
    block by block (fused by this module), not element by element.  Such a
    fusion is chosen for the cache reuse of each block: the re-tiled
    attempt's parallelism guard (outer_loop/retile.py) keeps it."""
    return members_join_by_block(node.get_outer_nodes())


def members_join_by_block(members) -> bool:
    """Whether a member reads an earlier member's output at another index
    than the one written (the members of an outer-loop fusion, in order)."""
    return any(
        reads_by_block(members[:i], consumer) for i, consumer in enumerate(members)
    )


def _is_stock_outer_fusion(node) -> bool:
    return is_outer_loop_fused(node) and not is_outer_block_fusion(node)


def reads_by_block(producers, consumer) -> bool:
    """Whether consumer reads a producer's output at another index than
    the one written (so only a block-wise fusion can join them)."""
    scheduler = V.graph.scheduler
    written: dict[str, list[MemoryDep]] = {}
    for producer in producers:
        for write in producer.read_writes.writes:
            if isinstance(write, MemoryDep):
                written.setdefault(write.name, []).append(write)
    return any(
        not _same_elements(scheduler, read, write)
        for read in consumer.read_writes.reads
        if isinstance(read, MemoryDep)
        for write in written.get(read.name, ())
    )


def _same_elements(scheduler, read: MemoryDep, write: MemoryDep) -> bool:
    """Whether ``read`` visits the elements ``write`` wrote, in its order.

    Loops left open until fusion (loop ordering after fusion) give a
    producer's and a consumer's deps other variables, or other splits of the
    same loop, for the same elements: compare them merged and renamed too.
    """
    if scheduler.fusable_read_and_write(read, write):
        return True
    return scheduler.fusable_read_and_write(read.normalize(), write.normalize())


def _outer_depth(scheduler, node1, node2) -> int:
    if not config.cpp.outer_block_fusion:
        return 0
    if any(_is_stock_outer_fusion(node) for node in (node1, node2)):
        # Extending an outer-loop fusion that merges element by element
        # risks it: if the extended node fails to merge in codegen, the
        # fallback emits each of its kernels on its own.
        return 0
    device = node1.get_device()
    if device is None or device.type != "cpu" or node2.get_device() != device:
        return 0
    if not (node1.get_operation_names() & node2.ancestors):
        return 0  # not a producer/consumer pair
    return scheduler.get_backend(device).outer_loop_fusion_depth(node1, node2)


def buffers_shared_by_block(scheduler, node1, node2, depth: int) -> set[str] | None:
    """Names node2 reads from node1, if every such read stays in its block."""
    writes = body_accesses(node1, depth, reads=False)
    if writes is None:
        return None
    produced = set(writes)
    if not _unmet_deps_allow_block_fusion(scheduler, node1, node2, produced):
        return None
    reads = body_accesses(node2, depth, reads=True)
    if reads is None:
        return None
    shared = {name for name in reads if name in produced}
    # same_block, and the checks of later features (CppScheduling.outer_block_checks)
    checks = scheduler.get_backend(node1.get_device()).outer_block_checks()
    for name in shared:
        for read in reads[name]:
            if not all(
                any(check(write, read) for check in checks) for write in writes[name]
            ):
                _log(node1, node2, "rejected: %s read outside its outer block", name)
                return None
    return shared


def _unmet_deps_allow_block_fusion(scheduler, node1, node2, produced) -> bool:
    node1_ops = node1.get_operation_names()
    for dep in node2.unmet_dependencies:
        name = scheduler.mutation_renames.get(dep.name, dep.name)
        if name in produced:
            if not isinstance(dep, MemoryDep):
                return False  # a mutation or an opaque read of the block
            continue
        if name not in scheduler.name_to_buf:
            return False
        op_name = scheduler.name_to_buf[name].defining_op_name()
        if node1_ops & scheduler.name_to_fused_node[op_name].ancestors:
            return False  # produced by a node between node1 and node2
    return True


class BlockAccess:
    """An index expression split into outer-loop and inner-loop parts."""

    def __init__(self, index, var_ranges: dict, depth: int):
        names = list(var_ranges)
        self.outer_sizes = [var_ranges[v] for v in names[:depth]]
        self.inner_ranges = {v: var_ranges[v] for v in names[depth:]}
        outer = [sympy.Symbol(f"outer{k}", integer=True) for k in range(depth)]
        index = sympy.expand(index.subs(dict(zip(names[:depth], outer))))
        self.outer_coeffs = [index.coeff(o) for o in outer]
        self.inner = sympy.expand(
            index - sum(c * o for c, o in zip(self.outer_coeffs, outer))
        )
        self.linear_in_outer = not (self.inner.free_symbols & set(outer)) and all(
            c.is_Integer for c in self.outer_coeffs
        )


def body_accesses(node, depth: int, reads: bool) -> dict[str, list[BlockAccess]] | None:
    """Per buffer, the loads (or stores) of node's bodies; None if unknown."""
    accesses: dict[str, list[BlockAccess]] = {}
    for snode in node.get_nodes():
        body = getattr(snode, "_body", None)
        if body is None:
            return None
        var_ranges = dict(body.var_ranges)
        if not all(isinstance(s, (int, sympy.Integer)) for s in var_ranges.values()):
            return None
        if len(var_ranges) < depth:
            return None
        kinds = ("LOAD",) if reads else ("STORE", "STORE_REDUCTION")
        for usage_type, entries in body.memory_usage.items():
            if usage_type.name not in kinds:
                continue
            for entry in entries:
                index = body.indexing_exprs[entry.index_name]
                accesses.setdefault(entry.buffer_name, []).append(
                    block_access(index, tuple(var_ranges.items()), depth)
                )
    return accesses


@functools.lru_cache(maxsize=8192)
def block_access(index, var_ranges: tuple, depth: int) -> BlockAccess:
    """``BlockAccess`` of ``index`` over ``var_ranges`` ((var, size) pairs, in
    loop order).  Every fusion pair a node is in asks again for the same
    accesses and expanding them is costly: kept by value (never mutated)."""
    return BlockAccess(index, dict(var_ranges), depth)


def same_block(write: BlockAccess, read: BlockAccess) -> bool:
    if not (write.linear_in_outer and read.linear_in_outer):
        return False
    if write.outer_sizes != read.outer_sizes or write.outer_coeffs != read.outer_coeffs:
        return False
    block = dense_block_size(write)
    if block is None or not outer_blocks_disjoint(write, block):
        return False
    bounds = index_bounds(read.inner, read.inner_ranges)
    return bounds is not None and bounds.lower >= 0 and bounds.upper <= block - 1


def dense_block_size(write: BlockAccess) -> int | None:
    """S when the write's inner part maps its loops onto [0, S) one to one."""
    terms = sympy.Add.make_args(write.inner) if write.inner != 0 else ()
    strides = []
    for term in terms:
        coeff, var = term.as_coeff_Mul()
        if var not in write.inner_ranges or not coeff.is_Integer or coeff <= 0:
            return None
        strides.append((int(coeff), int(write.inner_ranges[var])))
    expected = 1
    for stride, size in sorted(strides):
        if stride != expected:
            return None
        expected *= size
    return expected


def outer_blocks_disjoint(write: BlockAccess, block: int) -> bool:
    span = block
    for coeff, size in reversed(list(zip(write.outer_coeffs, write.outer_sizes))):
        if int(coeff) < span:
            return False
        span = int(coeff) * int(size)
    return True


def index_bounds(expr, ranges) -> ValueRanges | None:
    try:
        bounds = bound_sympy(
            expr, {v: ValueRanges(0, int(n) - 1) for v, n in ranges.items()}
        )
    except Exception:  # an index form value ranges cannot bound
        return None
    if not (bounds.lower.is_number and bounds.upper.is_number):
        return None
    return bounds


def _fits_in_cache(node1, node2, depth: int) -> bool:
    outer = _outer_iterations(node1, depth)
    if outer is None:
        return False
    if not feeds_every_thread(outer):
        return False  # the fused outer loop would leave threads idle
    read = bytes_read(node2)
    return read // outer <= BLOCK_BYTES_IN_CACHE


def _outer_iterations(node, depth: int) -> int | None:
    body = getattr(node.get_nodes()[0], "_body", None)
    if body is None:
        return None
    sizes = list(body.var_ranges.values())[:depth]
    return int(functools.reduce(operator.mul, sizes, 1))


def bytes_read(node) -> int:
    """Bytes node's kernels read, each buffer counted once."""
    numels: dict[str, int] = {}
    for snode in node.get_nodes():
        for dep in snode.read_writes.reads:
            if not isinstance(dep, MemoryDep):
                continue
            numel = dep.get_numel()
            if not isinstance(numel, (int, sympy.Integer)):
                return 1 << 62  # symbolic: never fits
            numels[dep.name] = max(numels.get(dep.name, 0), int(numel))
    return sum(n * V.graph.get_dtype(name).itemsize for name, n in numels.items())


def _buffer_bytes(scheduler, name: str) -> int:
    buf = scheduler.name_to_buf[name].node
    numel = buf.get_numel()
    size = int(numel) if isinstance(numel, (int, sympy.Integer)) else 1
    return max(size, 1) * buf.get_dtype().itemsize


def _log(node1, node2, msg: str, *args) -> None:
    fusion_log.debug(
        "outer-block fusion %s -> %s: " + msg, node1.get_name(), node2.get_name(), *args
    )
