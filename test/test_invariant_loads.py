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

import re
import types

import torch
from torch._inductor.codegen.common import InplacedBuffer, KernelArgs
from torch._inductor.codegen.cpp_invariant_loads import (
    _is_invariant,
    _rewrite_loads,
    _written_memory,
)
from torch._inductor.utils import IndentedBuffer

from compile_utils import compile_shipped_and_inspect

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


def _kernel(loads: list[str], stores: list[str], args: KernelArgs | None = None):
    kernel = types.SimpleNamespace(
        loads=IndentedBuffer(), stores=IndentedBuffer(), args=args or KernelArgs()
    )
    kernel.loads.writelines(loads)
    kernel.stores.writelines(stores)
    return kernel


def _hoist(kernel, inner_var="x1"):
    preamble: list[str] = []
    written = _written_memory([kernel])
    _rewrite_loads(kernel, inner_var, written, {}, preamble)
    return preamble


def test_load_is_moved_and_read_from_the_local_copy():
    kernel = _kernel(
        ["auto tmp1 = out_ptr1[static_cast<int64_t>(x0)];"],
        ["tmp2.store(out_ptr2 + static_cast<int64_t>(x1 + 8L*x0));"],
    )
    assert _hoist(kernel) == ["auto invariant0 = out_ptr1[static_cast<int64_t>(x0)];"]
    assert kernel.loads.getvalue().strip() == "auto tmp1 = invariant0;"


def test_memory_the_kernel_writes_is_not_moved():
    kernel = _kernel(
        ["auto tmp1 = in_out_ptr0[static_cast<int64_t>(x0)];"],
        ["in_out_ptr0[static_cast<int64_t>(x1 + 8L*x0)] = tmp3;"],
    )
    assert _hoist(kernel) == []


def test_memory_written_through_an_in_place_alias_is_not_moved():
    # buf0 was loaded as out_ptr0 before buf1 was made to reuse its memory
    # (in_out_ptr0): the store to in_out_ptr0 writes what out_ptr0 reads.
    args = KernelArgs()
    args.output_buffers["buf0"] = "out_ptr0"
    args.inplace_buffers["buf0"] = args.inplace_buffers["buf1"] = InplacedBuffer(
        "in_out_ptr0", ["buf0", "buf1"]
    )
    kernel = _kernel(
        ["auto tmp1 = out_ptr0[static_cast<int64_t>(x0)];"],
        ["in_out_ptr0[static_cast<int64_t>(x1 + 8L*x0)] = tmp3;"],
        args,
    )
    assert _hoist(kernel) == []


def test_index_must_not_use_the_inner_variable_or_a_computed_value():
    assert _is_invariant("static_cast<int64_t>(x1 + 8L*x0)", "x2")
    assert _is_invariant("static_cast<int64_t>(ks0*x0)", "x1")
    assert not _is_invariant("static_cast<int64_t>(x1 + 8L*x0)", "x1")
    assert not _is_invariant("static_cast<int64_t>(tmp3)", "x1")
    assert not _is_invariant("static_cast<int64_t>(x1_tail)", "x2")
