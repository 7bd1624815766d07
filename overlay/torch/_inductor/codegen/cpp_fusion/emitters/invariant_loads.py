"""Load loop-invariant scalars once, before the innermost loop of a C++ kernel.

A scalar load whose index does not use the innermost loop's variable (a
row's mean or variance read by every vector iteration of the row) reads the
same value in every iteration.  The C++ compiler cannot move it out of the
loop: the loop stores through another pointer that, as far as it knows, may
alias the loaded one.  So it reloads the value and recomputes everything
derived from it (LayerNorm's normalization: a division and a square root per
16 elements).  Outer-loop fusion makes this common: per-row results computed
by one inner loop are read, broadcast, by the next.

``CppKernel.load`` (and so ``CppVecKernel.load`` for its stride-0 loads)
asks ``load_line`` for the line it writes to the kernel's loads: a load whose
index names only loop variables and size arguments becomes a candidate, and
its line reads either the memory (as stock) or a hoisted copy, as decided
when the loop nest is written.  ``hoist_invariant_loads``, called by
``codegen_loops_impl`` before it writes the innermost ``LoopLevel``, decides:
a candidate is hoisted when its index does not name that loop's variable,
no node of the kernel stores to its buffer (the buffer names the kernel
recorded while generating the nodes' stores, ``Kernel.store_buffer_names``,
in-place aliases and mutations resolved), the loop is serial and its trip
count a positive constant (so the moved load reads exactly what every
iteration read).  The hoisted loads are written before the loop, in a scope
of their own, as ``auto invariantN = <load>;``; the compiler then hoists the
arithmetic itself.

Flag: ``config.cpp.hoist_invariant_loads`` (TORCHINDUCTOR_CPP_HOIST_INVARIANT_LOADS).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING

import sympy
from torch._inductor.codegen.common import DeferredLine, InplacedBuffer
from torch._inductor.utils import IndentedBuffer
from torch._inductor.virtualized import V

if TYPE_CHECKING:
    from torch._inductor.codegen.cpp import CppKernel, LoopLevel, LoopNest


@dataclasses.dataclass(eq=False)
class _Candidate:
    """A scalar load that may move before the innermost loop."""

    buffer: IndentedBuffer  # the buffer its line went to (loads, or a masked body's)
    name: str  # the graph buffer it reads
    index: sympy.Expr  # its index, as the kernel renamed it
    load: str  # the load as the kernel prints it: `in_ptr1[...]`
    local: str | None = None  # the hoisted copy it reads, once planned


class InvariantLoadLine(DeferredLine):
    """``auto tmpN = <load>;``: reads the hoisted copy once the loop nest
    hoisted the load.  Resolved when the kernel's text is produced, as
    upstream's ``DelayReplaceLine`` is; a ``DeferredLine`` of the loaded
    buffer otherwise, so the code that moves kernel lines under a tail loop
    (``move_code_under_inner_loop``) takes it as one."""

    def __init__(self, name: str, line: str, candidate: _Candidate):
        if candidate.load not in line:
            # The kernel prints its loads otherwise than this module expects.
            raise AssertionError(f"no load {candidate.load!r} in the line {line!r}")
        super().__init__(name, line)
        self.candidate = candidate

    def __call__(self) -> str | None:
        line = super().__call__()
        local = self.candidate.local
        if line is None or local is None:
            return line
        return line.replace(self.candidate.load, local)

    def _new_line(self, line: str) -> InvariantLoadLine:
        return InvariantLoadLine(self.name, line, self.candidate)


def load_line(kernel: CppKernel, name: str, index: sympy.Expr, load: str):
    """The line ``CppKernel.load`` generates for ``load`` (``ptr[index]``):
    ``load`` itself, or a line that reads a hoisted copy if the loop nest
    hoists it."""
    if kernel.cse.try_get(load) is not None:
        return load  # a CSE hit: no line is written
    if not names_only_loops_and_sizes(kernel, index):
        return load
    candidate = _Candidate(kernel.loads, name, index, load)
    kernel.invariant_load_candidates.append(candidate)
    return InvariantLoadLine(name, load, candidate)


def names_only_loops_and_sizes(kernel: CppKernel, index: sympy.Expr) -> bool:
    """Whether ``index`` names only the kernel's loop variables and size
    arguments: not an indirect value (a tmp computed in the loop body) nor a
    variable of a tail loop moved under the kernel."""
    sizes = set(kernel.args.sizevars.values())
    return all(
        symbol in kernel.itervars or symbol.name in sizes
        for symbol in index.free_symbols
    )


def hoist_invariant_loads(
    code: IndentedBuffer,
    stack: contextlib.ExitStack,
    loop_nest: LoopNest,
    depth: int,
) -> None:
    """Called before the loop at ``depth`` of ``loop_nest`` is written: before
    the innermost one, writes the loads it hoists (in a scope entered on
    ``stack``) and points their lines at the copies."""
    assert loop_nest.loops is not None
    kernels = _kernels(loop_nest.get_kernel())
    candidates = [c for kernel in kernels for c in kernel.invariant_load_candidates]
    for candidate in candidates:
        candidate.local = None  # decided afresh each time the nest is written
    if not candidates or depth != len(loop_nest.loops) - 1:
        return
    loop = loop_nest.loops[depth]
    if not _runs_serially_at_least_once(loop):
        return
    hoisted = _plan(kernels, loop)
    if hoisted:
        stack.enter_context(code.indent())  # a scope for the hoisted names
        code.splice(hoisted)


def _plan(kernels: list[CppKernel], loop: LoopLevel) -> IndentedBuffer:
    """Mark the candidates the loop hoists; the lines that load them."""
    args = kernels[0].args
    written = {
        memory_of_buffer(args, name)
        for kernel in kernels
        for name in kernel.store_buffer_names
    }
    hoisted = IndentedBuffer()
    names: dict[str, str] = {}  # load -> its hoisted copy, shared by the kernels
    for kernel in kernels:
        for candidate in kernel.invariant_load_candidates:
            if (
                candidate.buffer is not kernel.loads  # a masked body, a suffix
                or loop.var in candidate.index.free_symbols
                or memory_of_buffer(args, candidate.name) in written
            ):
                continue
            if candidate.load not in names:
                names[candidate.load] = f"invariant{len(names)}"
                hoisted.writeline(f"auto {names[candidate.load]} = {candidate.load};")
            candidate.local = names[candidate.load]
    return hoisted


def _runs_serially_at_least_once(loop: LoopLevel) -> bool:
    size = sympy.sympify(loop.size)
    offset = sympy.sympify(loop.offset)
    return (
        not loop.parallel
        and not loop.collapsed
        and size.is_Integer
        and offset.is_Integer
        and size > offset
    )


def _kernels(proxy) -> list[CppKernel]:
    """The proxy's kernels, or none when one of them has inner loops of its
    own (2-D tiles) or code moved under an inner tail loop."""
    from torch._inductor.codegen.cpp import CppKernelProxy, CppTile2DKernel

    if not isinstance(proxy, CppKernelProxy):
        return []
    kernels = list(proxy.kernels)
    if any(isinstance(k, CppTile2DKernel) or k.inner_itervars for k in kernels):
        return []
    return kernels


def memory_of_buffer(args, name: str) -> str:
    """What a buffer's pointer points at: the in-place argument it shares
    (``in_out_ptr0`` for both buffers of an in-place pair) or its own name,
    after mutations are resolved to the mutated buffer."""
    if V.graph.scheduler:
        name = V.graph.scheduler.mutation_real_name.get(name, name)
    inplaced = args.inplace_buffers.get(name)
    return inplaced.inner_name if isinstance(inplaced, InplacedBuffer) else name

