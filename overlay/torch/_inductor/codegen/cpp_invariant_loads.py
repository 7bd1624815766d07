"""Load loop-invariant scalars once, before the innermost loop of a C++ kernel.

A scalar load whose index does not use the innermost loop's variable (a
row's mean or variance read by every vector iteration of the row) reads the
same value in every iteration.  The C++ compiler cannot move it out of the
loop: the loop stores through another pointer that, as far as it knows, may
alias the loaded one.  So it reloads the value and recomputes everything
derived from it (LayerNorm's normalization: a division and a square root per
16 elements).  Outer-loop fusion makes this common: per-row results computed
by one inner loop are read, broadcast, by the next.

We emit such loads once, right before the innermost loop, in a scope of
their own, and let the loop body read the local copy; the compiler then
hoists the arithmetic itself.  A load is moved only when nothing in the
kernel writes the memory it reads, the loop is not a parallel one, and it
runs at least once (its trip count is a positive constant), so the moved
load reads exactly what every iteration would have read.

Flag: ``config.cpp.hoist_invariant_loads`` (TORCHINDUCTOR_CPP_HOIST_INVARIANT_LOADS).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import sympy

from .. import config
from ..utils import IndentedBuffer


if TYPE_CHECKING:
    import contextlib

    from .cpp import CppKernel, LoopNest


# `auto tmp4 = out_ptr1[static_cast<int64_t>(x0)];`: a scalar load as the C++
# kernels emit it (vector loads are calls, masked loads live in lambdas).
_SCALAR_LOAD = re.compile(
    r"^auto (?P<var>tmp\d+) = (?P<ptr>(?:in_ptr|out_ptr|in_out_ptr)\d+)"
    r"\[(?P<index>[^\[\]]*)\];$"
)
_WRITABLE_POINTER = re.compile(r"\b(?:in_out_ptr|out_ptr)\d+\b")
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
# What an index may name besides the enclosing loops' variables.
_INDEX_WORDS = {"static_cast", "int64_t", "c10", "div_floor_integer"}
_SIZE_SYMBOL = re.compile(r"^k?s\d+$")
_LOOP_VAR = re.compile(r"^x\d+$")


def hoist_invariant_loads(
    code: IndentedBuffer,
    stack: contextlib.ExitStack,
    loop_nest: LoopNest,
    depth: int,
) -> None:
    """Called before the loop at ``depth`` of ``loop_nest`` is written."""
    if not config.cpp.hoist_invariant_loads:
        return
    assert loop_nest.loops is not None
    if depth != len(loop_nest.loops) - 1:
        return
    loop = loop_nest.loops[depth]
    if not _runs_serially_at_least_once(loop):
        return
    proxy = loop_nest.get_kernel()
    preamble = _plan(proxy, str(loop.var))
    if not preamble:
        return
    stack.enter_context(code.indent())  # a scope for the hoisted names
    code.writelines(preamble)


def _runs_serially_at_least_once(loop) -> bool:
    size = sympy.sympify(loop.size)
    offset = sympy.sympify(loop.offset)
    return (
        not loop.parallel
        and not loop.collapsed
        and size.is_Integer
        and offset.is_Integer
        and size > offset
    )


def _plan(proxy, inner_var: str) -> list[str]:
    """Rewrite the proxy's invariant loads; return the lines that load them.

    The plan is kept on the proxy: a loop nest written twice gets the same
    preamble again (its loads were rewritten the first time).
    """
    planned = getattr(proxy, "_hoisted_invariant_loads", None)
    if planned is not None:
        return planned
    kernels = list(_kernels(proxy))
    preamble: list[str] = []
    if kernels:
        written = _written_memory(kernels)
        names: dict[str, str] = {}  # load expression -> hoisted local
        for kernel in kernels:
            _rewrite_loads(kernel, inner_var, written, names, preamble)
    proxy._hoisted_invariant_loads = preamble
    return preamble


def _kernels(proxy) -> Iterator[CppKernel]:
    """The proxy's kernels, or nothing when one of them has inner loops of its
    own (2-D tiles) or code moved under an inner tail loop."""
    from .cpp import CppKernelProxy, CppTile2DKernel

    if not isinstance(proxy, CppKernelProxy):
        return iter(())
    kernels = list(proxy.kernels)
    if any(
        isinstance(k, CppTile2DKernel) or getattr(k, "inner_itervars", None)
        for k in kernels
    ):
        return iter(())
    return iter(kernels)


def _rewrite_loads(kernel, inner_var, written, names, preamble) -> None:
    lines = kernel.loads._lines
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            continue  # a DeferredLine: the buffer may still be removed
        match = _SCALAR_LOAD.match(line)
        if match is None or not _is_invariant(match["index"], inner_var):
            continue
        if memory_of(kernel.args, match["ptr"]) in written:
            continue
        expr = f"{match['ptr']}[{match['index']}]"
        if expr not in names:
            names[expr] = f"invariant{len(names)}"
            preamble.append(f"auto {names[expr]} = {expr};")
        lines[i] = f"auto {match['var']} = {names[expr]};"


def _is_invariant(index: str, inner_var: str) -> bool:
    for word in _IDENTIFIER.findall(index):
        if word in _INDEX_WORDS or _SIZE_SYMBOL.match(word):
            continue
        if _LOOP_VAR.match(word) and word != inner_var:
            continue
        return False  # the inner variable, an indirect index, anything unknown
    return True


def _written_memory(kernels) -> set[str]:
    """The memory (see memory_of) any buffer of the kernels but their loads
    names through a writable pointer: stores, reduction results, masked
    bodies.  Over-approximated on purpose."""
    written: set[str] = set()
    for kernel in kernels:
        for value in vars(kernel).values():
            if isinstance(value, IndentedBuffer) and value is not kernel.loads:
                text = value.getvalue()
                written.update(
                    memory_of(kernel.args, p) for p in _WRITABLE_POINTER.findall(text)
                )
    return written


def memory_of(args, pointer: str) -> str:
    """The in-place buffer a pointer aliases (``auto out_ptr0 = in_out_ptr0;``),
    or the pointer itself."""
    for inplaced in args.inplace_buffers.values():
        inner = getattr(inplaced, "inner_name", None)
        if inner is None:
            continue  # a removed argument
        if pointer == inner:
            return inner
        for other in inplaced.other_names:
            names = (args.input_buffers.get(other), args.output_buffers.get(other))
            if pointer in names:
                return inner
    return pointer
