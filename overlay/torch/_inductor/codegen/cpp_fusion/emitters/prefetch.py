"""Prefetch the next rows during the last pass of an outer-loop fused kernel.

An outer-loop fused normalization reads each row (a LayerNorm row, a
GroupNorm group) several times per outer iteration: its first pass from
memory, the later passes from cache.  Only the first pass waits for memory,
and the hardware prefetcher, which stops at every 4 KiB page, does not run
ahead of it.  Meanwhile the last pass works from cache and leaves the
memory bus idle for reads.

In the last pass we therefore prefetch, for every vector load of a row that
the first pass reads too, the same offset LOOKAHEAD_BYTES ahead, rounded up
to whole outer iterations (LayerNorm over 1024 columns: 4 rows; GroupNorm(32,
256) on 56x56 images: the next group); a row the last pass does not read
(softmax's last pass reads a local buffer of exp values) is prefetched at
the start of the last pass's innermost loop when it runs the same
iterations as the first pass's.  The next iterations' first passes then
read from cache.  A shorter distance arrives too late and takes the fill
buffers the output stores need.

Guards: the kernel touches more bytes than the last-level cache holds (else
the rows come from cache anyway; the size is the one streaming stores use),
the load is a full float vector whose index is affine in the fused loop
variable with a static stride, the first pass loads the same memory (an
in-place buffer is in_ptr0 there and in_out_ptr0 in the last pass), and
that buffer is at least 1/32 of the cache: a small attention mask stays
cached and gains nothing.  A first pass that computes transcendental
functions is bound by its math, not by memory, and gets no prefetches.  A
prefetch never faults, so the rows past the end of a thread's share or of
the tensor cost a wasted line, not a crash.

``CppVecKernel.load`` generates its contiguous loads through
``generate_vector_load``: after each unmasked full float vector load it
writes a prefetch line, and before its first one a slot for rows the kernel
does not read; both print nothing unless a plan asks for them.
``codegen_loops_impl`` calls ``gen_passes_with_prefetch`` for an
``OuterLoopFusedKernel``: it plans from the passes' recorded loads (buffer,
sympy index: the stride of the fused loop variable is the index's static
coefficient of it), the kernel group's argument sizes, and the first pass's
nodes (their ``LoopBody`` op counts tell a pass bound by its math), then
generates the passes.  The prefetch is a C++ helper defined here and
written before the kernel by emitters/kernel_helpers.py: ``__builtin_prefetch``
on GCC and Clang, ``_mm_prefetch`` / ``__prefetch`` on MSVC, nothing on
another compiler.  Measurements: docs/features/0014-prefetching-the-next-rows.md.

Flag: ``config.cpp.outer_loop_prefetch`` (TORCHINDUCTOR_CPP_OUTER_LOOP_PREFETCH).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch._inductor.codegen.cpp_utils import cexpr_index
from torch._inductor.utils import DeferredLineBase
from torch._inductor.virtualized import V

from .. import costs, speculation
from . import kernel_helpers as helpers
from . import streaming_stores as streaming
from .invariant_loads import memory_of_buffer

log = torch._logging.getArtifactLogger(__name__, "fusion")

# A prefetch is a hint: a compiler without one of these spellings drops it.
_PREFETCH_DEFINITION = """\
#ifndef INDUCTOR_OVERLAY_PREFETCH_AHEAD
#define INDUCTOR_OVERLAY_PREFETCH_AHEAD
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif
// Asks for the cache line `bytes` past `ptr`; a prefetch never faults, so the
// address may lie past the end of the buffer.
inline void prefetch_ahead(const void* ptr, std::ptrdiff_t bytes) {
    auto address = reinterpret_cast<const char*>(
        reinterpret_cast<std::uintptr_t>(ptr) + bytes);
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(address, 0, 3);
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
    _mm_prefetch(address, _MM_HINT_T0);
#elif defined(_MSC_VER) && defined(_M_ARM64)
    __prefetch(address);
#else
    (void)address;
#endif
}
#endif"""
# The helper the kernels call (written before the kernel function, after
# the streaming stores' helpers: emitters/kernel_helpers.py).
PREFETCH = helpers.Helper("prefetch_ahead", _PREFETCH_DEFINITION, 2)
# Stands for the distance in a prefetch line until the plan sets it.
_DISTANCE = "PREFETCH_DISTANCE"
# A slot line's text until the plan fills it (never printed).
_SLOT = "// prefetch slot"


@dataclasses.dataclass(eq=False)
class _Load:
    """A full float vector load of a kernel, and the prefetch that may follow it."""

    kernel: Any  # the CppVecKernel
    name: str  # the graph buffer
    pointer: str  # its kernel argument
    index: sympy.Expr
    ahead: int = 0  # bytes ahead to prefetch; 0: none

    def prefetch(self, ahead: int | str) -> str:
        address = f"{self.pointer} + {cexpr_index(self.index)}"
        return f"{PREFETCH.name}({address}, {ahead});"


@dataclasses.dataclass(eq=False)
class _Slot:
    """Where a kernel's body starts: rows of another pass prefetched there."""

    buffer: object  # the buffer the slot went to
    rows: list = dataclasses.field(default_factory=list)  # (load, ahead)


class PrefetchLine(DeferredLineBase):
    """The prefetch after a load: printed once the plan gives it a distance."""

    def __init__(self, line: str, load: _Load):
        assert _DISTANCE in line, line  # the distance is filled in when printed
        super().__init__(line)
        self.load = load

    def __call__(self) -> str | None:
        if not self.load.ahead:
            return None
        return self.line.replace(_DISTANCE, str(self.load.ahead))

    def _new_line(self, line: str) -> PrefetchLine:
        return PrefetchLine(line, self.load)


class PrefetchSlotLine(DeferredLineBase):
    """The prefetches of rows a pass does not read, before its first load."""

    def __init__(self, line: str, slot: _Slot):
        super().__init__(line)
        self.slot = slot

    def __call__(self) -> str | None:
        if not self.slot.rows:
            return None
        indent = self.line[: len(self.line) - len(self.line.lstrip())]
        rows = self.slot.rows
        return "\n".join(indent + load.prefetch(ahead) for load, ahead in rows)

    def _new_line(self, line: str) -> PrefetchSlotLine:
        return PrefetchSlotLine(line, self.slot)


def generate_vector_load(kernel, name, pointer, index, dtype, line, masked: bool):
    """``CppVecKernel.load``'s contiguous load ``line``, generated into the
    kernel's loads with the lines that may prefetch (see module docstring)."""
    candidate = (
        speculation.worth_speculating()
        and dtype == torch.float32
        and not masked
        and index != 0
        and kernel.tiling_factor * 32 <= kernel.vec_isa.bit_width()  # one vector
        # the tiled loop is the innermost: no code moved under a tail loop
        and kernel.tiling_idx == len(kernel.itervars) - 1
        and not _is_output(kernel.args, name)
    )
    new = candidate and kernel.cse.try_get(line) is None
    if new and kernel.prefetch_slot is None:
        kernel.prefetch_slot = _Slot(kernel.loads)
        kernel.loads.writeline(PrefetchSlotLine(_SLOT, kernel.prefetch_slot))
    csevar = kernel.cse.generate(kernel.loads, line, dtype=dtype)
    if new:
        load = _Load(kernel, name, pointer, index)
        kernel.prefetch_loads.append(load)
        kernel.loads.writeline(PrefetchLine(load.prefetch(_DISTANCE), load))
    return csevar


def _is_output(args, name: str) -> bool:
    """Whether the kernel group reads ``name`` through an output pointer (a
    buffer an earlier kernel of the group wrote): not prefetched."""
    if V.graph.scheduler:
        name = V.graph.scheduler.mutation_real_name.get(name, name)
    return name in args.output_buffers


def gen_passes_with_prefetch(
    code, outer_nest, kernel, gen_loop_nest: Callable
) -> None:
    """Generate the passes of an outer-loop fused kernel, prefetching in the last."""
    _plan(outer_nest, kernel)
    for inner_nest in kernel.inner:
        gen_loop_nest(inner_nest)


def _plan(outer_nest, kernel) -> bool:
    """Set the prefetches of the kernel's last pass; whether it has any."""
    passes = [nest.get_kernel() for nest in kernel.inner]
    kernels = [k for proxy in passes for k in getattr(proxy, "kernels", ())]
    for k in kernels:  # decided afresh each time the kernel is written
        for load in k.prefetch_loads:
            load.ahead = 0
        if k.prefetch_slot is not None:
            k.prefetch_slot.rows.clear()
    if len(passes) < 2 or not outer_nest.loops:
        return False
    if streaming.footprint_bytes(kernel.args) < costs.last_level_cache_bytes():
        return False
    outer = outer_nest.loops[-1]
    if not isinstance(outer.steps, (int, sympy.Integer)):
        return False  # a symbolic step (dynamic shapes)
    if _bound_by_its_math(passes[0]):
        # bias+GELU+LayerNorm's first pass (erf) ran 14-16% slower with its
        # rows prefetched
        return False
    rows = _Rows(kernel.args, outer.var, int(outer.steps))
    first = [
        load for load in _pass_loads(passes[0]) if rows.worth_prefetching(load)
    ]
    memories = {rows.memory(load) for load in first}
    covered = set()
    for load in _pass_loads(passes[-1]):
        if rows.memory(load) in memories and (ahead := rows.ahead(load)):
            load.ahead = ahead
            covered.add(rows.memory(load))
    slot = _first_slot(passes[-1])
    for load in first:
        if rows.memory(load) in covered or slot is None:
            continue
        if _same_loop(kernel.inner[0], kernel.inner[-1]) and rows.uses_only(
            load.index, kernel.inner[-1].loops[-1].var
        ):
            slot.rows.append((load, rows.ahead(load)))
            covered.add(rows.memory(load))
    if covered:
        log.debug("outer-loop prefetch: %d rows of the last pass", len(covered))
        helpers.use(kernel.args, PREFETCH)
    return bool(covered)


class _Rows:
    """The fused loop's rows, as the first pass reads them."""

    def __init__(self, args, outer_var: sympy.Symbol, step: int):
        self.args, self.outer_var, self.step = args, outer_var, step

    def memory(self, load: _Load) -> str:
        # memories, not pointers: an in-place buffer is in_ptr0 in the first
        # pass and in_out_ptr0 in the last (attention's softmax)
        return memory_of_buffer(self.args, load.name)

    def worth_prefetching(self, load: _Load) -> bool:
        return bool(self.ahead(load)) and _too_large_to_stay_cached(
            self.args, load.name
        )

    def ahead(self, load: _Load) -> int:
        """Bytes to the same offset LOOKAHEAD_BYTES (the cost model's) ahead
        in whole rows, or 0."""
        stride = static_stride(load.index, self.outer_var, load.kernel.itervars)
        if not stride:
            return 0
        row_bytes = stride * self.step * 4  # float32
        if row_bytes <= costs.PAGE_BYTES and not costs.prefetches_short_rows():
            return 0  # the hardware prefetcher follows such rows on its own
        return math.ceil(costs.LOOKAHEAD_BYTES / row_bytes) * row_bytes

    def uses_only(self, index: sympy.Expr, loop_var) -> bool:
        return index.free_symbols <= {loop_var, self.outer_var}


def static_stride(index: sympy.Expr, var, loop_vars) -> int:
    """The coefficient of ``var`` in ``index`` if ``index`` is a sum of
    positive integer multiples of loop variables and a constant, else 0."""
    stride = 0
    for term in sympy.Add.make_args(index):
        coefficient, rest = term.as_coeff_Mul()
        if rest == 1:
            if not coefficient.is_Integer:
                return 0
            continue
        if not (coefficient.is_Integer and coefficient > 0 and rest in loop_vars):
            return 0
        if rest == var:
            stride += int(coefficient)
    return stride


def _pass_loads(proxy) -> list[_Load]:
    return [load for k in proxy.kernels for load in k.prefetch_loads]


def _first_slot(proxy) -> _Slot | None:
    """The slot of the first kernel of the pass whose body is written (the
    main vector kernel), if it sits in the kernel's loads."""
    for k in proxy.kernels:
        if any(start == end for start, end in k.active_ranges.values()):
            continue  # an empty range: its body is not written
        slot = k.prefetch_slot
        return slot if slot is not None and slot.buffer is k.loads else None
    return None


def _same_loop(first_nest, last_nest) -> bool:
    """Whether both passes' innermost loops run the same iterations, so an
    index of the first means the same in the last."""
    if not first_nest.loops or not last_nest.loops:
        return False
    a, b = first_nest.loops[-1], last_nest.loops[-1]
    return (a.var, a.offset, a.size, a.steps) == (b.var, b.offset, b.size, b.steps)


def _bound_by_its_math(proxy) -> bool:
    """Whether a node of the pass computes a transcendental function, by
    the op counts of its LoopBody (read from the fused scheduler node)."""
    return any(
        getattr(node, "_body", None) is not None
        and any(node.loop_body.op_counts.get(op, 0) for op in costs.TRANSCENDENTAL_OPS)
        for node in _first_pass_nodes(proxy)
    )


def _first_pass_nodes(proxy) -> list:
    """The scheduler nodes of the outer-loop fused node's first member; the
    node is the one whose nodes the kernel group scheduled last."""
    from torch._inductor.codegen.cpp import OuterLoopFusedSchedulerNode

    scheduled = proxy.kernel_group.scheduled_nodes
    if not scheduled:
        return []
    fused = V.graph.scheduler.name_to_fused_node.get(scheduled[-1].get_name())
    if not isinstance(fused, OuterLoopFusedSchedulerNode):
        return []
    return fused.get_outer_nodes()[0].get_nodes()


def _too_large_to_stay_cached(args, name: str) -> bool:
    """Whether the buffer behind ``name`` is one a pass evicts: at least
    the share of the cache below which streaming stores leave outputs alone
    (an attention mask of 256 KiB stays in cache and gains nothing)."""
    minimum = costs.stays_cached_below_bytes()
    names = streaming.names_of_memory(args, name)
    return any(streaming.buffer_bytes(n) >= minimum for n in names)
