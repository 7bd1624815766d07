"""Softmax multiplies by the reciprocal of its sum (cpp.softmax_reciprocal).

The tests read the generated kernel's divisions: patched, the only one is
``1 / sum`` on a scalar, computed once per row and broadcast; stock divides
every element.  They check agreement with eager on rows that a reciprocal
could get wrong (masked with -inf, fully masked, holding inf, logits large
enough to overflow exp without the max), bfloat16, and where the
decomposition falls back to the core one.
"""

from __future__ import annotations

import re

import pytest
import torch
from compile_utils import (
    SHIPPED_DEFAULTS,
    compile_and_run,
    compile_shipped_and_inspect,
    tolerance,
    vector_lanes,
)
from torch._inductor import config
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

import torch._inductor.codegen.cpp_fusion.lowering.softmax_reciprocal as reciprocal

RECIPROCAL_OFF = {"cpp.softmax_reciprocal": False}
aten = torch.ops.aten
ONE = "static_cast<float>(1.0)"
DIVISION = re.compile(r"auto (tmp\d+) = (tmp\d+) / (tmp\d+);")


def _definitions(code: str) -> dict[str, str]:
    return dict(re.findall(r"auto (tmp\d+) = (.*);", code))


def _dividends(code: str) -> list[str]:
    """What each division in the kernel divides, as the C++ defines it."""
    defined = _definitions(code)
    return [defined[dividend] for _, dividend, _ in DIVISION.findall(code)]


def _softmax(dim):
    return lambda x: torch.softmax(x, dim)


@pytest.mark.parametrize("dim", [-1, 2])
def test_softmax_divides_once_per_row(dim):
    fn, args = _softmax(dim), (torch.randn(4, 24, 40),)
    patched = compile_shipped_and_inspect(fn, args)
    stock = compile_shipped_and_inspect(fn, args, overlay=False)
    off = compile_shipped_and_inspect(fn, args, extra_config=RECIPROCAL_OFF)
    assert patched.nests == off.nests  # the flag changes the arithmetic only
    # patched: every division is 1 / sum (one per loop: a tail loop has its own)
    assert set(_dividends(patched.code)) == {ONE}
    # the flag alone gives stock's division of every element back
    assert _dividends(off.code) == _dividends(stock.code)
    assert _dividends(stock.code) and ONE not in _dividends(stock.code)


def test_softmax_over_a_middle_dim_keeps_its_division():
    """Its sums are vectors across the inner dim: a reciprocal there would
    cost a vector division of its own for every vector it multiplies."""
    fn, args = _softmax(1), (torch.randn(4, 24, 40),)
    patched = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=RECIPROCAL_OFF)
    assert patched.kernels == off.kernels


def test_the_reciprocal_is_broadcast_from_a_scalar():
    fn, args = _softmax(-1), (torch.randn(64, 384),)
    lines = compile_shipped_and_inspect(fn, args).code.splitlines()
    at = next(i for i, line in enumerate(lines) if DIVISION.search(line))
    quotient = DIVISION.search(lines[at]).group(1)
    use = next(line for line in lines[at + 1 :] if quotient in line)
    if vector_lanes():
        assert f"= at::vec::Vectorized<float>({quotient});" in use
    else:
        assert re.search(rf"tmp\d+ \* {quotient}\b", use)


def _masked_rows() -> torch.Tensor:
    x = torch.randn(6, 33)
    x[0, 5:] = float("-inf")  # attention mask: a few columns left
    x[1, :] = float("-inf")  # a fully masked row
    x[2, 7] = float("inf")
    x[3] *= 1000.0  # exp overflows unless the max is subtracted
    x[4] = torch.linspace(-104.0, -87.0, 33)  # sums of subnormals without the max
    return x


def test_rows_that_a_reciprocal_could_break_agree_with_eager():
    fn, args = _softmax(-1), (_masked_rows(),)
    (got,), _ = compile_and_run(fn, args, extra_config=SHIPPED_DEFAULTS)
    want = fn(*args)
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance(torch.float32))
    # a row all -inf or holding inf is nan in eager too (-inf - -inf, inf - inf)
    assert got[[1, 2]].isnan().all() and not got[[0, 3, 4, 5]].isnan().any()


def test_bfloat16_keeps_its_dtype():
    fn, args = _softmax(-1), (torch.randn(4, 6, 40).bfloat16() * 48.0,)
    patched = compile_shipped_and_inspect(fn, args)  # agreement and dtype
    assert set(_dividends(patched.code)) == {ONE}


def _decomposes_by_reciprocal(x: torch.Tensor) -> bool:
    """Whether Inductor's decomposition of a softmax over x's last dim
    multiplies by a reciprocal."""
    table = select_decomp_table()
    graph = make_fx(lambda t: aten._softmax(t, -1, False), decomposition_table=table)(
        x
    ).graph
    return any(node.target is aten.reciprocal.default for node in graph.nodes)


def test_reciprocal_only_with_the_flag():
    x = torch.randn(3)
    assert reciprocal.multiplies_by_reciprocal(x, -1)
    with config.patch(RECIPROCAL_OFF):
        assert not reciprocal.multiplies_by_reciprocal(x, -1)


def test_only_the_cpp_backend_of_the_cpu_decomposes_by_reciprocal():
    """decomposition.py asks the backend of the input's device
    (BaseScheduling.decompose): another device, or another CPU backend,
    keeps the core decomposition."""
    x = torch.randn(4, 8)
    with config.patch(SHIPPED_DEFAULTS):
        assert _decomposes_by_reciprocal(x)
        assert not _decomposes_by_reciprocal(x.to("meta"))
        with config.patch(cpu_backend="triton"):
            assert not _decomposes_by_reciprocal(x)


def test_without_hoisted_loads_softmax_keeps_its_division():
    """The reciprocal pays only once per row: with the sum reloaded in every
    iteration it would be a division and a multiply per vector."""
    fn, args = _softmax(-1), (torch.randn(64, 384),)
    hoist_off = {"cpp.hoist_invariant_loads": False}
    patched = compile_shipped_and_inspect(fn, args, extra_config=hoist_off)
    both_off = compile_shipped_and_inspect(
        fn, args, extra_config={**hoist_off, **RECIPROCAL_OFF}
    )
    assert patched.kernels == both_off.kernels
    assert ONE not in _dividends(patched.code)


def test_rows_are_the_last_dim_or_one_followed_by_ones():
    x = torch.randn(2, 3, 1, 1)
    assert reciprocal.multiplies_by_reciprocal(x, 1)
    assert reciprocal.multiplies_by_reciprocal(x, -1)
    assert not reciprocal.multiplies_by_reciprocal(x, 0)
    assert reciprocal.multiplies_by_reciprocal(torch.tensor(2.0), 0)


def test_log_softmax_is_left_alone():
    fn, args = (lambda x: torch.log_softmax(x, -1)), (torch.randn(8, 100),)
    patched = compile_shipped_and_inspect(fn, args)
    off = compile_shipped_and_inspect(fn, args, extra_config=RECIPROCAL_OFF)
    assert patched.kernels == off.kernels
