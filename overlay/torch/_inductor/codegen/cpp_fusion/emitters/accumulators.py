"""Several accumulators for a horizontal vector reduction (C++ backend).

A vectorized sum over a row compiles to one dependency chain,
``acc = acc + x``: every iteration waits for the previous add (3-4 cycles
for 64 bytes).  That is slower than the cache can deliver, so once
outer-loop fusion keeps a row in L2 between the passes of a normalization,
the statistics loops become the bottleneck: in the fused GroupNorm(32, 256)
kernel the two sums over each group's 25088 elements ran at about half of
L2 speed.

This module gives such a reduction ACCUMULATORS independent accumulators.
The loop body is unchanged; after the combine line the accumulators rotate
(``{ auto r = acc; acc = acc_slot1; acc_slot1 = acc_slot2; ...; }``), so
iteration i depends on iteration i - ACCUMULATORS only.  After the loop the
slots are combined into the original accumulator, before stock's horizontal
reduction reads it.

Rotated in a loop the compiler does not unroll, the accumulators cost a
register move each per iteration: GCC 12 turns the sum over a row into 9
instructions per vector, one of them the add (5 moves), and LayerNorm's
sum of squares into 11 (4 moves), more than the whole statistics pass of
ATen's kernel.  So the innermost loop of a rotating reduction gets an
unroll pragma for ACCUMULATORS iterations (``unroll_rotated_loop``, flag
``config.cpp.unroll_rotated_reductions``): unrolled, the rotation is a
renaming and the moves are gone.  GCC renames it only when it builds webs
(``-fweb``, implied by ``-funroll-loops`` but not by the pragma): with the
pragma alone the unrolled loop holds more moves than before, so patch 0017
also adds ``-fweb`` to GCC's optimization flags under the same flag.  Clang
renames without help.  GCC 12 ignores the pragma inside an OpenMP parallel
region, so a parallelized kernel keeps its moves.
Welford reductions (var/var_mean, LayerNorm's statistics over rows longer
than 1024) keep one accumulator: rotated, their slots measured slower, not
faster (1 thread, kernel time with/without: var_mean over (512, 2048) 1.29,
LayerNorm(2048) 1.24, the seed GroupNorm(2, 16) 1.13).  A Welford slot is
three vectors and a count, and each update reads a reciprocal weight
indexed by that count; why the rotation costs more than it hides was not
established.

Which reductions:
- sum, max and min over float32/float64, vectorized along a reduction loop
  (horizontal).  Arg-reductions keep one accumulator.
- The number of vector iterations per row is static and at least
  MIN_ITERATIONS_PER_ACCUMULATOR per accumulator: short rows keep stock's
  code, the final combine would cost more than it saves.
- The loop body is cheap: it computes no transcendental function.  With
  an exp per element (softmax's sum) the loop is bound by the exp, not by
  the add chain, and the rotation's moves only add work: the 4096-wide
  softmax ran 5-8% slower than stock with them.
- Numerics: stock sums a float row of more than 4096 elements through
  CascadeSumHelper, which cascades after CASCADE_CHUNK vector adds per lane.
  Here each accumulator's chain is at most CASCADE_CHUNK long, so the
  cascade helper of a sum is dropped and the sum is at least as accurate as
  stock's; longer rows keep stock's cascade summation.

Flag: ``config.cpp.multi_accumulator_reductions``
(TORCHINDUCTOR_CPP_MULTI_ACCUMULATOR_REDUCTIONS).
"""

from __future__ import annotations

import functools
import operator

import sympy
import torch
from torch._inductor import config

from .. import flag_requirements
from ..costs import (
    ACCUMULATORS,
    MIN_ITERATIONS_PER_ACCUMULATOR,
    TRANSCENDENTAL_OPS,
)
from ..nodes import is_outer_loop_fused

# Vector adds per lane that CascadeSumHelper sums before it cascades
# (its kChunkSize as cpp.py instantiates it).
CASCADE_CHUNK = 4096
ROTATABLE_REDUCTIONS = ("sum", "max", "min")
ROTATABLE_DTYPES = (torch.float32, torch.float64)

fusion_log = torch._logging.getArtifactLogger(__name__, "fusion")


def accumulator_count(kernel, reduction_type: str, dtype: torch.dtype) -> int:
    """Accumulators for this reduction in this vector kernel; 1 is stock.

    The main kernel and its masked tail kernel get the same answer (the
    decision reads only the kernel's call ranges and tiling), because both
    must agree on whether the cascade helper exists.
    """
    if not config.cpp.multi_accumulator_reductions:
        return 1
    if reduction_type not in ROTATABLE_REDUCTIONS or dtype not in ROTATABLE_DTYPES:
        return 1
    if not _is_plain_vec_kernel(kernel) or kernel.tiling_idx < kernel.reduction_depth:
        return 1
    if _has_transcendental(kernel):
        return 1
    iterations = _vector_iterations_per_row(kernel)
    if iterations < MIN_ITERATIONS_PER_ACCUMULATOR * ACCUMULATORS:
        return 1
    if iterations > CASCADE_CHUNK * ACCUMULATORS:
        return 1
    return ACCUMULATORS


def keeps_acc_helper(stock_decision: bool, reduction_type: str, count: int) -> bool:
    """Whether the reduction still uses stock's cascade/Welford helper."""
    if count > 1 and reduction_type == "sum":
        return False  # each accumulator's chain is short enough on its own
    return stock_decision


def add_accumulators(
    kernel,
    acc_vec: str,
    acc_type_vec: str,
    reduction_type: str,
    dtype: torch.dtype,
    count: int,
) -> None:
    """Declare, rotate and finally combine count - 1 extra accumulators.

    Writes into the kernel's buffers: the declarations where stock declares
    per-kernel and per-thread accumulators, the rotation right after the
    combine line in the loop body, the final combine where stock finishes
    its accumulators (before the horizontal reduction and before the
    per-thread result is stored).  A masked tail kernel combines into
    whichever accumulator is current and rotates nothing.
    """
    if count <= 1 or kernel.tail_size:
        return
    slots = [f"{acc_vec}_slot{i}" for i in range(1, count)]
    init = kernel.reduction_init_vec(reduction_type, dtype)
    for prefix in (kernel.non_parallel_reduction_prefix, kernel.local_reduction_init):
        for slot in slots:
            prefix.writeline(f"{acc_type_vec} {slot} = {init};")
    kernel.stores.writeline(_rotation(acc_vec, slots))
    kernel.rotating_accumulators = count
    kernel.non_parallel_reduction_suffix.writeline(
        _combine(kernel, reduction_type, acc_vec, slots)
    )
    kernel.local_reduction_stores.writeline(
        _combine(kernel, reduction_type, f"{acc_vec}_local", slots)
    )
    fusion_log.debug(
        "%s reduction into %s uses %d accumulators", reduction_type, acc_vec, count
    )


def unroll_rotated_loop(
    loop_lines: list[str], loop_nest, depth: int, code, stack, worksharing
) -> list[str]:
    """The lines of loop ``depth`` of ``loop_nest``, with an unroll pragma
    right before its ``for`` when it is the serial innermost vector loop of a
    kernel whose reduction rotates accumulators.  A loop that an outer
    ``omp for collapse(n)`` takes in (``collapsed``) is not serial: nothing may
    stand between the collapsed loops.

    Inside an OpenMP parallel region the loop goes into a lambda called in
    place (see ``_in_a_function_of_its_own``)."""
    if not flag_requirements.enabled("unroll_rotated_reductions"):
        return loop_lines
    loop = loop_nest.loops[depth]
    if depth != len(loop_nest.loops) - 1 or not loop.simd_vec:
        return loop_lines
    if loop.parallel or loop.collapsed:
        return loop_lines
    proxy = loop_nest.get_kernel()
    kernels = getattr(proxy, "kernels", ())
    count = max((k.rotating_accumulators for k in kernels), default=1)
    pragma = _unroll_pragma(count) if count > 1 else None
    if pragma is None:
        return loop_lines
    if worksharing.in_parallel:
        _in_a_function_of_its_own(code, stack)
    return [*loop_lines[:-1], pragma, loop_lines[-1]]


def _in_a_function_of_its_own(code, stack) -> None:
    """Open a lambda, called in place, around the loop written next.

    GCC 12 drops unroll pragmas in the loops of an OpenMP region's outlined
    function, so there the rotation keeps its moves.  In a lambda's body, a
    function of its own, the pragma holds; GCC inlines the call back into
    the region.  The lambda captures by reference: the accumulators and
    buffers the loop updates are the enclosing ones, and the loop has no
    return, break or continue that would change meaning inside it.
    """
    code.writeline("[&]() {")
    # runs after the loop's own scope closes (the stack unwinds in reverse)
    stack.callback(code.writeline, "}();")


def _unroll_pragma(count: int) -> str | None:
    from torch._inductor import cpp_builder

    if cpp_builder.is_gcc():
        return f"#pragma GCC unroll {count}"
    if cpp_builder.is_clang():
        return f"#pragma unroll {count}"
    return None  # other compilers keep the moves


def _rotation(acc_vec: str, slots: list[str]) -> str:
    # Stock renames acc_vec to acc_vec_local in the body for a parallel
    # reduction (a whole-word rename); the slot names are not touched by it.
    chain = [acc_vec, *slots]
    moves = " ".join(f"{dst} = {src};" for dst, src in zip(chain, chain[1:]))
    return f"{{ auto rotated = {acc_vec}; {moves} {slots[-1]} = rotated; }}"


def _combine(kernel, reduction_type: str, acc: str, slots: list[str]) -> str:
    combined = acc
    for slot in slots:
        combined = kernel.reduction_combine_vec(reduction_type, combined, slot)
    return f"{acc} = {combined};"


def _has_transcendental(kernel) -> bool:
    """Whether the loop body computed so far calls an expensive function.

    "So far": the ops of the nodes this kernel has run, up to the one whose
    reduction is being generated (the kernel's loop body), from their
    LoopBody op counts.
    """
    return not TRANSCENDENTAL_OPS.isdisjoint(_ops_so_far(kernel.current_node))


def _ops_so_far(node) -> set[str]:
    """Op names of the nodes of ``node``'s kernel, up to and including it."""
    from torch._inductor.virtualized import V

    if node is None:
        return set()
    group = V.graph.scheduler.name_to_fused_node.get(node.get_name(), node)
    if is_outer_loop_fused(group):  # one kernel per outer-loop member
        group = next(m for m in group.get_outer_nodes() if node in m.get_nodes())
    ops: set[str] = set()
    for snode in group.get_nodes():
        ops.update(snode.loop_body.op_counts)
        if snode is node:
            break
    return ops


def _is_plain_vec_kernel(kernel) -> bool:
    # CppTile2DKernel loads transposed tiles in inner loops of its own;
    # keep its reductions as they are.
    from torch._inductor.codegen.cpp import CppVecKernel

    return type(kernel) is CppVecKernel


def _vector_iterations_per_row(kernel) -> int:
    """Static count of full-vector combines per reduction row, else 0."""
    ranges = kernel.call_ranges[kernel.reduction_depth :]
    reduction_size = functools.reduce(operator.mul, ranges, sympy.Integer(1))
    tiled = kernel.call_ranges[kernel.tiling_idx]
    if not all(isinstance(r, (int, sympy.Integer)) for r in (reduction_size, tiled)):
        return 0
    return int(reduction_size) // int(tiled) * (int(tiled) // kernel.tiling_factor)
