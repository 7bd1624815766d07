"""Invariant scalar loads move before the innermost loop (cpp.hoist_invariant_loads).

A scalar that the innermost loop reads at the same index in every iteration
(a row's mean or variance under the fused loop over rows) is loaded once
per row, and the loop reads a local copy.  The tests check the generated
loops (nothing per-row is loaded inside them any more), agreement with
eager, and the guards: no hoisting of memory the kernel writes, of indices
that use the inner variable or an indirect value, or before a loop whose
trip count is not a positive constant.
"""

from __future__ import annotations

import contextlib
import re
import types

import pytest
import sympy
import torch
import torch._inductor.codegen.cpp_fusion.emitters.invariant_loads as invariant
from compile_utils import compile_shipped_and_inspect
from torch._inductor.codegen.common import InplacedBuffer, KernelArgs
from torch._inductor.utils import IndentedBuffer
from torch._inductor.virtualized import V

X0, X1 = sympy.symbols("x0 x1", integer=True, nonnegative=True)
HOIST_OFF = {"cpp.hoist_invariant_loads": False}
# a scalar load indexed by the outer loop only
PER_ROW_LOAD = re.compile(r"auto tmp\d+ = \w+\[static_cast<int64_t>\(x0\)\];")


def layernorm():
    return torch.nn.LayerNorm(512), (torch.randn(64, 512),)


def test_layernorm_loads_row_statistics_once_per_row():
    fn, args = layernorm()
    on = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=HOIST_OFF)
    assert on.nests == off.nests == [1]
    # The mean, read by the variance loop and the normalization loop, and
    # the variance; the fourth is the mean's division, which has no loop.
    assert len(PER_ROW_LOAD.findall(off.code)) == 4
    assert len(PER_ROW_LOAD.findall(on.code)) == 1
    assert on.code.count("auto invariant") == 3
    assert on.code.count("= invariant") == 3


def test_loop_of_unknown_trip_count_keeps_its_loads():
    # With a symbolic row length the row may be empty: a load moved before
    # the loop would read what no iteration reads.
    fn = lambda x: x / x.sum(-1, keepdim=True)  # noqa: E731
    args = (torch.rand(64, 512) + 0.5,)  # row sums far from 0: well conditioned
    static = compile_shipped_and_inspect(fn, args)
    dynamic = compile_shipped_and_inspect(fn, args, dynamic=True)
    assert "invariant" in static.code
    assert "invariant" not in dynamic.code


def test_bfloat16_rows_with_a_tail():
    fn, args = torch.nn.LayerNorm(1000), (torch.randn(32, 1000),)
    fn, args = fn.bfloat16(), (args[0].bfloat16(),)
    on = compile_shipped_and_inspect(fn, args)
    assert "invariant" in on.code


def _kernel(stores: set[str], args: KernelArgs | None = None):
    """The parts of a CppKernel the plan reads."""
    return types.SimpleNamespace(
        args=args or KernelArgs(),
        itervars=[X0, X1],
        loads=IndentedBuffer(),
        store_buffer_names=stores,
        invariant_load_candidates=[],
    )


def _candidate(kernel, name: str, index: sympy.Expr):
    candidate = invariant._Candidate(kernel.loads, name, index, f"{name}[{index}]")
    kernel.invariant_load_candidates[:] = [candidate]
    return candidate


@contextlib.contextmanager
def _no_graph():
    """A graph handler without a scheduler, for kernels built by hand."""
    graph = types.SimpleNamespace(
        scheduler=None, removed_buffers=set(), inplaced_to_remove=set()
    )
    with V.set_graph_handler(graph):
        yield


def _inner_loop(var=X1):
    return types.SimpleNamespace(var=var)


def test_load_is_moved_and_read_from_the_local_copy():
    with _no_graph():
        kernel = _kernel(stores={"buf2"})
        candidate = _candidate(kernel, "buf1", X0)
        hoisted = invariant._plan([kernel], _inner_loop())
        assert hoisted.getvalue().strip() == "auto invariant0 = buf1[x0];"
        line = invariant.InvariantLoadLine("buf1", "auto tmp1 = buf1[x0];", candidate)
        assert line() == "auto tmp1 = invariant0;"


def test_memory_the_kernel_writes_is_not_moved():
    with _no_graph():
        kernel = _kernel(stores={"buf1"})
        candidate = _candidate(kernel, "buf1", X0)
        assert not invariant._plan([kernel], _inner_loop()).getvalue()
        assert candidate.local is None


def test_memory_written_through_an_in_place_alias_is_not_moved():
    with _no_graph():
        # buf0 was loaded as out_ptr0 before buf1 was made to reuse its memory
        # (in_out_ptr0): the kernel's store to buf1 writes what the load reads.
        args = KernelArgs()
        args.output_buffers["buf0"] = "out_ptr0"
        args.inplace_buffers["buf0"] = args.inplace_buffers["buf1"] = InplacedBuffer(
            "in_out_ptr0", ["buf0", "buf1"]
        )
        kernel = _kernel(stores={"buf1"}, args=args)
        _candidate(kernel, "buf0", X0)
        assert not invariant._plan([kernel], _inner_loop()).getvalue()


def test_index_must_not_use_the_inner_variable_or_a_computed_value():
    with _no_graph():
        kernel = _kernel(stores=set())
        _candidate(kernel, "buf1", X1 + 8 * X0)
        assert not invariant._plan([kernel], _inner_loop(X1)).getvalue()
        assert invariant._plan([kernel], _inner_loop(sympy.Symbol("x2"))).getvalue()
        kernel.args.sizevars[sympy.Symbol("s0")] = "ks0"
        names_only = invariant.names_only_loops_and_sizes
        assert names_only(kernel, sympy.Symbol("ks0") * X0)
        assert not names_only(kernel, sympy.Symbol("tmp3"))  # an indirect index
        assert not names_only(kernel, sympy.Symbol("x1_tail"))


def test_a_load_printed_otherwise_fails_loudly():
    kernel = _kernel(set())
    candidate = invariant._Candidate(kernel.loads, "buf0", X0, "in_ptr0[x0]")
    line = invariant.InvariantLoadLine("buf0", "auto tmp0 = in_ptr0[x0];", candidate)
    candidate.local = "hoisted0"
    with _no_graph():
        assert line() == "auto tmp0 = hoisted0;"
    with pytest.raises(AssertionError, match="no load"):
        invariant.InvariantLoadLine("buf0", "auto tmp0 = load(in_ptr0, x0);", candidate)
